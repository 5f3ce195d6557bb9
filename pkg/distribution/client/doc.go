// Package client is the agent's end of distribution: it keeps a Sync
// stream to the controller open, applies the updates to the node's state,
// saves that state on disk, hands each change to the agent (a Receiver)
// and reports what the agent realized.
//
// # What the agent implements
//
// Receiver.Apply gets a wire.Delta: whole objects upserted or deleted
// (address-group patches are already applied), or, when Delta.Full is
// set, the node's complete state replacing everything held before; and
// the node's whole state after it (wire.NodeState, shared and read-only),
// which the agent keeps instead of building a copy of its own: the
// client applies each update once, with wire.NodeState.Apply. Apply
// returns nil when everything in the delta is realized, a PolicyErrors
// naming the policies that failed, or another error meaning the whole
// delta failed. Apply is called from one goroutine, in stream order; while
// it runs the client reads nothing more from the controller (the
// controller copes: a slow agent is resynced, never waited for).
//
// When a policy's realization changes between updates (an agent's retry
// succeeds, a port change breaks it), the agent calls Client.Report; the
// client sends the changed results on the open stream, coalesced, or with
// the next stream's complete report.
//
// # Forwarded queries
//
// With Config.Query (the agent's local query API handler), the client
// serves the queries the controller forwards for tierctl (wire.AgentQuery):
// each runs on its own goroutine (at most 4 at once, more are answered
// 503) within the timeout the controller sent, and its status and body go
// back as a wire.AgentAnswer on the same stream. While Apply runs no
// query is read, so a query waits for the update before it.
//
// # Start and loss of the controller
//
// With a Store, Run first loads the saved state and applies it as a Full
// delta before connecting, so an agent restarting while the controller is
// unreachable enforces the last state it received. Losing the controller
// never changes what the agent enforces: the client only ever applies what
// the controller sent. It reconnects with backoff, sending the epoch and
// version it holds; the controller replays what it missed or sends a Full
// update.
package client
