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
// Results are counted per test case: a case is a leaf of the suite's test
// tree (the "Should ..." subtests; a conformance test without subtests is
// one case). SCTP probes cannot succeed here (the kernel has no SCTP
// module, the test bed serves no SCTP): a case whose only failed
// assertions are SCTP probes is marked as such and does not fail
// TestUpstreamConformance; the SCTP tests' policies are checked with the
// agents' ofproto/trace instead (sctp_test.go).
package conformance
