// Package e2e runs the network policy user stories on the simulated
// cluster (test/testbed) with the real controller and agents
// (test/e2e/framework): KEP-2091's AdminNetworkPolicy /
// BaselineAdminNetworkPolicy stories 1-5, NPEP-122's tenancy stories
// 4.1-4.4 (with ClusterNetworkPolicy and ANP/BANP) and the NetworkPolicy
// documentation's examples, one manifest each under scenarios/.
//
// One cluster serves every scenario: two nodes, namespaces x and y (tenant
// blue), z (tenant red) and m (role monitoring), pods a (app=web) and b
// (app=db) spread over both nodes, each serving TCP and UDP ports 80 and
// 81 under the names serve-PORT-PROTO, each pod behind a Service of its
// own. A scenario applies its manifest, waits until the controller
// reports every policy realized on its span, probes the full matrix (every
// ordered pod pair on every port) in the pods' network namespaces, once by
// pod address and once through the Services' ClusterIPs (the agents'
// Service proxy translates before the egress tiers, so both matrices must
// equal explain's decisions on the pods), probes the row of x/a on TCP/80 and UDP/80
// with `kubectl exec x/a -- /agnhost connect`, and compares every cell
// with pkg/explain over `kubectl get -o yaml` of the live objects. A few
// cells per scenario are also checked against what the story says, so
// that explain and the datapath cannot agree on a wrong answer unnoticed.
// The manifest is then deleted and its removal realized.
//
// Besides the scenarios: DNS through the bed's kube-dns ClusterIP under
// default-deny egress plus "allow UDP and TCP 53 to the kube-dns pods"
// (TestScenarios/dns-through-kube-dns-service; scenarios/svc-*.yaml hold
// the other Service stories), and TestEndpointChurn: a Service's
// backends changing under continuous client load (-churn-changes, 20 in
// make test, 100 in make test-services).
//
// TestScenarios needs root, OVS and the Kubernetes binaries (`make test`
// prepares them); without them it fails.
package e2e
