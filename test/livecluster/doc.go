// Package livecluster runs tierflow's live parts for end-to-end tests: a
// real kube-apiserver (test/kubeapi), the real tierflow-controller binary
// (distribution service and query API over TLS) and in-process agents on
// bridges of the private OVS (test/ovsenv), with the Kubernetes objects
// that tie them together (Nodes, agent pods and their bound service
// account tokens, pods for ovsenv's network namespaces, a token user for
// the query API).
//
// pkg/agent/runtime's end-to-end tests and cmd/tierctl's live tests use it.
package livecluster
