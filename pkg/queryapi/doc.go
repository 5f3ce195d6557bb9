// Package queryapi is the controller's query API for tierctl: what the
// controller computed (policies with their realization, AppliedToGroups,
// AddressGroups) and which rule decides a connection (pkg/explain run over
// the controller's own snapshot and pod inventory).
//
// The API is HTTPS (the controller's serving certificate) with bearer-token
// authentication: every request carries a Kubernetes token, which the
// controller checks with a TokenReview and authorizes with a
// SubjectAccessReview for verb "get" on resource "queries" of API group
// "tierflow.io", resource name the endpoint: snapshot, policies, explain
// (matrix included), flows (an agent's status, realization, rules, pods,
// flows and bridge dump) or trace (an agent's ofproto/trace). A ClusterRole rule
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
//	GET /v1/nodes[?pod=NS/NAME&ip=ADDR]       connected nodes (hosting those pods/addresses)
//	GET /v1/nodes/{node}/agent/v1/{endpoint}  node's agent query API (pkg/queryapi/agentquery):
//	                                          status, realization, rules, pods, flows,
//	                                          bridge-flows, trace, ofproto-trace
//
// The /v1/nodes/ requests are forwarded to the node's agent over its
// distribution stream (pkg/distribution/wire.AgentQuery) and the agent's
// answer is passed on unchanged; an agent not connected to this controller
// is 502 "node NODE unreachable", no answer within 20 s is 504. No
// listener is opened on nodes.
//
// Only the leading controller replica has answers (the others compute
// nothing). The other replica's query API forwards every request to the
// leader's (WithForwarding), so tierctl run in either pod (kubectl exec
// lands in any pod of the Deployment) gets the leader's answer: the
// request goes unchanged, its bearer token included, and the leader
// authenticates and authorizes it as if it had been made to it; the answer
// comes back unchanged with the header Tierflow-Leader. The follower finds
// the leader from the Lease holder and the leader's EndpointSlice of the
// controller Service (pkg/controller/leaderendpoints), dials its address
// and verifies its certificate against the CA, by the DNS name of the
// serving certificate both replicas share (LeaderTLS). It answers itself
// only to say why it cannot forward: 503 when no leader is known (none
// elected, or the new one has not published its address yet) and 502 when
// the leader does not answer. A request is forwarded at most once.
//
// Client is the Go client tierctl uses.
package queryapi
