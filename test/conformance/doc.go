// Package conformance runs the upstream network-policy-api conformance
// suites, unmodified, against tierflow on the simulated cluster
// (test/testbed):
//
//   - sigs.k8s.io/network-policy-api v0.1.7 conformance/, profiles
//     AdminNetworkPolicy and BaselineAdminNetworkPolicy;
//   - sigs.k8s.io/network-policy-api v0.2.0 conformance/, profile
//     ClusterNetworkPolicy.
//
// Each suite runs from its own module source: the module is taken from the
// Go module cache (`go mod download`), copied to a temporary directory
// (the cache is read-only and the suite resolves its own go.sum with
// GOFLAGS=-mod=mod) and run there with `go test -json` and the suite's own
// flags (conformance/utils/flags), KUBECONFIG pointing at the test bed.
// Nothing of the upstream code is copied into this repository or edited.
//
// Tierflow runs on the bed as in the end-to-end tests (test/e2e/framework):
// the tierflow-controller binary and one tierflow-agent binary per node.
//
// Features claimed (see Suites): every feature of both suites, that is the
// profiles' standard features, named ports and egress node peers. The
// node-peer tests probe the servers of hostNetwork pods at their node's
// address; the test bed serves them in the host's namespace on that
// address, and the packets take the same path as in a cluster: the client
// node's egress tables, its uplink, the fabric. Only that path: the host's
// stack does not receive the pods' frames on their veths (tierflow-cni's
// host guard, package pkg/cni/hostguard). Without it the host answered a
// fresh pod's ARP for a node address on the veth, and the pod's packets to
// that address went around OVS: the v0.1.7 "deny-egress" UDP probe to a
// node passed in about one run in ten.
//
// Results are counted per test case: a case is a leaf of the suite's test
// tree (the "Should ..." subtests; a conformance test without subtests is
// one case).
//
// SCTP: the kernel here has no SCTP module and the test bed serves no SCTP,
// so no SCTP probe can succeed. A case whose only failed assertions are
// SCTP probes is marked as such (Case.FailedOnSCTPOnly); it still counts as
// failed in the tally, as upstream reports it, but does not fail
// TestUpstreamConformance. Instead, every upstream test that probes SCTP
// is replayed after the suites (sctp_test.go): the SCTP tests, the
// mixed-protocol "gress" tests, the inline-CIDR tests and the node-peer
// tests, of both suites and both tiers. Each manifest is applied
// unmodified (v0.2.0's templates rendered as its suite renders them), then
// each subtest's policy changes (rule swaps, the inline-CIDR test's
// inserted allow rule) and its SCTP probes run in order, every probe
// checked with the agents' ofproto/trace of the connection's first packet.
// Across nodes that is the client node's egress verdict (did the packet
// leave by the uplink?) and then the server node's ingress verdict (a
// trace of the same packet arriving by its uplink). Every traced probe
// must agree with upstream's expectation or the test fails. The replay is
// a transcription of the upstream tests' patches and SCTP probes (pods,
// ports, expected outcome), checked against both versions' sources; it
// must be revisited when a suite version changes.
//
// TestCyclonus runs cyclonus's generated NetworkPolicy cases (package
// test/cyclonus, TCP and UDP) on an encap bed of its own (the release
// default node network; it takes no host-wide OVS lock) through Services:
// each server pod's ClusterIP (--destination-type service-ip) and its DNS
// name (service-name, through the bed's kube-dns). It runs cmd/cyclonus-
// batch, cyclonus's generator, model and report with its batch prober
// (one exec of /worker per source pod and step; on the bed /worker is
// cmd/cyclonus-worker, which enters the pod's network namespace itself),
// and whose interpreter gives the pods a case creates or relabels their
// Service's address (cyclonus v0.5.6 leaves it empty). make test runs a
// smoke (the cases tagged namespaces-by-default-label,
// ip-block-with-except, create-pod, create-namespace or set-pod-labels)
// through both; make cyclonus every case through both. MidCasePodsReached then shows that the pods a case creates
// or relabels are probed through their own Services: with
// AdminNetworkPolicies that cyclonus's model does not know denying
// ingress to exactly those pods, the create-pod, create-namespace and
// set-pod-labels cases must fail. A probe through a
// name resolves it through the pod's search list (ndots 5: four names, A
// and AAAA each) within the probe's timeout, so the bed's DNS answers
// from a watch of the Services, as CoreDNS does (test/testbed/noderuntime
// ServiceLookup).
//
// `make conformance` prints every case, a line on the SCTP cases and the
// trace check, and ends with `N passed, M failed, K skipped`.
//
// Service addresses: the upstream suites are not probed through Services.
// They run unmodified, create no Service, and every probe is `kubectl exec
// CLIENT -- /agnhost connect HOST:PORT` (PokeServer, both versions) with
// HOST the server pod's address from its status, a node's address (egress
// node peers) or a CIDR peer's; probing them through Services would need
// Services they do not make and probes they do not send. What probes
// policy through Service addresses instead: test/e2e's matrices (every pod
// behind a Service of its own, framework.ExposePods; each cell probed to
// the pod and through its ClusterIP, where policy must decide the same),
// TestCyclonus here (cyclonus's generated cases through service-ip and
// service-name), the same cyclonus cases on the real cluster
// (test/clustere2e), and the Service proxy's own tests (an egress Deny
// toward a namespace blocking its Services, default-deny egress with DNS
// allowed to the kube-dns pods working through the kube-dns ClusterIP, a
// NetworkPolicy egress rule to pods behind a Service allowing the Service,
// endpoint churn).
//
// Encap: with TIERFLOW_TESTBED_ENCAP=1 (`make test-encap`) the same test
// runs on the encap test bed (testbed.Options.Encap: every node its own
// namespace and OVS, on its own subnet behind a router that drops pod
// addresses; the agents in encap mode). Pods' cross-node traffic then
// crosses the tunnel; a node-peer probe goes through the client node's
// gateway and host to the server node's InternalIP, where its hostNetwork
// servers run. The SCTP replay traces the server node from its tunnel
// port, with the client node's endpoint as tun_src. Reports go to
// _output/conformance-encap. `make test` runs a smoke of both suites on
// the encap bed: two of each suite's tests (Suite.Tests), in TestEncapBed
// (pkg/agent/runtime).
package conformance
