package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/distribution/disttest"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/statusbridge"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

var tokens = server.StaticTokens{"tok-n1": "n1", "tok-n2": "n2", "tok-n3": "n3", "tok-n4": "n4"}

// populate builds a small cluster in the engine:
//
//	frontend (team=fe): web-1@n1, web-2@n2 (app=web), client-1@n3 (app=client)
//	backend  (team=be): db-1@n3, db-2@n1 (app=db)
//	ops      (team=ops): probe-1@n3 (app=probe)
//
// and three policies: backend/db-allow (db ← fe web), frontend/web-allow
// (web ← fe client), AdminNetworkPolicy ops-deny (ops → be db denied).
func populate(e *env) {
	en := e.engine
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		en.UpsertNode(node(n, fmt.Sprintf("192.168.0.%d", i+1)))
	}
	en.UpsertNamespace(namespace("frontend", map[string]string{"team": "fe"}))
	en.UpsertNamespace(namespace("backend", map[string]string{"team": "be"}))
	en.UpsertNamespace(namespace("ops", map[string]string{"team": "ops"}))
	en.UpsertPod(pod("frontend", "web-1", "n1", ip(1), map[string]string{"app": "web"}))
	en.UpsertPod(pod("frontend", "web-2", "n2", ip(2), map[string]string{"app": "web"}))
	en.UpsertPod(pod("frontend", "client-1", "n3", ip(3), map[string]string{"app": "client"}))
	en.UpsertPod(pod("backend", "db-1", "n3", ip(4), map[string]string{"app": "db"}))
	en.UpsertPod(pod("backend", "db-2", "n1", ip(5), map[string]string{"app": "db"}))
	en.UpsertPod(pod("ops", "probe-1", "n3", ip(6), map[string]string{"app": "probe"}))
	en.UpsertNetworkPolicy(allowFrom("backend", "db-allow", "db", "fe", "web"))
	en.UpsertNetworkPolicy(allowFrom("frontend", "web-allow", "web", "fe", "client"))
	en.UpsertAdminNetworkPolicy(denyEgress("ops-deny", 10, "ops", "be", "db"))
}

func policyBySource(st *wire.NodeState, name string) *model.Policy {
	for _, p := range st.Policies {
		if p.Source.Name == name {
			return p
		}
	}
	return nil
}

func policyID(t testing.TB, e *env, name string) string {
	t.Helper()
	for _, p := range e.engine.Snapshot().Policies {
		if p.Source.Name == name {
			return p.ID
		}
	}
	t.Fatalf("no policy %s in the engine", name)
	return ""
}

func startAgents(e *env, addr string, nodes ...string) []*nodatapath.Runtime {
	var out []*nodatapath.Runtime
	for _, n := range nodes {
		out = append(out, e.startAgent(e.agentConfig(n, "tok-"+n, addr, "")))
	}
	return out
}

