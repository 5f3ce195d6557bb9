// Package bench holds tierflow's benchmark drivers, run by `make bench`
// through the report generator in cmd/benchreport, which writes
// _output/bench/report.md and report.json.
//
// Every driver is a Go benchmark in this package's test files, meant to run
// once (-test.benchtime=1x) in a process of its own, so that the peak
// resident set it reports belongs to one scenario. Drivers report their
// figures with testing.B.ReportMetric in units the generator knows (see
// cmd/benchreport); numbers are reported, never asserted. A driver whose
// prerequisites are missing fails, it does not skip.
//
// Scale: BENCH_SCALE=full|quick selects the scenario sizes (default:
// quick when BENCH_QUICK=1, else full). Quick runs the same code paths at
// smaller sizes so the whole report takes minutes; it is part of `make
// test` (TestQuickReport).
//
// The drivers:
//
//   - BenchmarkControllerCompute/SHAPE: the compute engine fed directly
//     with a scenario's objects (computation only).
//   - BenchmarkControllerIncremental/SHAPE: one pod relabel, one namespace
//     relabel, one policy added, on the loaded scenario.
//   - BenchmarkControllerInformers/SHAPE: objects created in a real
//     kube-apiserver (test/kubeapi), then pkg/controller started; timed from
//     the informers' start until the engine holds every policy and pod.
//   - BenchmarkAgentInstall/FLOWS: the agent's realizer installing policies
//     of about FLOWS flows into a real OVS bridge (test/ovsenv) over its
//     OpenFlow connection, against ovs-ofctl --bundle add-flows of the very
//     same flows into a fresh bridge.
//   - BenchmarkDatapathThroughput: iperf3 between two pods with no policy
//     and with 1000 rules realized.
//   - BenchmarkEncapThroughput: iperf3 between pods on two nodes (each its
//     own namespace, OVS and real agent), node network noEncap vs encap.
//   - BenchmarkFanout: datapath-less agents (pkg/agent/nodatapath), in a
//     process of their own (TestMain starts this binary as that process),
//     connected to the real distribution server; time until all have a
//     policy change, and the controller's memory.
//   - BenchmarkE2ELatency: the simulated cluster (test/testbed) with the
//     real controller and agents (test/e2e/framework); time from a policy
//     change's API write until an OpenFlow flow monitor on every node
//     bridge that needs the change reports its flows.
//   - BenchmarkServiceProxy: 10,000 Services (quick: 1,000) in a real
//     kube-apiserver, watched and realized by the agent's Service proxy
//     into a real bridge: first realization, flows and groups per
//     Service, EndpointSlice change → flows acknowledged, and connection
//     setup rate and iperf3 throughput through a ClusterIP against the
//     pod's address in one run.
//
// test/bench/shapes holds the controller's benchmarks on Antrea's harness
// (BenchmarkControllerFromInformerStart, BenchmarkInformersOnly).
//
// Drivers print progress lines starting with "bench: " on stdout (the
// generator shows them while the driver runs). Drivers that need the
// host's one private OVS wait for its lock first (waitOVSLock), saying who
// holds it. cmd/benchreport's TestQuickReport runs the whole quick report
// in `make test` and checks that it is complete.
package bench
