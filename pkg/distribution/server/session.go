package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// session is one node's stream state. It outlives connections, so an
// agent that reconnects can resume from its last version.
type session struct {
	node string
	// version is the last version queued; log holds the most recent
	// updates (at most ReplayWindow), oldest first, for sending and replay.
	version uint64
	log     []logEntry
	// needFull: the next update must be a full one (new agent, lost queue,
	// unknown epoch). While set, the state below is empty and no deltas are
	// queued.
	needFull   bool
	fullReason string
	// sent is the last version handed to the current (or last)
	// connection; acked the last version the agent reported applied.
	sent, acked uint64
	conn        uint64 // current connection's id, 0 when disconnected
	cancel      context.CancelFunc
	wake        chan struct{}
	// queries are agent queries to send on the current connection;
	// connGone is closed when the current connection ends.
	queries  chan *wire.AgentQuery
	connGone chan struct{}

	// What the agent holds once it has applied every queued update.
	policies map[string]*policyRefs
	atgRefs  map[string]int
	agRefs   map[string]int
	atgs     map[string]*model.AppliedToGroup // node form, as sent
	ags      map[string]bool
	pods     *model.NodePods // as sent
}

type logEntry struct {
	u      *wire.Update
	queued time.Time
}

func newSession(node string) *session {
	ss := &session{node: node, wake: make(chan struct{}, 1), needFull: true, fullReason: "new",
		queries: make(chan *wire.AgentQuery, maxQueuedQueries)}
	ss.resetState()
	return ss
}

func (ss *session) resetState() {
	ss.policies = map[string]*policyRefs{}
	ss.atgRefs = map[string]int{}
	ss.agRefs = map[string]int{}
	ss.atgs = map[string]*model.AppliedToGroup{}
	ss.ags = map[string]bool{}
	ss.pods = nil
}

func (ss *session) notify() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// logBase is the oldest version an agent can resume from.
func (ss *session) logBase() uint64 {
	if len(ss.log) > 0 {
		return ss.log[0].u.Version - 1
	}
	return ss.version
}

// enqueue queues u as the session's next version. An agent more than
// MaxPending updates behind loses its queue and will get a full update:
// a slow agent costs the server bounded memory and never blocks others.
// Called with s.mu held.
func (s *Server) enqueue(ss *session, u *wire.Update, now time.Time) {
	ss.version++
	u.Epoch, u.Version = s.epoch, ss.version
	if u.Trace == nil {
		u.Trace = &wire.Trace{}
	}
	u.Trace.Queued = now.UnixNano()
	ss.log = append(ss.log, logEntry{u: u, queued: now})
	if ss.version-ss.sent > uint64(s.opts.MaxPending) {
		s.markFull(ss, "overflow")
		return
	}
	if n := len(ss.log) - s.opts.ReplayWindow; n > 0 {
		// Only already-sent entries go: pending <= MaxPending <= ReplayWindow.
		ss.log = append([]logEntry(nil), ss.log[n:]...)
	}
	if ss.conn != 0 {
		s.m.agentLag.WithLabelValues(ss.node).Set(float64(ss.version - ss.acked))
	}
	ss.notify()
}

// markFull drops a session's queue and state; its next update is full.
// Called with s.mu held.
func (s *Server) markFull(ss *session, reason string) {
	ss.needFull, ss.fullReason = true, reason
	ss.log = nil
	ss.resetState()
	ss.notify()
	if ss.conn == 0 {
		// Nothing is left to resume from: forget the node until its agent
		// connects again (it will get a full update either way). This is
		// what bounds the memory of nodes that went away.
		delete(s.sessions, ss.node)
	}
}