// TestSpanAndDeltas: each agent receives exactly its node's share, and
// stays equal to the engine's snapshot filtered to its node through pod
// moves, label changes, namespace relabels, policy edits and deletes —
// all as deltas, without a second full update.
func TestSpanAndDeltas(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	agents := startAgents(e, e.addr, "n1", "n2", "n3")
	n1, n2, n3 := agents[0], agents[1], agents[2]
	e.waitConverged(agents...)

	// Span: n2 runs only web-2, so it holds web-allow and nothing else.
	c2 := n2.State()
	if len(c2.Policies) != 1 || policyBySource(c2, "web-allow") == nil {
		t.Fatalf("n2 should hold only web-allow, holds %v", names(c2))
	}
	// n3 runs db-1 and probe-1: db-allow and ops-deny, not web-allow.
	c3 := n3.State()
	if policyBySource(c3, "web-allow") != nil || policyBySource(c3, "db-allow") == nil || policyBySource(c3, "ops-deny") == nil {
		t.Fatalf("n3 holds %v", names(c3))
	}
	// Applied-to groups carry only the node's own members.
	for _, a := range agents {
		for _, g := range a.State().AppliedToGroups {
			for _, e := range g.MembersByNode {
				if n := e.Node; n != a.Node() {
					t.Errorf("agent %s received members of node %s in group %s", a.Node(), n, g.ID)
				}
			}
		}
		if p := policyBySource(a.State(), "db-allow"); p != nil && len(p.Span) != 0 {
			t.Errorf("span sent to agent %s", a.Node())
		}
	}

	steps := []struct {
		name string
		do   func()
	}{
		{"pod moves from n2 to n3", func() {
			e.engine.DeletePod("frontend", "web-2")
			e.engine.UpsertPod(pod("frontend", "web-2", "n3", ip(20), map[string]string{"app": "web"}))
		}},
		{"pod label change", func() {
			e.engine.UpsertPod(pod("frontend", "client-1", "n3", ip(3), map[string]string{"app": "other"}))
		}},
		{"new pod joins address group", func() {
			e.engine.UpsertPod(pod("frontend", "web-3", "n2", ip(21), map[string]string{"app": "web"}))
		}},
		{"namespace relabel empties groups", func() {
			e.engine.UpsertNamespace(namespace("frontend", map[string]string{"team": "fe-old"}))
		}},
		{"namespace relabel back", func() {
			e.engine.UpsertNamespace(namespace("frontend", map[string]string{"team": "fe"}))
		}},
		{"policy edit", func() {
			np := allowFrom("backend", "db-allow", "db", "fe", "client")
			np.Generation = 2
			e.engine.UpsertNetworkPolicy(np)
		}},
		{"admin policy edit changes subject", func() {
			e.engine.UpsertAdminNetworkPolicy(denyEgress("ops-deny", 10, "fe", "be", "db"))
		}},
		{"policy delete", func() { e.engine.DeleteNetworkPolicy("frontend", "web-allow") }},
		{"pod delete", func() { e.engine.DeletePod("backend", "db-2") }},
	}
	for _, s := range steps {
		s.do()
		e.waitConverged(agents...)
		t.Logf("converged after: %s", s.name)
	}
	if p := policyBySource(n2.State(), "web-allow"); p != nil {
		t.Errorf("n2 still holds deleted web-allow")
	}
	// Reports catch up: every session connected, nothing pending, every
	// version acknowledged.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		settled := true
		infos := e.srv.Sessions()
		for _, info := range infos {
			settled = settled && info.Connected && info.PendingFull == "" && info.Acked == info.Version
		}
		if settled && len(infos) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions never settled: %+v", infos)
		}
	}
	for _, a := range []*nodatapath.Runtime{n1, n2, n3} {
		if st := a.Client.Stats(); st.FullUpdates != 1 || st.DeltaUpdates == 0 {
			t.Errorf("agent %s: %d full and %d delta updates; want 1 full, the rest deltas", a.Node(), st.FullUpdates, st.DeltaUpdates)
		}
	}
}

func names(st *wire.NodeState) []string {
	var out []string
	for _, p := range st.Policies {
		out = append(out, p.Source.String())
	}
	slices.Sort(out)
	return out
}

