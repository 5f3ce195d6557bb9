// Package queryapi is the controller's query API for tierctl: what the
// controller computed (policies with their realization, AppliedToGroups,
// AddressGroups) and which rule decides a connection (pkg/explain run over
// the controller's own snapshot and pod inventory).
//
// The API is HTTPS (the controller's serving certificate) with bearer-token
// authentication: every request carries a Kubernetes token, which the
// controller checks with a TokenReview and authorizes with a
// SubjectAccessReview for verb "get" on resource "queries" of API group
// "tierflow.io", resource name the endpoint: snapshot, policies or explain
// (matrix included). A ClusterRole rule
//
//	apiGroups: ["tierflow.io"], resources: ["queries"], verbs: ["get"]
//
// is all a user or service account needs (resourceNames: ["explain"]
// allows only explain); nothing else of the cluster is exposed. Decisions are
// cached for 10 seconds. Responses are JSON; failures carry {"error": "..."}.
//
//	GET /v1/snapshot                          the whole model.Snapshot
//	GET /v1/policies                          policies with realization (N/M nodes)
//	GET /v1/explain?src=&dst=&port=PROTO/PORT explain.Result (same JSON as offline explain)
//	GET /v1/matrix?port=PROTO/PORT[&port=...] []explain.Cell
//
// Client is the Go client tierctl uses.
package queryapi
