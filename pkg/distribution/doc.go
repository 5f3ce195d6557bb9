// Package distribution is the path from the controller's computed model to
// the agents: wire (messages, codec, the per-node NodeState and its update
// rules), server (controller side: span-filtered deltas per node, resume,
// authentication, realization reports), client (agent side: the stream,
// the Receiver interface the agent implements, the on-disk state in
// client/statestore) and disttest (test helpers: TLS material, a
// cuttable TCP proxy). pkg/agent/nodatapath is a datapath-less agent on top of
// client. The tests in this directory run a compute engine, a TLS server
// and several agents in one process.
package distribution