// TestRealization: agents' reports aggregate to N of M span nodes, with
// per-node errors.
func TestRealization(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	agents := startAgents(e, e.addr, "n1", "n2", "n3")
	e.waitConverged(agents...)
	id := policyID(t, e, "db-allow") // span n1, n3

	waitSummary := func(what string, ok func(server.Summary) bool) server.Summary {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, found := e.summary(id)
			if found && ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("summary never reached %s; last %+v", what, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitSummary("2/2 realized", func(s server.Summary) bool { return s.SpanNodes == 2 && s.Realized == 2 })

	// A db pod on n4, where no agent runs: 2 of 3, one pending.
	e.engine.UpsertPod(pod("backend", "db-4", "n4", ip(40), map[string]string{"app": "db"}))
	s := waitSummary("2/3 realized", func(s server.Summary) bool { return s.SpanNodes == 3 && s.Realized == 2 })
	if s.Pending() != 1 {
		t.Errorf("pending %d, want 1", s.Pending())
	}

	// n1's datapath fails the next generation.
	agents[0].Fail(id, errors.New("table full"))
	np := allowFrom("backend", "db-allow", "db", "fe", "client")
	np.Generation = 2
	e.engine.UpsertNetworkPolicy(np)
	s = waitSummary("n1 failed", func(s server.Summary) bool { return s.Failed["n1"] != "" && s.Realized == 1 })
	if !strings.Contains(s.Failed["n1"], "table full") || s.SourceGeneration != 2 {
		t.Errorf("summary %+v", s)
	}
	if sum, ok := e.srv.Summary(id); !ok || sum.Realized != 1 {
		t.Errorf("Server.Summary = %+v", sum)
	}

	// What the controller's status writer sees through the bridge.
	rs, ok := statusbridge.Source{Server: e.srv}.Realization(model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "backend", Name: "db-allow"})
	if !ok || rs.Generation != 2 || rs.Realized != 1 || rs.Total != 3 || rs.Failed["n1"] == "" {
		t.Errorf("controller realization summary %+v (found %v)", rs, ok)
	}

	// Deleted policy: the summary goes away.
	e.engine.DeleteNetworkPolicy("backend", "db-allow")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := e.summary(id); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("summary of deleted policy remains")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgentRestartResumes: a restarted agent loads its saved state and
// resumes the stream from its version, receiving only what it missed.
func TestAgentRestartResumes(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	dir := t.TempDir()
	a := e.startAgent(e.agentConfig("n1", "tok-n1", e.addr, dir))
	e.waitConverged(a)
	a.Stop()

	e.engine.UpsertPod(pod("backend", "db-3", "n1", ip(30), map[string]string{"app": "db"}))
	e.engine.UpsertPod(pod("frontend", "web-9", "n2", ip(31), map[string]string{"app": "web"}))

	b := e.startAgent(e.agentConfig("n1", "tok-n1", e.addr, dir))
	e.waitConverged(b)
	st := b.Client.Stats()
	if !st.Restored || st.FullUpdates != 0 || st.DeltaUpdates == 0 {
		t.Errorf("restarted agent: %+v; want restored state and deltas only", st)
	}
	if got := e.metric("tierflow_distribution_resumes_total", ""); got < 1 {
		t.Errorf("resumes_total = %v", got)
	}
}

// TestControllerLoss: a dead controller never removes what agents
// enforce; an agent restarting meanwhile enforces its saved state; a new
// controller process (new epoch) resyncs everyone, including changes made
// while it was down.
func TestControllerLoss(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	dir1 := t.TempDir()
	n1 := e.startAgent(e.agentConfig("n1", "tok-n1", e.addr, dir1))
	n3 := e.startAgent(e.agentConfig("n3", "tok-n3", e.addr, ""))
	e.waitConverged(n1, n3)
	before1, before3 := n1.State(), n3.State()

	e.stopServer()
	n1.Stop()
	// Changes while the controller is down.
	e.engine.DeleteNetworkPolicy("backend", "db-allow")
	e.engine.UpsertPod(pod("ops", "probe-2", "n1", ip(50), map[string]string{"app": "probe"}))

	restarted := e.startAgent(e.agentConfig("n1", "tok-n1", e.addr, dir1))
	// It enforces the saved state at once, without a controller.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := restarted.WaitFor(ctx, func(st *wire.NodeState) bool { return len(wire.Diff(before1, st)) == 0 }); err != nil {
		t.Fatalf("restarted agent did not restore its saved state: %v\n%s", err, strings.Join(wire.Diff(before1, restarted.State()), "\n"))
	}
	time.Sleep(time.Second)
	if d := wire.Diff(before3, n3.State()); len(d) > 0 {
		t.Fatalf("agent changed its state while the controller was down:\n%s", strings.Join(d, "\n"))
	}
	if d := wire.Diff(before1, restarted.State()); len(d) > 0 {
		t.Fatalf("restarted agent changed its state while the controller was down:\n%s", strings.Join(d, "\n"))
	}

	e.startServer()
	e.waitConverged(restarted, n3)
	if st := restarted.Client.Stats(); st.FullUpdates != 1 {
		t.Errorf("restarted agent after controller restart: %+v, want one full update (new epoch)", st)
	}
	if st := n3.Client.Stats(); st.FullUpdates != 2 {
		t.Errorf("n3 after controller restart: %+v, want a second full update", st)
	}
}

// TestNetworkCut: connections cut (and refused for a while) resume from
// the agent's version once the network is back; changes made meanwhile
// arrive as deltas.
func TestNetworkCut(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	proxy := disttest.NewProxy(t, e.addr)
	reg := prometheus.NewRegistry()
	cfg := e.agentConfig("n1", "tok-n1", proxy.Addr(), "")
	cfg.Registerer = reg
	agents := append([]*nodatapath.Runtime{e.startAgent(cfg)}, startAgents(e, proxy.Addr(), "n2", "n3")...)
	e.waitConverged(agents...)
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "tierflow_agent_distribution_connected" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("agent metric tierflow_agent_distribution_connected missing")
		return 0
	}
	if gauge() != 1 {
		t.Error("agent metric says disconnected while connected")
	}

	proxy.Cut(true)
	for i := 0; i < 20; i++ {
		e.engine.UpsertPod(pod("frontend", fmt.Sprintf("web-x%d", i), []string{"n1", "n2", "n3"}[i%3], ip(100+i), map[string]string{"app": "web"}))
	}
	time.Sleep(300 * time.Millisecond)
	for _, a := range agents {
		if a.Client.Connected() {
			t.Fatalf("agent %s still connected through a cut network", a.Node())
		}
	}
	if gauge() != 0 {
		t.Error("agent metric says connected through a cut network")
	}
	proxy.Restore()
	e.waitConverged(agents...)
	for _, a := range agents {
		if st := a.Client.Stats(); st.FullUpdates != 1 || st.Connections < 2 {
			t.Errorf("agent %s: %+v; want a reconnection that resumed without a full update", a.Node(), st)
		}
	}
}

