package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/tierflow/tierflow/pkg/distribution/client/statestore"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// Receiver is what the agent implements: see the package doc.
type Receiver interface {
	// Apply hands the agent one change: d is what changed, st the node's
	// whole state after it, the one the client holds. st is shared and
	// read-only: the client never changes it again (the next update is
	// applied to a copy), so the agent keeps it as its state instead of
	// applying d to a copy of its own.
	Apply(d *wire.Delta, st *wire.NodeState) error
}

// PolicyErrors is a Receiver's per-policy failure: the listed policies
// failed, every other policy of the delta was realized.
type PolicyErrors map[string]error

func (e PolicyErrors) Error() string {
	ids := make([]string, 0, len(e))
	for id := range e {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, id+": "+e[id].Error())
	}
	return "policies not realized: " + strings.Join(parts, "; ")
}

// MaxMessageSize bounds one update from the controller (1 GiB): its
// message, or the chunks it comes in put together. The controller chunks
// updates for agents that say they reassemble them (this one does), so
// its messages are far smaller; the limit stays for controllers that do
// not chunk.
const MaxMessageSize = 1 << 30

// Config configures a Client.
type Config struct {
	// Address of the controller's distribution service (host:port).
	Address string
	// TLS for the connection; must verify the controller (RootCAs,
	// ServerName).
	TLS *tls.Config
	// Token returns the bearer token; called for every connection, so a
	// rotated projected token file is picked up (see TokenFile).
	Token func() (string, error)
	// Node is the agent's node name; it only labels logs and the state
	// (the controller takes the node from the token).
	Node     string
	Receiver Receiver
	// Query, if set, serves the agent queries the controller forwards on
	// the stream (tierctl's remote flows and trace): the agent's local
	// query API handler. Without it such queries are answered 501.
	Query http.Handler
	// Store, if set, persists the received state and restores it at start.
	Store *statestore.Store
	// Backoff between connection attempts: from MinBackoff (default
	// 200ms), doubling to MaxBackoff (default 10s), with jitter.
	MinBackoff, MaxBackoff time.Duration
	// DialOptions are added to the connection's (tests: custom dialers,
	// window sizes).
	DialOptions []grpc.DialOption
	// Registerer receives the client's metrics (nil: not registered).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// TokenFile returns a Token function reading a (projected, rotating)
// token file.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// Client keeps one agent's state in sync with the controller.
type Client struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	epoch   string
	version uint64
	state   *wire.NodeState
	results map[string]wire.PolicyResult
	// pending holds results the agent pushed with Report, newest per
	// policy, not yet merged into results; reportKick wakes the stream
	// to send them.
	pending    map[string]wire.PolicyResult
	reportKick chan struct{}
	// pods is what ReportPods last set (podsSet: it was called);
	// podsKick wakes the stream to send it.
	pods      []model.NodePod
	podsSet   bool
	podsKick  chan struct{}
	connected bool
	stats     Stats
	changed   chan struct{} // closed and replaced on every applied update
	saver     *saver
	m         *metrics
}

// Stats counts what a client received.
type Stats struct {
	Connections  int
	FullUpdates  int
	DeltaUpdates int
	// Restored: the state was loaded from the store at start.
	Restored bool
}

// New checks cfg and returns a client; Run starts it.
func New(cfg Config) (*Client, error) {
	if cfg.Address == "" || cfg.TLS == nil || cfg.Token == nil || cfg.Receiver == nil {
		return nil, errors.New("distribution client: Address, TLS, Token and Receiver are required")
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Client{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "distribution-client", "node", cfg.Node),
		state:   wire.NewNodeState(cfg.Node),
		results: map[string]wire.PolicyResult{},
		pending: map[string]wire.PolicyResult{},
		// Buffered: Report never blocks, and any number of calls between
		// two sends coalesce into one report.
		reportKick: make(chan struct{}, 1),
		podsKick:   make(chan struct{}, 1),
		changed:    make(chan struct{}),
		saver:      newSaver(cfg.Store, cfg.Logger),
		m:          newMetrics(cfg.Registerer),
	}, nil
}

// State returns the stream position and a copy of the state held.
func (c *Client) State() (epoch string, version uint64, st *wire.NodeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch, c.version, c.state.Clone()
}

