// Package agentquery is the agent's local query API: what tooling on the node
// (tierctl flows, tierctl trace) asks a running tierflow-agent, over HTTP
// with JSON bodies on a unix socket (root-only, node-local: the API has no
// authentication of its own, the socket's file mode is its access control).
//
// Endpoints (all GET):
//
//	/v1/status       node, datapath, controller stream position, readiness
//	/v1/realization  per policy: the generation the bridge enforces, or the error
//	/v1/updates      the last updates from the controller, each with when it
//	                 passed every stage from the controller to the bridge
//	/v1/rules        the cookie → rule map (rule IDs of this run's cookie round)
//	/v1/flows        installed flows with counters, filtered by
//	                 ?policy=KIND/[NS/]NAME or policy ID, &direction=In|Out,
//	                 &rule=INDEX, &table=NAME, &pod=NS/NAME
//	/v1/pods         the local pods the agent maps to OpenFlow ports
//	/v1/trace        ofproto/trace of a new connection's first packet, with
//	                 the rules it met: ?src=NS/POD|IP&dst=IP&protocol=TCP&port=N
//	/v1/ofproto-trace  ofproto/trace of ?flow=SPEC (an ovs-ofctl flow) as a new
//	                 connection: tierctl trace's packets, when tierctl is not
//	                 on the node
//	/v1/bridge-flows ovs-ofctl dump-flows of the bridge (tierctl flows --check)
//
// The controller forwards these requests over the agent's distribution
// stream (pkg/distribution/wire.AgentQuery) for tierctl's remote use; the
// agent answers them with the same handler as the socket.
//
// The types below are the wire format; Client is the Go client tierctl uses.
// They are a contract between the agent, the controller (which forwards
// queries without reading them) and tierctl: this package depends on
// pkg/model alone, so neither the controller nor tierctl's offline
// commands pull in the agent's flow compiler or OpenFlow client.
package agentquery
