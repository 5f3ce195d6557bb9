// Package server is the controller's end of distribution: it streams
// every agent the span-filtered share of the compute engine's model
// (wire.ForNode), as a full update followed by deltas, and collects the
// agents' realization reports.
//
// Use:
//
//	srv := server.New(engine, authn, server.Options{OnSummary: statusWriter})
//	go srv.Run(ctx)                      // turns engine changes into updates
//	g := srv.GRPCServer(tlsConfig)       // or srv.Register(existing)
//	g.Serve(listener)
//
// # Deltas
//
// New subscribes to the engine. Each dispatch round reads the objects
// that changed since the last round and, for every node's session,
// derives what that node's state loses or gains: policies entering or
// leaving its span (or changing generation), applied-to groups whose
// members on that node changed (changes on other nodes are not sent),
// address groups as member patches when the patch is smaller than the
// group. Group additions/removals follow policy references with
// per-session reference counts. Rounds coalesce: a burst of engine changes
// becomes one update per affected node.
//
// # Versions, resume, resync
//
// Each node has a session with a version that increases by one per
// update, and the epoch of this server process. The last ReplayWindow
// updates are kept; an agent reconnecting with (epoch, version) inside
// that window gets only what it missed. Anything else — a new controller
// process, an older version, a lost queue — gets a Full update built from
// the current state.
//
// # Chunks and full-sync slots
//
// To agents that reassemble them (wire.Hello.Chunks), updates larger than
// ChunkSize go as wire.Chunks. A full update is built and sent only while
// holding one of MaxConcurrentFullSyncs slots: after a controller restart
// the agents wait their turn, connected, instead of every node's encoded
// state being in memory at once. A slot is held at most FullSyncTimeout.
//
// # Slow agents
//
// Updates are queued per session without blocking; one goroutine per
// connection sends them. If an agent is more than MaxPending updates
// behind, its queue is dropped and it gets one Full update when it reads
// again: a stuck agent costs bounded memory and never delays others.
//
// # Authentication
//
// Agents send their service account token as a bearer token. The
// TokenReviewAuthenticator reviews it and takes the node from the token's
// binding (see its doc): a token is only ever good for the node its pod
// runs on, so node A's token cannot receive node B's objects. The node is
// never taken from anything the agent says. An open stream's token is
// reviewed again every ReauthInterval (bypassing the authenticator's
// cache, see Rechecker) and at its expiry; the stream ends when the token
// is refused (its pod deleted) or names another node.
//
// # Realization
//
// Agents report, per policy, the model generation they realized or the
// error. OnReport sees every result; OnSummary sees a policy's
// aggregated Summary (realized on N of M span nodes, failures by node)
// whenever it changes, which the controller's status writer turns into
// conditions.
//
// # Node pods
//
// Each node also gets its pods (model.NodePods), which its agent admits
// ports by. An entry is never sent ahead of the group changes of its
// generation: a round keeps only the entries whose generation it has taken
// the changes of, and a later round sends the others (nodepods.go). Agents
// report the pod ports of their bridges (wire.PodsReport); Options.OnNodePods
// hands them to the engine, which takes a new pod's addresses from them
// before the kubelet reports them.
//
// # Agent queries
//
// AgentQuery forwards a request of an agent's local query API to the
// node's agent on its stream (wire.AgentQuery, sent by the connection's
// sending goroutine) and waits for the wire.AgentAnswer: tierctl's remote
// flows and trace, through the query API (pkg/queryapi). A node without an
// open stream, or whose stream ends while the query waits, fails at once
// with ErrNodeUnreachable; a missing answer fails at the caller's
// deadline. Answers are matched by ID and node.
//
// # Tests
//
// Besides its unit tests, this directory holds the distribution's
// end-to-end tests (package server_test): a compute engine, a TLS server
// and several agents (pkg/distribution/client with pkg/agent/nodatapath)
// in one process, through restarts, cut networks, stuck agents and
// TokenReview authentication on a real kube-apiserver, and the fan-out
// benchmark (BenchmarkFanOut).
package server
