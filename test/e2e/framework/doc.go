// Package framework runs tierflow on the simulated cluster of test/testbed
// and checks it the way an operator would: real probes between pods
// compared, cell by cell, with pkg/explain's verdicts over the cluster's
// live objects.
//
//   - Start runs the real tierflow-controller binary against the test bed's
//     kube-apiserver and one tierflow-agent binary per node bridge (each
//     with its own conntrack zone, since all node bridges share one
//     ovs-vswitchd), authenticated the way the manifests do it: a service
//     account token bound to an agent pod scheduled on that node.
//     This is the one place tierflow is started on a test bed: the e2e
//     scenarios, the conformance suites, make demo, the benchmarks and
//     `tierflow-testbed up` (make testbed-up) all call it.
//   - WaitRealized waits until the controller reports every policy object
//     it computed at its current generation on every node of its span
//     (query API /v1/policies), and that set is exactly the objects in the
//     API server.
//   - Probe runs a connectivity matrix: `kubectl exec POD -- /agnhost
//     connect` (the operator-visible path) or, for bulk, the same agnhost
//     program run directly in the pod's network namespace.
//   - Expected loads `kubectl get -o yaml` of the live objects through
//     pkg/explain/load and evaluates every cell with pkg/explain.
//   - Compare lists the cells where the two differ.
package framework