// TestStuckAgent: an agent that stops reading does not delay the others;
// it loses its queue and catches up with one full update when it reads
// again.
func TestStuckAgent(t *testing.T) {
	e := newEnv(t, tokens, server.Options{MaxPending: 8})
	populate(e)
	var agents []*nodatapath.Runtime
	for _, n := range []string{"n1", "n2", "n3"} {
		cfg := e.agentConfig(n, "tok-"+n, e.addr, "")
		// Small HTTP/2 windows so a reader that stops fills them quickly.
		cfg.DialOptions = []grpc.DialOption{grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10)}
		agents = append(agents, e.startAgent(cfg))
	}
	e.waitConverged(agents...)
	stuck := agents[1]
	stuck.Hold()

	// Many edits of a policy applied to pods on all three nodes: each one
	// an update for every agent.
	for i := 0; i < 3; i++ {
		e.engine.UpsertPod(pod("backend", fmt.Sprintf("all-%d", i), []string{"n1", "n2", "n3"}[i], ip(200+i), map[string]string{"app": "all"}))
	}
	for i := 0; i < 400; i++ {
		np := allowFrom("backend", "churn", "all", "fe", fmt.Sprintf("peer-%d-%s", i, strings.Repeat("x", 200)))
		np.Generation = int64(i + 1)
		e.engine.UpsertNetworkPolicy(np)
		// The others keep up with every edit while n2 is stuck (and each
		// edit is its own update, not coalesced with the next).
		e.waitConverged(agents[0], agents[2])
	}
	if d := wire.Diff(e.want("n2"), stuck.State()); len(d) == 0 {
		t.Fatal("stuck agent converged while held; the test did not hold it")
	}
	q, ack := e.srv.SessionVersion("n2")
	t.Logf("stuck agent: queued %d acked %d applied %d", q, ack, stuck.Applied())
	stuck.Release()
	e.waitConverged(agents...)
	if got := e.metric("tierflow_distribution_full_resyncs_total", "overflow"); got < 1 {
		t.Errorf("full_resyncs_total{reason=overflow} = %v; the stuck agent's queue was never dropped", got)
	}
}

