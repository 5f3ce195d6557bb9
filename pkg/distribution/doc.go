// Package distribution is the path from the controller's computed model to
// the agents; its code is in the packages below it: wire (messages, codec,
// the per-node NodeState and the one place it changes), server (controller
// side: span-filtered deltas per node, resume, authentication, realization
// reports, and the end-to-end tests of the whole stream with real clients),
// client (agent side: the stream, the Receiver interface the agent
// implements, the on-disk state in client/statestore), statusbridge
// (realization into policy status) and disttest (test helpers: TLS
// material, a cuttable TCP proxy). pkg/agent/nodatapath is the agent of
// datapath "none", on top of client. docs/distribution.md describes the
// protocol.
package distribution
