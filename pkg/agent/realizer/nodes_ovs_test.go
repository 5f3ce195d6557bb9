package realizer_test

import (
	"context"
	"fmt"
	"math/rand"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// joinNodes connects two bridges with a pair of patch ports, each node's
// uplink.
func joinNodes(t *testing.T, env *ovsenv.Env, n1, n2 *node) {
	t.Helper()
	p1, p2 := "tf"+env.ID+"u1", "tf"+env.ID+"u2"
	if _, err := env.Vsctl("add-port", n1.br.Name, p1, "--", "set", "Interface", p1, "type=patch", "options:peer="+p2,
		"--", "add-port", n2.br.Name, p2, "--", "set", "Interface", p2, "type=patch", "options:peer="+p1); err != nil {
		t.Fatal(err)
	}
	var err error
	if n1.cfg.UplinkPort, err = n1.br.OFPort(p1); err != nil {
		t.Fatal(err)
	}
	if n2.cfg.UplinkPort, err = n2.br.OFPort(p2); err != nil {
		t.Fatal(err)
	}
}

// flowPackets sums the packet counters of a node's flows. OVS credits
// datapath packets to OpenFlow rules when its revalidators run, so it waits
// for a revalidation first and, when want is set, polls until the count is
// non-zero (or 10s passed).
func flowPackets(t *testing.T, n *node, table pipeline.Table, role pipeline.Role, policy string, want bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.settle(t)
		got := flowPacketsNow(t, n, table, role, policy)
		if !want || got > 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func flowPacketsNow(t *testing.T, n *node, table pipeline.Table, role pipeline.Role, policy string) uint64 {
	t.Helper()
	stats, err := n.r.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rules := n.r.Rules()
	var total uint64
	for _, st := range stats {
		_, r, id := pipeline.DecodeCookie(st.Cookie)
		if st.Table != table.ID() || r != role {
			continue
		}
		if policy != "" && rules[id].Policy.Name != policy {
			continue
		}
		total += st.Packets
	}
	return total
}

// TestCrossNode: two bridges joined by patch ports act as two nodes. Egress
// policy is enforced on the source node, ingress policy on the destination
// node, and replies need no reverse rule on either.
func TestCrossNode(t *testing.T) {
	env := ovsenv.Start(t)
	n1 := newNode(t, env, "n1", 1)
	n2 := newNode(t, env, "n2", 2)
	joinNodes(t, env, n1, n2)
	a := n1.addPod(t, "a", 1)
	b := n2.addPod(t, "b", 2)
	c := n2.addPod(t, "c", 3)
	for _, p := range []*testPod{b, c} {
		for _, port := range []uint16{80, 8080} {
			srv := p.ListenTCP(port)
			t.Cleanup(srv.Close)
		}
	}
	srv := a.ListenTCP(80)
	t.Cleanup(srv.Close)
	n1.start(t)
	n2.start(t)

	s := newState()
	s.add(anp("a-not-to-c", 10, s.atg(a), rule(model.DirectionOut, model.ActionDeny, peerGroups(s.ag(c)))))
	s.add(np("b-web", s.atg(b), []model.Direction{model.DirectionIn}, rule(model.DirectionIn, model.ActionAllow, peerGroups(s.ag(a)), tcp(80))))
	s.apply(t, n1, n2)
	all := []*testPod{a, b, c}
	for _, e := range []expectation{
		{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
		{src: a, dst: b, v6: true, proto: "TCP", port: 80, allowed: true},
		{src: a, dst: b, proto: "TCP", port: 8080, allowed: false},
		{src: a, dst: c, proto: "TCP", port: 80, allowed: false},
		{src: a, dst: c, v6: true, proto: "TCP", port: 8080, allowed: false},
		{src: c, dst: a, proto: "TCP", port: 80, allowed: true},
		{src: c, dst: b, proto: "TCP", port: 80, allowed: false},
	} {
		dst := e.dst.IPv4()
		if e.v6 {
			dst = e.dst.IPv6()
		}
		ref := s.verdictOf(t, all, e.src, e.dst, dst, e.proto, e.port)
		if got := probe(t, e.src, dst, e.proto, e.port, e.allowed); got != e.allowed || ref != e.allowed {
			t.Errorf("%s -> %s:%d: datapath %v, explain %v, want %v", e.src.ref, dst, e.port, got, ref, e.allowed)
		}
	}
	// Where each drop happened: a->c at the source node's egress Admin
	// table, a->b:8080 at the destination node's ingress isolation.
	if got := flowPackets(t, n1, pipeline.EgressAdmin, pipeline.RoleAction, "a-not-to-c", true); got == 0 {
		t.Errorf("no packet counted by the egress deny on n1")
	}
	if got := flowPackets(t, n2, pipeline.EgressAdmin, pipeline.RoleAction, "a-not-to-c", false); got != 0 {
		t.Errorf("the egress deny counted %d packets on n2 (the destination node)", got)
	}
	if got := flowPackets(t, n2, pipeline.IngressIsolation, pipeline.RoleIsolation, "", true); got == 0 {
		t.Errorf("no packet counted by b's ingress isolation on n2")
	}
	if got := flowPackets(t, n1, pipeline.IngressIsolation, pipeline.RoleIsolation, "", false); got != 0 {
		t.Errorf("isolation on n1 counted %d packets; b is on n2", got)
	}
}

// TestAtomicUpdates: hundreds of updates that move priorities, change
// address groups and ports, and reorder policies, while a UDP stream that
// every update allows must lose nothing and a stream every update denies
// must get nothing through.
func TestAtomicUpdates(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	c := n.addPod(t, "c", 3)
	srv := b.ListenUDP(53)
	t.Cleanup(srv.Close)
	n.start(t)

	r := rand.New(rand.NewSource(42))
	build := func(i int) *state {
		s := newState()
		// The invariants: a may reach b on UDP 53 (Admin allow), c may not
		// (Admin deny), everything else to b is denied by the baseline.
		extra := []model.Port{{Protocol: model.ProtocolUDP, Port: 53}}
		for k := 0; k < r.Intn(4); k++ {
			lo := int32(1000 + r.Intn(20000))
			extra = append(extra, model.Port{Protocol: model.ProtocolTCP, Port: lo, EndPort: lo + int32(r.Intn(3000))})
		}
		peers := []*testPod{a}
		if r.Intn(2) == 0 {
			peers = append(peers, b) // address group membership changes
		}
		s.add(anp("allow-a", int32(r.Intn(1001)), s.atg(b), rule(model.DirectionIn, model.ActionAllow, peerGroups(s.ag(peers...)), extra...)))
		s.add(anp("deny-c", int32(r.Intn(1001)), s.atg(b), rule(model.DirectionIn, model.ActionDeny, peerGroups(s.ag(c)))))
		// Filler policies at random priorities that move everyone's flows.
		for k := 0; k < r.Intn(30); k++ {
			var rules []model.Rule
			for j := 0; j < 1+r.Intn(5); j++ {
				act := []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass}[r.Intn(3)]
				rules = append(rules, rule(model.DirectionIn, act, peerCIDR(fmt.Sprintf("10.%d.%d.0/24", 1+r.Intn(200), r.Intn(256))), tcp(int32(1+r.Intn(65535)))))
			}
			s.add(anp(fmt.Sprintf("filler-%d", k), int32(r.Intn(1001)), s.atg(b), rules...))
		}
		if i%3 == 0 {
			s.add(np("np-b", s.atg(b), []model.Direction{model.DirectionIn}, rule(model.DirectionIn, model.ActionAllow, peerCIDR(fmt.Sprintf("10.%d.0.0/16", 1+r.Intn(200))))))
		}
		s.add(banp(s.atg(b), rule(model.DirectionIn, model.ActionDeny, anyPeer())))
		return s
	}
	build(0).apply(t, n)
	if err := a.ProbeUDP(netip.AddrPortFrom(b.IPv4(), 53), allowTimeout); err != nil {
		t.Fatalf("allowed stream does not work before the updates: %v", err)
	}
	good := startUDPStream(t, a, netip.AddrPortFrom(b.IPv4(), 53), 5*time.Millisecond)
	bad := startUDPStream(t, c, netip.AddrPortFrom(b.IPv4(), 53), 5*time.Millisecond)
	const updates = 300
	var changed int
	for i := 1; i <= updates; i++ {
		bd, err := n.r.Update(context.Background(), build(i).input(n))
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		changed += len(bd.Add) + len(bd.Modify) + len(bd.Delete)
	}
	gs, gr := good.finish()
	bs, br := bad.finish()
	t.Logf("%d updates changed %d flows; allowed stream %d/%d echoed, denied stream %d/%d", updates, changed, gr, gs, br, bs)
	if gs < 100 || gr != gs {
		t.Errorf("allowed stream lost %d of %d datagrams during updates", gs-gr, gs)
	}
	if br != 0 {
		t.Errorf("denied stream got %d of %d datagrams through during updates", br, bs)
	}
}

// TestAgentRestart: a new agent run (new cookie round) adopts the previous
// run's flows without dropping a packet of an allowed stream, and leaves no
// flow of the old round behind.
func TestAgentRestart(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	srv := b.ListenUDP(53)
	t.Cleanup(srv.Close)
	n.start(t)
	s := newState()
	s.add(anp("allow-a", 10, s.atg(b), rule(model.DirectionIn, model.ActionAllow, peerGroups(s.ag(a)))))
	s.add(banp(s.atg(b), rule(model.DirectionIn, model.ActionDeny, anyPeer())))
	s.apply(t, n)
	if err := a.ProbeUDP(netip.AddrPortFrom(b.IPv4(), 53), allowTimeout); err != nil {
		t.Fatal(err)
	}
	oldRound := n.r.Round()
	stream := startUDPStream(t, a, netip.AddrPortFrom(b.IPv4(), 53), 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 3; i++ {
		// The agent restarts: a new realizer on the same bridge.
		n.start(t)
		time.Sleep(100 * time.Millisecond) // old flows keep enforcing meanwhile
		if _, err := n.r.Update(context.Background(), s.input(n)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sent, recv := stream.finish()
	if sent < 50 || recv != sent {
		t.Errorf("allowed stream lost %d of %d datagrams across agent restarts", sent-recv, sent)
	}
	out, err := n.br.Ofctl("dump-flows")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := ovsctl.ParseDumpFlows(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if st.Cookie == openflow.SentinelCookie {
			continue // the OpenFlow client's own marker
		}
		if r, _, _ := pipeline.DecodeCookie(st.Cookie); r != n.r.Round() {
			t.Errorf("flow of round %d left after restart (current %d, first %d): cookie %#x", r, n.r.Round(), oldRound, st.Cookie)
		}
	}
	if n.r.Round() == oldRound {
		t.Errorf("restart kept round %d", oldRound)
	}
}

// TestFlowsLost: when ovs-vswitchd restarts (OVS does not persist flows) or
// someone deletes the flows, Check notices the missing sentinel and replays
// everything; policy holds again afterwards.
func TestFlowsLost(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	c := n.addPod(t, "c", 3)
	for _, p := range []*testPod{b} {
		srv := p.ListenTCP(80)
		t.Cleanup(srv.Close)
	}
	n.start(t)
	s := newState()
	s.add(anp("deny-c", 10, s.atg(b), rule(model.DirectionIn, model.ActionDeny, peerGroups(s.ag(c)))))
	s.apply(t, n)
	check := func(stage string) {
		t.Helper()
		if !probe(t, a, b.IPv4(), "TCP", 80, true) {
			t.Errorf("%s: a -> b denied, want allowed", stage)
		}
		if probe(t, c, b.IPv4(), "TCP", 80, false) {
			t.Errorf("%s: c -> b allowed, want denied", stage)
		}
	}
	check("before")
	if replayed, err := n.r.Check(context.Background()); err != nil || replayed {
		t.Fatalf("check with flows intact: replayed=%v err=%v", replayed, err)
	}
	// Someone deletes the flows: the periodic check notices the missing
	// sentinel and replays.
	if _, err := n.br.Ofctl("del-flows"); err != nil {
		t.Fatal(err)
	}
	if out, _ := n.br.Ofctl("dump-flows"); strings.Contains(out, "goto_table") {
		t.Fatalf("flows still installed after del-flows:\n%s", out)
	}
	if replayed, err := n.r.Check(context.Background()); err != nil || !replayed {
		t.Fatalf("check after del-flows: replayed=%v err=%v", replayed, err)
	}
	check("after del-flows")

	// ovs-vswitchd restarts (OVS keeps no flows across a restart): the
	// OpenFlow client reconnects, finds its sentinel gone and the reconnect
	// hook replays everything, without anyone calling Check.
	if err := env.RestartVswitchd(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("cookie=%#x,", pipeline.Cookie(n.r.Round(), pipeline.RoleSentinel, 0))
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := n.br.Ofctl("dump-flows")
		if err == nil && strings.Contains(strings.ReplaceAll(out, " ", ""), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flows not replayed 20s after the ovs-vswitchd restart (want %s):\n%s %v", want, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	check("after ovs-vswitchd restart")
}