// TestTokenDecidesNode: the node comes from the token, never from the
// agent; unknown tokens and calls without TLS-protected tokens are refused.
func TestTokenDecidesNode(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	// An agent claiming to be n2 with n3's token gets n3's objects.
	liar := e.startAgent(e.agentConfig("n2", "tok-n3", e.addr, ""))
	want := e.want("n3")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := liar.WaitFor(ctx, func(st *wire.NodeState) bool { return len(st.Policies) > 0 }); err != nil {
		t.Fatal(err)
	}
	if d := wire.Diff(want, liar.State()); len(d) > 0 {
		t.Fatalf("agent with n3's token did not get exactly n3's state:\n%s", strings.Join(d, "\n"))
	}

	// Unknown token: Unauthenticated, nothing sent.
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(e.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		token string
		code  codes.Code
	}{{"tok-bogus", codes.Unauthenticated}, {"", codes.Unauthenticated}} {
		cctx := ctx
		if tc.token != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
		}
		stream, err := wire.OpenSync(cctx, conn)
		if err == nil {
			_ = stream.Send(&wire.ClientMessage{Hello: &wire.Hello{}})
			_, err = stream.Recv()
		}
		if status.Code(err) != tc.code {
			t.Errorf("token %q: got %v, want %v", tc.token, err, tc.code)
		}
	}
}

// TestNotReadyRefusesThenServes: while the controller has not synced,
// streams are refused as Unavailable and agents keep retrying; once ready,
// they sync. A stream that does not start with a Hello is refused.
func TestNotReadyRefusesThenServes(t *testing.T) {
	var ready atomic.Bool
	e := newEnv(t, tokens, server.Options{Ready: ready.Load})
	populate(e)
	a := e.startAgent(e.agentConfig("n1", "tok-n1", e.addr, ""))

	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(e.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok-n2"), 10*time.Second)
	defer cancel()
	open := func(first *wire.ClientMessage) error {
		stream, err := wire.OpenSync(ctx, conn)
		if err != nil {
			return err
		}
		if err := stream.Send(first); err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	if err := open(&wire.ClientMessage{Hello: &wire.Hello{}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("before ready: %v, want Unavailable", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := a.Applied(); n != 0 {
		t.Fatalf("agent applied %d updates from a controller that is not ready", n)
	}
	ready.Store(true)
	e.waitConverged(a)
	if err := open(&wire.ClientMessage{Report: &wire.Report{}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream without Hello: %v, want InvalidArgument", err)
	}
}

// TestLargeState: a node whose state is far larger than gRPC's default
// 4 MiB message limit syncs in full, then gets a patch.
func TestLargeState(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	// 8,000 web pods with 12 named ports each in frontend: the address
	// group of db-allow.
	for i := 0; i < 8000; i++ {
		p := pod("frontend", fmt.Sprintf("bulk-%05d", i), "n2", ip(1000+i), map[string]string{"app": "web"})
		for j := 0; j < 12; j++ {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: fmt.Sprintf("port-%02d", j), ContainerPort: int32(9000 + j), Protocol: corev1.ProtocolTCP})
		}
		e.engine.UpsertPod(p)
	}
	if b, _ := json.Marshal(e.want("n1")); len(b) < 5<<20 {
		t.Fatalf("n1's state is only %d bytes; the test needs more than gRPC's default 4 MiB", len(b))
	}
	a := e.startAgent(e.agentConfig("n1", "tok-n1", e.addr, t.TempDir()))
	e.waitConverged(a)
	e.engine.DeletePod("frontend", "bulk-00007")
	e.waitConverged(a)
	if st := a.Client.Stats(); st.FullUpdates != 1 || st.DeltaUpdates < 1 {
		t.Errorf("stats %+v; want one full update, then deltas", st)
	}
}
