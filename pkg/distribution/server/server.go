package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// Source is what the server distributes: the compute engine
// (*compute.Engine satisfies it). Objects it returns are shared and
// immutable; false means the object does not exist.
type Source interface {
	Snapshot() *model.Snapshot
	Policy(id string) (*model.Policy, bool)
	AppliedToGroup(id string) (*model.AppliedToGroup, bool)
	AddressGroup(id string) (*model.AddressGroup, bool)
	// NodePods returns one node's pods (see nodepods.go).
	NodePods(node string) (*model.NodePods, bool)
	Subscribe(fn func([]compute.Change)) (unsubscribe func())
}

// ReportSink receives every realization result an agent reports: the
// node, the policy, the model generation (model.Meta.Generation) the
// result is about, and the error ("" when realized).
type ReportSink func(node string, policyID string, generation int64, err string)

// SummarySink receives a policy's aggregated realization whenever it
// changes; see Summary.
type SummarySink func(Summary)

// Options tune a Server. The zero value is usable.
type Options struct {
	// MaxPending bounds the updates queued for one agent that it has not
	// received yet. An agent that falls further behind loses its queue and
	// gets a full resync when it catches up. Default 256.
	MaxPending int
	// ReplayWindow is how many recent updates per agent are kept so an
	// agent that reconnects can resume instead of resyncing. At least
	// MaxPending; default MaxPending.
	ReplayWindow int
	// HelloTimeout bounds the wait for an agent's Hello. Default 10s.
	HelloTimeout time.Duration
	// ReauthInterval bounds how long an open stream's token goes
	// unchecked: it is reviewed again at random between half and all of
	// it after the last review (so a controller's streams spread their
	// reviews), and at its expiry. A stream whose token is no longer
	// accepted ends. Default 1m.
	ReauthInterval time.Duration
	// ChunkSize bounds the messages sent to agents that reassemble
	// chunks (wire.Hello.Chunks): an update whose JSON encoding is
	// longer goes as wire.Chunks of at most this many bytes (each
	// message a third larger: base64). Default 4 MiB, gRPC's default
	// receive limit.
	ChunkSize int
	// MaxConcurrentFullSyncs bounds the full updates being built and sent
	// at once (each holds its node's whole encoded state in memory):
	// after a controller restart every agent needs one. The others wait
	// their turn, with their connection open. Default 8.
	MaxConcurrentFullSyncs int
	// FullSyncTimeout bounds how long one agent may hold a full-sync
	// slot: an agent that does not read its full update within it loses
	// its stream (and queues again when it reconnects), so a stuck agent
	// cannot block the others. Default 2m.
	FullSyncTimeout time.Duration
	// OnReport and OnSummary receive realization results; called without
	// the server's locks held, one at a time. They must return quickly
	// (queue the work): OnSummary runs on the dispatch path.
	OnReport  ReportSink
	OnSummary SummarySink
	// OnNodePods receives the pods an agent found attached to its node's
	// bridge (wire.PodsReport), whole, each time it reports them; the
	// controller hands them to the engine (compute.Engine.SetReportedPods).
	// Called without the server's locks held, one call at a time.
	OnNodePods func(node string, pods []model.NodePod)
	// Ready, when set, gates agents: until it returns true (the source
	// holds the whole cluster, e.g. the controller's informers synced),
	// streams are refused with Unavailable and agents retry. Serving a
	// half-built model would make every agent drop policies until the
	// sync completes.
	Ready func() bool
	// Registerer receives the server's metrics (nil: not registered).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Server streams each connected agent its node's share of the model.
type Server struct {
	src   Source
	auth  Authenticator
	opts  Options
	log   *slog.Logger
	epoch string
	m     *metrics

	// dirty collects changed object IDs between dispatch rounds.
	dirtyMu  sync.Mutex
	dirty    map[objKey]struct{}
	dirtyAll bool
	// dirtyClock is the highest generation of the changes in dirty: a
	// round has seen every change up to it (see nodepods.go).
	dirtyClock int64
	// dirtySince is when the first change in dirty was reported (zero:
	// none), the Changed time of the updates the next round queues.
	dirtySince time.Time
	wake       chan struct{}

	mu sync.Mutex
	// The distributed state: what the sessions' updates were computed
	// from. Address groups are kept in their wire form.
	policies map[string]*model.Policy
	refs     map[string]*policyRefs     // policies as sent, shared by the sessions
	byRef    map[model.PolicyRef]string // source (without UID) → policy ID
	atgs     map[string]*model.AppliedToGroup
	ags      map[string]*model.AddressGroup
	nodePods map[string]*model.NodePods // wire form, by node
	sessions map[string]*session
	connSeq  uint64
	real     *realization

	// Agent queries forwarded to agents, waiting for their answers.
	querySeq       uint64
	pendingQueries map[uint64]*pendingQuery

	// fullSyncs holds a token per full update being built and sent
	// (Options.MaxConcurrentFullSyncs).
	fullSyncs chan struct{}

	// sinkMu serializes sink calls so they arrive in order.
	sinkMu sync.Mutex

	unsubscribe func()
}

type objKey struct {
	kind compute.ObjectKind
	id   string
}

// New returns a server distributing src. It subscribes to src's changes
// at once; call Run to process them and Register (or GRPCServer) to serve
// agents.
func New(src Source, auth Authenticator, opts Options) *Server {
	if opts.MaxPending <= 0 {
		opts.MaxPending = 256
	}
	if opts.ReplayWindow < opts.MaxPending {
		opts.ReplayWindow = opts.MaxPending
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = 10 * time.Second
	}
	if opts.ReauthInterval <= 0 {
		opts.ReauthInterval = time.Minute
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = 4 << 20
	}
	if opts.MaxConcurrentFullSyncs <= 0 {
		opts.MaxConcurrentFullSyncs = 8
	}
	if opts.FullSyncTimeout <= 0 {
		opts.FullSyncTimeout = 2 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &Server{
		src:      src,
		auth:     auth,
		opts:     opts,
		log:      opts.Logger.With("component", "distribution-server"),
		epoch:    hex.EncodeToString(b[:]),
		dirty:    map[objKey]struct{}{},
		wake:     make(chan struct{}, 1),
		policies: map[string]*model.Policy{},
		refs:     map[string]*policyRefs{},
		byRef:    map[model.PolicyRef]string{},
		atgs:     map[string]*model.AppliedToGroup{},
		ags:      map[string]*model.AddressGroup{},
		nodePods: map[string]*model.NodePods{},
		sessions: map[string]*session{},
		real:     newRealization(),

		fullSyncs: make(chan struct{}, opts.MaxConcurrentFullSyncs),

		pendingQueries: map[uint64]*pendingQuery{},
	}
	s.m = newMetrics(opts.Registerer, s.fullSyncs)
	// Subscribe before the first read, so nothing changed in between is
	// missed; the first round reads the whole snapshot.
	s.unsubscribe = src.Subscribe(s.onChanges)
	s.dirtyAll = true
	s.signal()
	return s
}

// Epoch identifies this server instance; agents holding state from
// another epoch resync in full.
func (s *Server) Epoch() string { return s.epoch }

func (s *Server) onChanges(cs []compute.Change) {
	s.dirtyMu.Lock()
	if s.dirtySince.IsZero() {
		s.dirtySince = time.Now()
	}
	for _, c := range cs {
		s.dirty[objKey{c.Kind, c.ID}] = struct{}{}
		s.dirtyClock = max(s.dirtyClock, c.Generation)
	}
	s.dirtyMu.Unlock()
	s.signal()
}

// ResyncAll makes the next round compare the whole source with what was
// distributed (level-triggered repair; normally never needed).
func (s *Server) ResyncAll() {
	s.dirtyMu.Lock()
	s.dirtyAll = true
	s.dirtyMu.Unlock()
	s.signal()
}

func (s *Server) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run processes source changes until ctx ends. Changes arriving while a
// round runs are coalesced into the next round.
func (s *Server) Run(ctx context.Context) {
	defer s.unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.dispatchRound()
	}
}

// Register adds the distribution service to g. g must authenticate
// nothing itself: the service reads the bearer token from the call's
// metadata.
func (s *Server) Register(g *grpc.Server) { g.RegisterService(&wire.ServiceDesc, s) }

// GRPCServer returns a gRPC server with TLS, keepalives and the
// distribution service registered.
func (s *Server) GRPCServer(tlsConfig *tls.Config, extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tlsConfig)),
		// Find dead agents (cut networks) within a minute.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A complete report lists every policy of the node.
		grpc.MaxRecvMsgSize(64 << 20),
		grpc.MaxSendMsgSize(1 << 30),
	}
	g := grpc.NewServer(append(opts, extra...)...)
	s.Register(g)
	return g
}

