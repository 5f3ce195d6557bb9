// Package proxy is tierflow's Service proxy for pods: it load-balances a
// pod's new connections to Services inside the node's OpenFlow pipeline,
// before the egress policy tiers, so every tier decides on the endpoint
// (pod address and port) a connection goes to, not on the Service's
// address — what the NetworkPolicy documentation and the network-policy-api
// overview promise, and what AntreaProxy does for Antrea.
//
// The data follows one line:
//
//	Services, EndpointSlices, Nodes (API server; Watcher, list and watch)
//	  → pkg/services: each Service port's frontends and endpoints, and
//	    kube-proxy's choice of endpoints for a client on this node
//	  → Compiler: flows for the Service tables and one select group per
//	    port and family, with IDs stable across changes; each Service is
//	    compiled on its own, so a change recompiles only the Services the
//	    Watcher saw change (CompileChanges; a full Compile at the start,
//	    on a new realizer round or node addresses, after a failed update,
//	    or when a frontend two Services claim is involved)
//	  → pkg/agent/realizer: one atomic bundle (groups and flows), apart
//	    from the policy flows (flowsync parts), of the changed Services'
//	    flows and groups only (UpdateServiceChanges)
//	  → then conntrack flushes of what left, and again once the switch
//	    revalidated its datapath flows (pkg/agent/runtime).
//
// The tables, registers and cookies are pkg/agent/pipeline's; DESIGN.md
// there has the whole picture ("Services"). In short: a local pod's new
// connection (ConntrackState) is resubmitted to ServiceNodePort (its
// destination is a node address: reg6 bit), ServiceAffinity (flows the
// switch learned for ClientIP affinity load the endpoint) and ServiceLB
// (frontend → the port's group; each bucket loads an endpoint ID into
// reg7); ServiceDNAT commits the connection with its destination NAT to
// the endpoint — marked blocked until policy allows it — and the packet
// goes on to the egress tiers with the endpoint's address and port.
// Replies are un-NATed by the conntrack lookup every packet gets.
//
// A frontend without usable endpoint sends new connections to the agent
// (a Controller action); Rejecter answers each with an ICMP port
// unreachable from the Service's address, as kube-proxy's REJECT, at most
// RejectRate a second. internalTrafficPolicy Local without a local
// endpoint drops, as kube-proxy does.
//
// What left is ended: when an endpoint leaves a port, or a frontend goes,
// the connections through it are deleted from conntrack (by original
// destination and reply source, only this node's zone) after the bundle
// that stopped choosing it, and the affinities learned for it go in that
// bundle; the agent flushes them again once the switch has revalidated
// its datapath flows (a flow cached from the old tables can commit a
// flushed connection's next packet to the endpoint again), except those
// of endpoints and frontends that came back by then (Compiler.StillOut).
// A flush that fails for a transient reason (the OpenFlow connection
// dropped or reconnects, a timeout) is tried again, with backoff, until
// it succeeds, what it ends is back, or the agent stops; one the switch
// rejects (no NXT_CT_FLUSH before OVS 3.1) is not.
// Connections to endpoints that stay are never touched.
package proxy
