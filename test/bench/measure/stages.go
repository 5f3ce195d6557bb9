package measure

// Stage is one stage of a measured way: its metric key and what it is.
type Stage struct{ Key, What string }

// E2EStages are the stages of a change's way from its API write to the
// bridge's report, timed on the node whose report came last: each from
// the previous stage's stamp to its own, so they add up to the change's
// latency. The stamps are made where each stage happens (the controller's
// travel with the update, wire.Trace; the agent's are on its /v1/updates),
// all on this machine's clock. The end-to-end driver reports each as
// metrics KIND-KEY-p50-ms (p90, p99, max) and stage-KEY-p50-ms (all
// changes); the report tabulates them.
var E2EStages = []Stage{
	{"controller", "the API write, its watch event, the controller's event queue and engine, until the engine reported the change to the distribution server"},
	{"dispatch", "the distribution round, until it queued the node's update"},
	{"send", "from queued until the node's stream started sending it"},
	{"transport", "gRPC, TLS and decoding, until the agent's stream delivered it"},
	{"agent-queue", "the agent's rule cache update and any realization still running"},
	{"compile", "the agent's port list, compilation and diff, until its bundle started"},
	{"bundle", "encoding and writing the bundle, ovs-vswitchd's turn, barrier and commit, until the commit reply arrived"},
	{"monitor", "from the commit reply until this process read the flow monitor's report"},
}
