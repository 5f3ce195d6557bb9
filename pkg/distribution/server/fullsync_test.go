package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// bulkPods adds n pods with 12 named ports each to frontend (app=web, on
// node), the address group of populate's db-allow: a large state for
// every node holding that policy.
func bulkPods(e *env, n int, node string) {
	for i := 0; i < n; i++ {
		p := pod("frontend", fmt.Sprintf("bulk-%05d", i), node, ip(1000+i), map[string]string{"app": "web"})
		for j := 0; j < 12; j++ {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: fmt.Sprintf("port-%02d", j), ContainerPort: int32(9000 + j), Protocol: corev1.ProtocolTCP})
		}
		e.engine.UpsertPod(p)
	}
}

// TestChunkedFullState: a node's state many times the chunk size reaches
// the agent in chunks, no message larger than a chunk (the agent's
// receive limit is set just above one), is put together and applied
// whole, and is followed by deltas. An agent that does not reassemble
// chunks (older than chunking) still gets its update in one message.
func TestChunkedFullState(t *testing.T) {
	const chunk = 64 << 10
	e := newEnv(t, tokens, server.Options{ChunkSize: chunk})
	populate(e)
	bulkPods(e, 3000, "n2")
	size := 0
	if b, _ := json.Marshal(e.want("n1")); len(b) < 10*chunk {
		t.Fatalf("n1's state is only %d bytes; the test needs more than 10 chunks", len(b))
	} else {
		size = len(b)
	}
	cfg := e.agentConfig("n1", "tok-n1", e.addr, t.TempDir())
	// A chunk travels base64-encoded in a JSON message: 4/3 of it, plus
	// the envelope.
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(chunk*4/3+4096)))
	a := e.startAgent(cfg)
	e.waitConverged(a)
	if n := e.metric("tierflow_distribution_update_chunks_sent_total", ""); n < float64(size/chunk) {
		t.Errorf("%v chunks sent for a %d-byte state", n, size)
	}
	e.engine.DeletePod("frontend", "bulk-00007")
	e.waitConverged(a)
	if st := a.Client.Stats(); st.FullUpdates != 1 || st.DeltaUpdates < 1 || st.Connections != 1 {
		t.Errorf("stats %+v; want one connection, one full update, then deltas", st)
	}

	// An agent without chunking: one message.
	stream := e.rawStream("tok-n1", &wire.Hello{}, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.Update == nil || !m.Update.Full || m.Chunk != nil || len(wire.Diff(e.want("n1"), stateOf(t, m.Update))) != 0 {
		t.Fatalf("an agent without chunking got %+v, want its whole state in one full update", m.Chunk)
	}
}

func stateOf(t *testing.T, u *wire.Update) *wire.NodeState {
	st := wire.NewNodeState("n1")
	if _, err := st.Apply(u); err != nil {
		t.Fatal(err)
	}
	return st
}

// fullSyncWatch counts, from the server's sends, the full updates in
// flight at once: from a full update's first message to its last (a
// chunked update spans its chunks; each chunk's send is slowed down, so
// unbounded full syncs would overlap).
type fullSyncWatch struct {
	mu                sync.Mutex
	inFlight, maxSeen int
	completed         int
}

func (w *fullSyncWatch) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &watchedStream{ServerStream: ss, w: w})
	}
}

type watchedStream struct {
	grpc.ServerStream
	w      *fullSyncWatch
	inFull bool
}

func (s *watchedStream) SendMsg(m any) error {
	if c := m.(*wire.ServerMessage).Chunk; c != nil {
		if c.Index == 0 {
			s.w.mu.Lock()
			s.w.inFlight++
			s.w.maxSeen = max(s.w.maxSeen, s.w.inFlight)
			s.w.mu.Unlock()
			s.inFull = true
		}
		time.Sleep(2 * time.Millisecond)
		if c.Last && s.inFull {
			defer func() {
				s.w.mu.Lock()
				s.w.inFlight--
				s.w.completed++
				s.w.mu.Unlock()
				s.inFull = false
			}()
		}
	}
	return s.ServerStream.SendMsg(m)
}

func (w *fullSyncWatch) read() (maxSeen, completed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxSeen, w.completed
}