// Connected reports whether a stream is open.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Changed returns a channel closed at the next applied update.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Report tells the controller the agent's current realization outcome for
// the listed policies, at any time: a failed realization that a later
// retry fixed, or a realization that failed after a port change. It never
// blocks and may be called from any goroutine, also from within
// Receiver.Apply. Results are coalesced (the newest per policy wins) and
// sent on the open stream as one Report carrying only those that differ
// from what the controller was last told; while disconnected they are
// kept and included in the complete report of the next stream. A result
// for a policy the client does not hold at that generation (a stale
// outcome, or a deleted policy) is dropped.
//
// An agent reports from the same serialized sequence of realizations it
// returns from Apply, so the newest result is always its latest outcome.
func (c *Client) Report(results []wire.PolicyResult) {
	if len(results) == 0 {
		return
	}
	c.mu.Lock()
	for _, r := range results {
		c.pending[r.PolicyID] = r
	}
	c.mu.Unlock()
	select {
	case c.reportKick <- struct{}{}:
	default:
	}
}

// ReportPods tells the controller which pods are attached to the node's
// bridge (wire.PodsReport): each stream sends the latest list when it
// opens and whenever it changes. It never blocks.
func (c *Client) ReportPods(pods []model.NodePod) {
	c.mu.Lock()
	c.pods, c.podsSet = slices.Clone(pods), true
	c.mu.Unlock()
	select {
	case c.podsKick <- struct{}{}:
	default:
	}
}

// podsToSend returns the pods to report on a stream that last sent sent
// (nil: nothing new).
func (c *Client) podsToSend(sent *[]model.NodePod, first bool) *wire.PodsReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.podsSet || (!first && slices.EqualFunc(*sent, c.pods, sameNodePod)) {
		return nil
	}
	*sent = c.pods
	return &wire.PodsReport{Pods: c.pods}
}

func sameNodePod(a, b model.NodePod) bool {
	return a.Pod == b.Pod && a.UID == b.UID && slices.Equal(a.IPs, b.IPs)
}

// takePending merges the results pushed through Report into the results
// the controller knows of and returns those that changed. Results for a
// policy the state does not hold at that generation are dropped: the
// state only moves with updates, and Apply (which moves the agent's state)
// runs before the pending results of that update are taken. Called with
// c.mu held.
func (c *Client) takePending() []wire.PolicyResult {
	var out []wire.PolicyResult
	for id, r := range c.pending {
		delete(c.pending, id)
		p := c.state.Policies[id]
		if p == nil || p.Generation != r.Generation {
			continue
		}
		if prev, ok := c.results[id]; ok && prev == r {
			continue
		}
		c.results[id] = r
		out = append(out, r)
	}
	return out
}