// ConnectedNodes lists the nodes with a live stream.
func (s *Server) ConnectedNodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n, ss := range s.sessions {
		if ss.conn != 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// SessionInfo describes one node's stream, for tooling.
type SessionInfo struct {
	Node      string `json:"node"`
	Connected bool   `json:"connected"`
	// Version is the last version queued, Sent the last handed to the
	// stream, Acked the last the agent reported applied.
	Version uint64 `json:"version"`
	Sent    uint64 `json:"sent"`
	Acked   uint64 `json:"acked"`
	// PendingFull names why the next update will be a full one, if so.
	PendingFull string `json:"pendingFull,omitempty"`
	Policies    int    `json:"policies"`
}

// Sessions lists every node's stream, sorted by node.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionInfo, 0, len(s.sessions))
	for _, ss := range s.sessions {
		info := SessionInfo{Node: ss.node, Connected: ss.conn != 0, Version: ss.version, Sent: ss.sent, Acked: ss.acked, Policies: len(ss.policies)}
		if ss.needFull {
			info.PendingFull = ss.fullReason
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// SessionVersion returns the latest stream version queued for node and
// the version the agent last acknowledged.
func (s *Server) SessionVersion(node string) (queued, acked uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[node]; ss != nil {
		return ss.version, ss.acked
	}
	return 0, 0
}