// TestFullSyncsBounded: many agents connecting at once — first start, then
// after a controller restart (new epoch: every agent needs a full update)
// — are all served, with at most MaxConcurrentFullSyncs full updates in
// flight at any time; the others wait with their streams open. Without
// the bound the same agents overlap far more (the measure works).
func TestFullSyncsBounded(t *testing.T) {
	const agents, bound = 24, 3
	run := func(limit int) (maxSeen int) {
		toks := server.StaticTokens{}
		var w fullSyncWatch
		e := newEnv(t, toks, server.Options{ChunkSize: 16 << 10, MaxConcurrentFullSyncs: limit})
		e.grpcOpts = []grpc.ServerOption{grpc.StreamInterceptor(w.interceptor())}
		e.stopServer()
		e.startServer()
		populate(e)
		var nodes []string
		for i := 0; i < agents; i++ {
			n := fmt.Sprintf("node-%02d", i)
			toks["tok-"+n] = n
			nodes = append(nodes, n)
			e.engine.UpsertNode(node(n, fmt.Sprintf("192.168.1.%d", i+1)))
			// A db pod on every node: every node holds db-allow and its
			// large address group.
			e.engine.UpsertPod(pod("backend", "db-"+n, n, ip(200+i), map[string]string{"app": "db"}))
		}
		bulkPods(e, 400, "n2")
		rs := make([]*nodatapath.Runtime, 0, agents)
		for _, n := range nodes {
			rs = append(rs, e.startAgent(e.agentConfig(n, "tok-"+n, e.addr, "")))
		}
		e.waitConverged(rs...)
		// The controller restarts: every agent comes back at once.
		e.stopServer()
		e.startServer()
		deadline := time.Now().Add(time.Minute)
		for _, r := range rs {
			for r.Client.Stats().FullUpdates < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("limit %d: agent %s got no full update after the restart: %+v", limit, r.Node(), r.Client.Stats())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		e.waitConverged(rs...)
		if n := e.metric("tierflow_distribution_full_resyncs_total", "new"); n != agents {
			t.Errorf("limit %d: %v full resyncs after the restart, want %d", limit, n, agents)
		}
		maxSeen, completed := w.read()
		if completed != 2*agents {
			t.Errorf("limit %d: %d chunked full updates completed, want %d", limit, completed, 2*agents)
		}
		return maxSeen
	}
	got := run(bound)
	if got > bound || got < 1 {
		t.Errorf("%d full updates in flight at once, want at most %d", got, bound)
	}
	unbounded := run(agents)
	if unbounded <= bound {
		t.Errorf("without a bound only %d full updates overlapped: the test cannot tell", unbounded)
	}
	t.Logf("full updates in flight at once: at most %d with the bound %d, %d without", got, bound, unbounded)
}

// TestStuckAgentLosesFullSyncSlot: an agent that does not read its full
// update holds its full-sync slot for at most FullSyncTimeout; then its
// stream ends (DeadlineExceeded) and the agents waiting are served.
func TestStuckAgentLosesFullSyncSlot(t *testing.T) {
	const timeout = time.Second
	e := newEnv(t, tokens, server.Options{ChunkSize: 16 << 10, MaxConcurrentFullSyncs: 1, FullSyncTimeout: timeout})
	populate(e)
	bulkPods(e, 1000, "n2")
	// A stuck agent: small flow-control windows (no automatic growth),
	// and it never reads.
	stuck := e.rawStream("tok-n1", &wire.Hello{Chunks: true}, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	for e.metric("tierflow_distribution_full_syncs_in_progress", "") != 1 {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	a := e.startAgent(e.agentConfig("n3", "tok-n3", e.addr, ""))
	e.waitConverged(a)
	if waited := time.Since(start); waited < timeout*8/10 {
		t.Errorf("n3 served after %v, before the stuck agent's slot timed out", waited)
	}
	t.Logf("n3 served after %v", time.Since(start))
	for {
		_, err := stuck.Recv()
		if err != nil {
			t.Logf("stuck stream ended after %v: %v", time.Since(start), err)
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("stuck agent's stream ended with %v, want DeadlineExceeded", err)
			}
			break
		}
	}
}

// rawStream opens a Sync stream with token and sends hello, as an agent
// would (and no more: the test reads, or does not).
func (e *env) rawStream(token string, hello *wire.Hello, opts ...grpc.DialOption) wire.ClientStream {
	e.t.Helper()
	conn, err := grpc.NewClient(e.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(e.clientTLS))}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), 30*time.Second)
	e.t.Cleanup(cancel)
	stream, err := wire.OpenSync(ctx, conn)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := stream.Send(&wire.ClientMessage{Hello: hello}); err != nil {
		e.t.Fatal(err)
	}
	return stream
}