// Sync serves one agent's stream (wire.SyncServer).
func (s *Server) Sync(stream wire.ServerStream) error {
	ctx := stream.Context()
	node, token, err := s.authenticate(ctx)
	if err != nil {
		s.m.authFailures.Inc()
		s.log.Info("agent refused", "err", err)
		return err
	}
	if s.opts.Ready != nil && !s.opts.Ready() {
		return status.Error(codes.Unavailable, "controller is still syncing; retry")
	}
	hello, err := s.recvHello(stream)
	if err != nil {
		return err
	}

	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	ss := s.sessions[node]
	if ss == nil {
		ss = newSession(node)
		s.sessions[node] = ss
	}
	if ss.cancel != nil {
		ss.cancel() // a newer connection of the same node replaces the old one
	}
	s.connSeq++
	myConn := s.connSeq
	ss.conn, ss.cancel = myConn, cancel
	connGone := make(chan struct{})
	ss.connGone = connGone
	resumed := false
	switch {
	case ss.needFull:
	case hello.Epoch == s.epoch && hello.Version <= ss.version && hello.Version >= ss.logBase():
		ss.sent, ss.acked, resumed = hello.Version, hello.Version, true
	case hello.Epoch != s.epoch:
		s.markFull(ss, "epoch")
	default:
		s.markFull(ss, "gap")
	}
	reason := ss.fullReason
	s.mu.Unlock()

	s.m.connected.Inc()
	if resumed {
		s.m.resumes.Inc()
	}
	s.log.Info("agent connected", "node", node, "resumed", resumed, "fromVersion", hello.Version, "fullReason", reason)
	defer func() {
		s.m.connected.Dec()
		s.mu.Lock()
		if ss.conn == myConn {
			ss.conn, ss.cancel = 0, nil
			s.m.agentLag.DeleteLabelValues(node)
		}
		// Queries waiting for an answer on this connection fail now, not
		// at their timeout.
		close(connGone)
		s.mu.Unlock()
		s.log.Info("agent disconnected", "node", node)
	}()

	go s.receiveReports(connCtx, cancel, stream, ss, myConn)
	// The stream ends early, whatever its sender is doing (it may be
	// blocked sending to an agent that does not read: only the handler's
	// return unblocks it), when the token is no longer accepted or the
	// agent holds a full-sync slot too long.
	abort := make(chan error, 2)
	go func() {
		// A stream must not outlive its token, nor the agent pod the
		// token is bound to.
		if err := s.keepAuthenticated(connCtx, node, token); err != nil {
			s.m.authFailures.Inc()
			s.log.Info("agent stream ends: no longer authenticated", "node", node, "err", err)
			abort <- err
		}
	}()
	sent := make(chan error, 1)
	go func() { sent <- s.sendUpdates(connCtx, abort, stream, ss, myConn, hello.Chunks) }()
	select {
	case err := <-abort:
		return err
	case err := <-sent:
		select {
		case why := <-abort:
			return why
		default:
			return err
		}
	}
}

func (s *Server) recvHello(stream wire.ServerStream) (*wire.Hello, error) {
	type result struct {
		m   *wire.ClientMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := stream.Recv()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		if r.m.Hello == nil {
			return nil, status.Error(codes.InvalidArgument, "the first message of a Sync stream must be a Hello")
		}
		return r.m.Hello, nil
	case <-time.After(s.opts.HelloTimeout):
		return nil, status.Error(codes.DeadlineExceeded, "no Hello received")
	case <-stream.Context().Done():
		return nil, stream.Context().Err()
	}
}

// sendUpdates sends the session's queued updates in order until the
// connection ends. Sending happens without locks, so a stuck agent only
// stalls its own goroutine. A full update is built and sent only while
// holding one of the server's full-sync slots (waiting for one as long as
// it takes), and to an agent that reassembles chunks, an update larger
// than ChunkSize goes as Chunks.
func (s *Server) sendUpdates(ctx context.Context, abort chan<- error, stream wire.ServerStream, ss *session, myConn uint64, chunks bool) error {
	var slot fullSyncSlot
	defer slot.release()
	for {
		s.mu.Lock()
		if ss.conn != myConn {
			s.mu.Unlock()
			return status.Error(codes.Aborted, "replaced by a newer connection of the same node")
		}
		if ss.needFull && !slot.held() {
			s.mu.Unlock()
			if err := s.waitFullSyncSlot(ctx, stream, ss, &slot, abort); err != nil || ctx.Err() != nil {
				return err
			}
			continue
		}
		if ss.needFull {
			u := s.buildFull(ss)
			s.m.resyncs.WithLabelValues(ss.fullReason).Inc()
			ss.needFull, ss.fullReason = false, ""
			// The full update does not depend on anything before it.
			ss.log, ss.sent = nil, ss.version
			s.enqueue(ss, u, time.Now())
		}
		var batch []logEntry
		for _, e := range ss.log {
			if e.u.Version > ss.sent {
				batch = append(batch, e)
			}
		}
		if len(batch) > 0 && !batch[0].u.Full && batch[0].u.Version != ss.sent+1 {
			// Cannot happen by construction; recover by resyncing.
			s.markFull(ss, "gap")
			s.mu.Unlock()
			continue
		}
		s.mu.Unlock()

		if len(batch) == 0 {
			// Whatever full update this slot was for has been sent.
			slot.release()
			select {
			case <-ctx.Done():
				return nil
			case <-ss.wake:
				continue
			case q := <-ss.queries:
				// This goroutine is the stream's only sender.
				if err := stream.Send(&wire.ServerMessage{Query: q}); err != nil {
					return err
				}
				continue
			}
		}
		for _, e := range batch {
			if err := s.sendUpdate(stream, e.u, chunks); err != nil {
				return err
			}
			kind := "delta"
			if e.u.Full {
				kind = "full"
			}
			s.m.syncDuration.WithLabelValues(kind).Observe(time.Since(e.queued).Seconds())
			s.m.updatesSent.WithLabelValues(kind).Inc()
			s.mu.Lock()
			if ss.conn == myConn && e.u.Version > ss.sent {
				ss.sent = e.u.Version
			}
			s.mu.Unlock()
		}
	}
}