// Run restores the saved state (if any), then keeps the stream open until
// ctx ends.
func (c *Client) Run(ctx context.Context) error {
	if err := c.restore(); err != nil {
		// A bad state file must not keep the agent from syncing.
		c.log.Error("ignoring saved state", "err", err)
	}
	defer c.saver.flush()
	conn, err := grpc.NewClient(c.cfg.Address, append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.TLS)),
		grpc.WithPerRPCCredentials(tokenCreds{c.cfg.Token}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// A full update carries the node's whole state in one message:
		// far more than gRPC's 4 MiB default in a large cluster.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize)),
	}, c.cfg.DialOptions...)...)
	if err != nil {
		return fmt.Errorf("distribution client: %w", err)
	}
	defer conn.Close()

	backoff := c.cfg.MinBackoff
	for {
		progressed, err := c.session(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		if progressed {
			backoff = c.cfg.MinBackoff
		}
		c.log.Info("stream ended; reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
}

func (c *Client) restore() error {
	if c.cfg.Store == nil {
		return nil
	}
	sv, err := c.cfg.Store.Load()
	if err != nil || sv == nil {
		return err
	}
	if c.cfg.Node != "" && sv.State.Node != "" && sv.State.Node != c.cfg.Node {
		return fmt.Errorf("saved state is for node %q, this is %q", sv.State.Node, c.cfg.Node)
	}
	if sv.State.Node == "" {
		// The agent reads its own members by the state's node name.
		sv.State.Node = c.cfg.Node
	}
	d := sv.State.FullDelta(sv.Version)
	err = c.cfg.Receiver.Apply(d, sv.State)
	c.mu.Lock()
	c.epoch, c.version, c.state = sv.Epoch, sv.Version, sv.State
	c.stats.Restored = true
	c.recordResults(d, err)
	c.mu.Unlock()
	c.log.Info("restored saved state", "epoch", sv.Epoch, "version", sv.Version, "policies", len(sv.State.Policies), "savedAt", sv.SavedAt)
	return nil
}

// session runs one stream; progressed says whether it applied an update.
func (c *Client) session(ctx context.Context, conn *grpc.ClientConn) (progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := wire.OpenSync(sctx, conn)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	hello := &wire.Hello{Epoch: c.epoch, Version: c.version, Chunks: true}
	c.mu.Unlock()
	if err := stream.Send(&wire.ClientMessage{Hello: hello}); err != nil {
		return false, err
	}
	var podsSent []model.NodePod
	if rep := c.podsToSend(&podsSent, true); rep != nil {
		if err := stream.Send(&wire.ClientMessage{Pods: rep}); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	c.connected = true
	c.stats.Connections++
	c.mu.Unlock()
	c.m.connected.Set(1)
	defer func() {
		c.mu.Lock()
		c.connected = false
		c.mu.Unlock()
		c.m.connected.Set(0)
	}()

	// Sends happen on this goroutine only (gRPC allows one sender at a
	// time); a second goroutine receives, so that reports pushed by the
	// agent go out while no update arrives.
	type received struct {
		m   *wire.ServerMessage
		at  time.Time // when Recv returned it (decoded)
		err error
	}
	recv := make(chan received)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case recv <- received{m, time.Now(), err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	// Forwarded queries are served on their own goroutines; their answers
	// come back here to be sent.
	answers := make(chan *wire.AgentAnswer, maxConcurrentQueries)
	querySlots := make(chan struct{}, maxConcurrentQueries)

	// Chunked updates are put together here; the pieces of an update the
	// stream did not finish are dropped with it: nothing of it is applied.
	asm := wire.Assembler{MaxSize: MaxMessageSize}
	first := true
	for {
		var r received
		select {
		case <-sctx.Done():
			return progressed, sctx.Err()
		case a := <-answers:
			if err := stream.Send(&wire.ClientMessage{Answer: a}); err != nil {
				return progressed, err
			}
			continue
		case <-c.podsKick:
			if rep := c.podsToSend(&podsSent, false); rep != nil {
				if err := stream.Send(&wire.ClientMessage{Pods: rep}); err != nil {
					return progressed, err
				}
			}
			continue
		case <-c.reportKick:
			if first {
				// Nothing goes out before the first update is applied: our
				// version may be another epoch's, and the first report is
				// complete anyway (it takes the pending results).
				continue
			}
			c.mu.Lock()
			results := c.takePending()
			rep := &wire.Report{AppliedVersion: c.version, Results: results}
			c.mu.Unlock()
			if len(results) == 0 {
				continue
			}
			sortResults(rep.Results)
			c.m.reports.Inc()
			if err := stream.Send(&wire.ClientMessage{Report: rep}); err != nil {
				return progressed, err
			}
			continue
		case r = <-recv:
		}
		if r.err != nil {
			return progressed, r.err
		}
		m := r.m
		if m.Query != nil {
			c.serveQuery(sctx, m.Query, querySlots, answers)
		}
		u := m.Update
		switch {
		case m.Chunk != nil && u != nil:
			return progressed, errors.New("a message with both an update and a chunk")
		case m.Chunk != nil:
			if u, err = asm.Add(m.Chunk); err != nil {
				return progressed, err
			}
		case u != nil && asm.Pending():
			return progressed, fmt.Errorf("update %d arrived before the chunked update was complete", u.Version)
		}
		if u == nil {
			continue
		}
		rep, err := c.apply(u, r.at, first)
		if err != nil {
			// The update does not fit what we hold: forget our position so
			// the next stream starts with a full update.
			c.mu.Lock()
			c.epoch, c.version = "", 0
			c.mu.Unlock()
			return progressed, err
		}
		progressed, first = true, false
		if err := stream.Send(&wire.ClientMessage{Report: rep}); err != nil {
			return progressed, err
		}
	}
}

func sortResults(rs []wire.PolicyResult) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].PolicyID < rs[j].PolicyID })
}

