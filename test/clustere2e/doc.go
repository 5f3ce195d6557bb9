// Package clustere2e is `make e2e-cluster`: tierflow on a real cluster of
// this machine (test/cluster: node containers with containerd, the
// kubelet, kube-proxy and CoreDNS), installed as the README tells a user,
// then
//
//   - tierctl as the README shows it, through `kubectl exec` into the
//     controller and the agent pods: get, explain, flows, trace;
//   - both upstream network-policy-api conformance suites, unmodified
//     (test/conformance), with the same claimed features and the same
//     tally as on the simulated bed (every failure an SCTP probe: this
//     kernel has no SCTP);
//   - cyclonus's generated NetworkPolicy cases (TCP and UDP, to pod IPs,
//     Service IPs and Service names; a fixed subset, every case with
//     -cyclonus-include=, as make e2e-cluster-cyclonus does), after a
//     check that its prober notices a cluster that does not do what its
//     model says;
//   - faults: an agent pod deleted, the OVS container killed, a kubelet
//     restarted, the controller's leader pod deleted, each under continuous
//     probes of an allowed and a denied connection: allowed ones recover,
//     denied ones never pass, policy changes are enforced again without
//     operator action; the time each took is reported;
//   - uninstall as the manifests README documents it, leaving nothing on
//     any node.
//
// The tests build with the tag clustere2e only (they take some 40
// minutes): `make e2e-cluster` runs them and ends with one line `N passed, M failed,
// K skipped` (cmd/testsummary). They bring up their own
// cluster (test/cluster, name tierflow-e2e) and remove it at the end;
// TIERFLOW_E2E_CLUSTER_DIR names a cluster that is already up with tierflow
// installed instead (make cluster-up and the README's install), which is
// then left running, and TIERFLOW_E2E_KEEP=1 keeps the one they brought up.
// Reports go to _output/e2e-cluster.
package clustere2e