// sendUpdate sends one update: in one message, or as Chunks when the
// agent reassembles them and its encoding exceeds ChunkSize. A copy
// carries the send time (the queued update may be sent again, on a
// resumed stream).
func (s *Server) sendUpdate(stream wire.ServerStream, queued *wire.Update, chunks bool) error {
	u := new(wire.Update)
	*u = *queued
	u.Trace = &wire.Trace{Sent: time.Now().UnixNano()}
	if queued.Trace != nil {
		u.Trace.Changed, u.Trace.Queued = queued.Trace.Changed, queued.Trace.Queued
	}
	if !chunks {
		return stream.Send(&wire.ServerMessage{Update: u})
	}
	msgs, err := wire.EncodeUpdateMessages(u, s.opts.ChunkSize)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			return err
		}
		if m.Chunk != nil {
			s.m.chunksSent.Inc()
		}
	}
	return nil
}

// fullSyncSlot is one of Options.MaxConcurrentFullSyncs: a full update is
// built, encoded and sent only while holding one, for at most
// Options.FullSyncTimeout.
type fullSyncSlot struct {
	mu    sync.Mutex
	sem   chan struct{}
	timer *time.Timer
}

func (f *fullSyncSlot) held() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sem != nil
}

// take records the slot taken from sem; onTimeout runs if it is still
// held after timeout.
func (f *fullSyncSlot) take(sem chan struct{}, timeout time.Duration, onTimeout func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sem = sem
	f.timer = time.AfterFunc(timeout, func() {
		if f.held() {
			onTimeout()
		}
	})
}

func (f *fullSyncSlot) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sem == nil {
		return
	}
	f.timer.Stop()
	<-f.sem
	f.sem, f.timer = nil, nil
}

// waitFullSyncSlot waits for a full-sync slot, serving the agent's
// queries meanwhile. The agent keeps enforcing what it holds while it
// waits; however long the queue, it is served in turn, never refused.
func (s *Server) waitFullSyncSlot(ctx context.Context, stream wire.ServerStream, ss *session, slot *fullSyncSlot, abort chan<- error) error {
	s.m.fullSyncsWaiting.Inc()
	defer s.m.fullSyncsWaiting.Dec()
	for {
		select {
		case s.fullSyncs <- struct{}{}:
			// An agent that does not take its full update in time loses
			// its stream (and queues again when it reconnects): a stuck
			// agent must not keep the others waiting.
			slot.take(s.fullSyncs, s.opts.FullSyncTimeout, func() {
				s.log.Info("agent stream ends: full update not taken in time", "node", ss.node, "timeout", s.opts.FullSyncTimeout)
				select {
				case abort <- status.Errorf(codes.DeadlineExceeded, "the full update was not taken within %v", s.opts.FullSyncTimeout):
				default:
				}
			})
			return nil
		case <-ctx.Done():
			return nil
		case q := <-ss.queries:
			if err := stream.Send(&wire.ServerMessage{Query: q}); err != nil {
				return err
			}
		}
	}
}

func (s *Server) receiveReports(ctx context.Context, cancel context.CancelFunc, stream wire.ServerStream, ss *session, myConn uint64) {
	defer cancel()
	for {
		m, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				s.log.Info("agent stream ended", "node", ss.node, "err", err)
			}
			return
		}
		if m.Answer != nil {
			s.deliverAnswer(ss.node, m.Answer)
		}
		if m.Pods != nil {
			s.mu.Lock()
			current := ss.conn == myConn
			s.mu.Unlock()
			if current {
				s.nodePodsReport(ss.node, m.Pods)
			}
		}
		if m.Report == nil {
			continue
		}
		s.mu.Lock()
		if ss.conn == myConn && m.Report.AppliedVersion > ss.acked && m.Report.AppliedVersion <= ss.version {
			ss.acked = m.Report.AppliedVersion
			s.m.agentLag.WithLabelValues(ss.node).Set(float64(ss.version - ss.acked))
		}
		// Only results for policies this node holds count: an agent cannot
		// grow the server's memory or others' summaries with made-up IDs.
		m.Report.Results = slices.DeleteFunc(m.Report.Results, func(r wire.PolicyResult) bool { return ss.policies[r.PolicyID] == nil })
		summaries := s.real.report(ss.node, m.Report, s.policies)
		s.mu.Unlock()
		s.emitReports(ss.node, m.Report.Results)
		s.emitSummaries(summaries)
	}
}