// apply applies one update, received at received, and returns the
// report to send.
func (c *Client) apply(u *wire.Update, received time.Time, firstOfStream bool) (*wire.Report, error) {
	c.mu.Lock()
	if !u.Full && (u.Epoch != c.epoch || u.Version != c.version+1) {
		c.mu.Unlock()
		return nil, fmt.Errorf("update %s/%d does not follow %s/%d", u.Epoch, u.Version, c.epoch, c.version)
	}
	next := c.state.Clone()
	c.mu.Unlock()

	d, err := next.Apply(u)
	if err != nil {
		return nil, err
	}
	d.Received = received
	c.saver.offer(u.Epoch, u.Version, next)
	start := time.Now()
	applyErr := c.cfg.Receiver.Apply(d, next)
	c.m.applyDuration.Observe(time.Since(start).Seconds())
	kind := "delta"
	if u.Full {
		kind = "full"
	}
	c.m.updates.WithLabelValues(kind).Inc()
	c.m.version.Set(float64(u.Version))

	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch, c.version, c.state = u.Epoch, u.Version, next
	if u.Full {
		c.stats.FullUpdates++
	} else {
		c.stats.DeltaUpdates++
	}
	results := c.recordResults(d, applyErr)
	// Outcomes the agent pushed during (or before) Apply are newer than
	// or equal to Apply's return value: they go in the same report.
	if pushed := c.takePending(); len(pushed) > 0 {
		byID := make(map[string]int, len(results))
		for i, r := range results {
			byID[r.PolicyID] = i
		}
		for _, r := range pushed {
			if i, ok := byID[r.PolicyID]; ok {
				results[i] = r
			} else {
				results = append(results, r)
			}
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	rep := &wire.Report{AppliedVersion: u.Version, Results: results}
	if u.Full || firstOfStream {
		// After a full update or a reconnection, tell the controller
		// everything, replacing what it remembers of this node.
		rep.Complete = true
		rep.Results = make([]wire.PolicyResult, 0, len(c.results))
		for _, r := range c.results {
			rep.Results = append(rep.Results, r)
		}
	}
	sortResults(rep.Results)
	return rep, nil
}

// recordResults updates the per-policy results after the receiver applied
// d and returns the ones that changed or were re-confirmed. Called with
// c.mu held; c.state must already be the state after d.
func (c *Client) recordResults(d *wire.Delta, applyErr error) []wire.PolicyResult {
	if d.Full {
		clear(c.results)
	}
	for _, id := range d.DeletedPolicies {
		delete(c.results, id)
	}
	st := c.state
	// The policies the delta affects: those it carries, and those using a
	// group it changed.
	affected := map[string]bool{}
	for _, p := range d.Policies {
		affected[p.ID] = true
	}
	groups := map[string]bool{}
	for _, g := range d.AppliedToGroups {
		groups[g.ID] = true
	}
	for _, id := range d.DeletedAppliedToGroups {
		groups[id] = true
	}
	for _, g := range d.AddressGroups {
		groups[g.ID] = true
	}
	for _, id := range d.DeletedAddressGroups {
		groups[id] = true
	}
	if len(groups) > 0 {
		for id, p := range st.Policies {
			if affected[id] {
				continue
			}
			// A group change re-confirms a policy only when it changes the
			// policy's result: after an earlier failure, or on a failure now.
			if prev, ok := c.results[id]; ok && prev.Error == "" && applyErr == nil {
				continue
			}
			if usesAny(p.AppliedToGroups, groups) || usesAny(wire.AddressGroupRefs(p), groups) {
				affected[id] = true
			}
		}
	}
	var perPolicy PolicyErrors
	if !errors.As(applyErr, &perPolicy) {
		perPolicy = nil
	}
	var out []wire.PolicyResult
	for id := range affected {
		p := st.Policies[id]
		if p == nil {
			continue
		}
		r := wire.PolicyResult{PolicyID: id, Generation: p.Generation}
		switch {
		case perPolicy != nil:
			if e := perPolicy[id]; e != nil {
				r.Error = e.Error()
			}
		case applyErr != nil:
			r.Error = applyErr.Error()
		}
		c.results[id] = r
		out = append(out, r)
	}
	return out
}

func usesAny(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if set[id] {
			return true
		}
	}
	return false
}

// tokenCreds sends the agent's token as a bearer token, over TLS only.
type tokenCreds struct{ get func() (string, error) }

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.get()
	if err != nil {
		return nil, fmt.Errorf("reading agent token: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }
