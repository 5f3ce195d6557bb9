package realizer_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// lineConn is a TCP connection from a pod whose reads the test controls, so
// it can check that bytes sent while the connection was cut arrive after it
// is allowed again.
type lineConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialFrom(t *testing.T, p *testPod, local netip.Addr, dst netip.AddrPort, timeout time.Duration) (*lineConn, error) {
	t.Helper()
	var c net.Conn
	err := p.InNetns(func() error {
		d := net.Dialer{Timeout: timeout}
		if local.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
		}
		var err error
		c, err = d.Dial("tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &lineConn{c: c, r: bufio.NewReader(c)}, nil
}

func (l *lineConn) send(msg string) error {
	_ = l.c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := l.c.Write([]byte(msg + "\n"))
	return err
}

func (l *lineConn) read(timeout time.Duration) (string, error) {
	_ = l.c.SetReadDeadline(time.Now().Add(timeout))
	s, err := l.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

// TestEstablishedConnectionCut: a long-lived TCP connection is cut at its
// next packet when policy stops allowing it — a Deny appears above the rule
// that allowed it, its peer leaves the rule's address group, or the rule is
// deleted — its replies too, and the same connection works again when the
// policy allows it again.
func TestEstablishedConnectionCut(t *testing.T) {
	env, n, a, b := twoPods(t)

	// allowing: b is isolated for ingress and an NP rule allows a on 80.
	allowing := func() *state {
		s := newState()
		s.add(np("allow-a", s.atg(b), []model.Direction{model.DirectionIn}, rule(model.DirectionIn, model.ActionAllow, peerGroups(s.ag(a)), tcp(80))))
		return s
	}
	// The three ways policy stops allowing a connection.
	cuts := []struct {
		name string
		cut  func() *state
	}{
		{"deny added above", func() *state {
			s := allowing()
			s.add(anp("cut", 1, s.atg(a), rule(model.DirectionOut, model.ActionDeny, peerGroups(s.ag(b)))))
			return s
		}},
		{"peer removed from group", func() *state {
			s := newState()
			s.add(np("allow-a", s.atg(b), []model.Direction{model.DirectionIn}, rule(model.DirectionIn, model.ActionAllow, peerGroups(s.ag()), tcp(80))))
			return s
		}},
		{"rule deleted", func() *state {
			s := newState()
			s.add(np("allow-a", s.atg(b), []model.Direction{model.DirectionIn}))
			return s
		}},
	}
	allowing().apply(t, n)
	for i, tc := range cuts {
		for _, v6 := range []bool{false, true} {
			if v6 && i > 0 {
				continue // IPv6 once is enough
			}
			dst := b.IPv4()
			if v6 {
				dst = b.IPv6()
			}
			t.Run(fmt.Sprintf("%s/v6=%v", tc.name, v6), func(t *testing.T) {
				allowing().apply(t, n)
				c, err := dialFrom(t, a, netip.Addr{}, netip.AddrPortFrom(dst, 80), allowTimeout)
				if err != nil {
					t.Fatalf("connect while allowed: %v", err)
				}
				defer c.c.Close()
				if err := c.send("one"); err != nil {
					t.Fatal(err)
				}
				if got, err := c.read(allowTimeout); err != nil || got != "one" {
					t.Fatalf("echo while allowed: %q, %v", got, err)
				}

				tc.cut().apply(t, n)
				if err := c.send("two"); err != nil {
					t.Fatal(err)
				}
				if got, err := c.read(time.Second); err == nil {
					t.Fatalf("echo %q arrived on a connection policy no longer allows", got)
				}
				// The connection is marked blocked in conntrack.
				out, err := env.Appctl("dpctl/dump-conntrack", "zone=1")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "mark=1") {
					t.Fatalf("no connection marked blocked in zone 1:\n%s", out)
				}

				// Allowing again lets the same connection carry data: the
				// retransmitted "two" arrives, then a fresh "three".
				allowing().apply(t, n)
				if got, err := c.read(15 * time.Second); err != nil || got != "two" {
					t.Fatalf("after re-allow, retransmitted echo: %q, %v", got, err)
				}
				if err := c.send("three"); err != nil {
					t.Fatal(err)
				}
				if got, err := c.read(allowTimeout); err != nil || got != "three" {
					t.Fatalf("after re-allow: %q, %v", got, err)
				}
			})
		}
	}
}

// TestSpoofGuard: a pod may only send from its own IP and MAC; a packet
// with another source address is dropped, whatever the policy allows.
func TestSpoofGuard(t *testing.T) {
	_, n, a, b := twoPods(t)
	newState().apply(t, n) // no policy: everything honest is allowed

	for _, spoof := range []string{"10.0.0.99/16", "fd00::99/64"} {
		if out, err := a.Exec("ip", "addr", "add", spoof, "dev", "eth0", "nodad"); err != nil && !strings.Contains(spoof, ".") {
			t.Fatalf("add %s: %v %s", spoof, err, out)
		} else if err != nil {
			if out, err := a.Exec("ip", "addr", "add", spoof, "dev", "eth0"); err != nil {
				t.Fatalf("add %s: %v %s", spoof, err, out)
			}
		}
	}
	for _, tc := range []struct {
		local, dst netip.Addr
		allowed    bool
	}{
		{netip.MustParseAddr("10.0.0.1"), b.IPv4(), true},
		{netip.MustParseAddr("10.0.0.99"), b.IPv4(), false},
		{netip.MustParseAddr("fd00::1"), b.IPv6(), true},
		{netip.MustParseAddr("fd00::99"), b.IPv6(), false},
	} {
		timeout := denyTimeout
		if tc.allowed {
			timeout = allowTimeout
		}
		c, err := dialFrom(t, a, tc.local, netip.AddrPortFrom(tc.dst, 80), timeout)
		if (err == nil) != tc.allowed {
			t.Errorf("from %s to %s: connected=%v, want %v (%v)", tc.local, tc.dst, err == nil, tc.allowed, err)
		}
		if c != nil {
			c.c.Close()
		}
	}
	// ARP claiming another pod's address from a's port is dropped by the
	// spoof guard (checked with a trace: the kernel would not send it).
	out, err := n.br.Trace(fmt.Sprintf("in_port=%d,arp,dl_src=%s,arp_sha=%s,arp_spa=10.0.0.2,arp_tpa=10.0.0.2,arp_op=1", a.OFPort, a.MAC, a.MAC))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastLine(out, "Datapath actions:"), "drop") {
		t.Fatalf("spoofed ARP not dropped:\n%s", out)
	}
	// IPv6 neighbour discovery: a's own advertisement passes; one claiming
	// b's address, or advertising another MAC, is dropped.
	for _, tc := range []struct {
		target, tll string
		pass        bool
	}{
		{"fd00::1", a.MAC.String(), true},
		{"fd00::2", a.MAC.String(), false},
		{"fd00::1", "0a:58:00:00:00:02", false},
	} {
		out, err := n.br.Trace(fmt.Sprintf("in_port=%d,icmp6,dl_src=%s,dl_dst=%s,ipv6_src=fd00::1,ipv6_dst=fd00::2,icmpv6_type=136,icmpv6_code=0,nd_target=%s,nd_tll=%s",
			a.OFPort, a.MAC, b.MAC, tc.target, tc.tll))
		if err != nil {
			t.Fatal(err)
		}
		if dropped := strings.Contains(lastLine(out, "Datapath actions:"), "drop"); dropped == tc.pass {
			t.Errorf("NA target %s tll %s: dropped=%v, want pass=%v\n%s", tc.target, tc.tll, dropped, tc.pass, out)
		}
	}
}

// TestBundleAllOrNothing: a bundle the switch rejects in part changes
// nothing on the bridge, and the syncer keeps its view of what is installed.
func TestBundleAllOrNothing(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	inst := n.connect(t)
	sy := flowsync.NewSyncer(inst)
	good := openflow.Flow{Table: 5, Priority: 10, Cookie: 0x55, Match: openflow.Match{InPort: 1}, Actions: []openflow.Action{openflow.GotoTable{Table: 6}}}
	if _, err := sy.Sync(context.Background(), []openflow.Flow{good}); err != nil {
		t.Fatal(err)
	}
	// ct() without an IP match is rejected by OVS.
	bad := openflow.Flow{Table: 7, Priority: 10, Cookie: 0x66, Actions: []openflow.Action{openflow.CT{Commit: true, Zone: 1}}}
	other := openflow.Flow{Table: 8, Priority: 10, Cookie: 0x77, Match: openflow.Match{InPort: 2}}
	if _, err := sy.Sync(context.Background(), []openflow.Flow{other, bad}); err == nil {
		t.Fatal("a bundle with an invalid flow was accepted")
	}
	out, err := n.br.Ofctl("dump-flows")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "cookie=0x55") || strings.Contains(out, "cookie=0x77") {
		t.Fatalf("a rejected bundle changed the bridge:\n%s", out)
	}
	if sy.Installed() != 1 {
		t.Fatalf("syncer believes %d flows installed, want 1", sy.Installed())
	}
}

func lastLine(out, prefix string) string {
	var last string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			last = l
		}
	}
	return last
}

// TestSCTPTrace checks SCTP rules with ofproto/trace (the kernel has no
// SCTP for a real probe): an Admin Deny of SCTP 9000-9100 drops SCTP 9050 and
// passes SCTP 9200 and TCP 9050.
func TestSCTPTrace(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	n.start(t)
	s := newState()
	s.add(anp("no-sctp", 10, s.atg(b), rule(model.DirectionIn, model.ActionDeny, peerGroups(s.ag(a)), model.Port{Protocol: model.ProtocolSCTP, Port: 9000, EndPort: 9100})))
	s.apply(t, n)
	trace := func(proto string, port int) string {
		out, err := n.br.Trace(fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,nw_src=10.0.0.1,nw_dst=10.0.0.2,%s_dst=%d", a.OFPort, proto, a.MAC, b.MAC, proto, port), "--ct-next", "trk,new")
		if err != nil {
			t.Fatal(err)
		}
		return lastLine(out, "Datapath actions:")
	}
	if got := trace("sctp", 9050); !strings.Contains(got, "drop") {
		t.Errorf("SCTP 9050: %s, want drop", got)
	}
	for _, c := range []struct {
		proto string
		port  int
	}{{"sctp", 9200}, {"tcp", 9050}} {
		// Allowed: committed to conntrack and output (datapath port numbers
		// differ from OpenFlow ones, so only the commit is asserted).
		if got := trace(c.proto, c.port); !strings.Contains(got, "ct(commit") || strings.Contains(got, "drop") {
			t.Errorf("%s %d: %s, want commit and output", c.proto, c.port, got)
		}
	}
}

// TestFlowsReadBack: every installed flow's table and cookie read back from
// `ovs-ofctl dump-flows` to the pipeline table and the rule it realizes.
func TestFlowsReadBack(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2, model.NamedPort{Name: "http", Protocol: model.ProtocolTCP, Port: 8080})
	n.start(t)
	s := newState()
	s.add(anp("deny-a", 10, s.atg(b), rule(model.DirectionIn, model.ActionDeny, peerGroups(s.ag(a)), tcp(22), tcp(23))))
	s.add(np("web", s.atg(b), []model.Direction{model.DirectionIn}, rule(model.DirectionIn, model.ActionAllow, peerCIDR("10.0.0.0/16"), model.Port{Name: "http"})))
	s.add(banp(s.atg(a), rule(model.DirectionOut, model.ActionAllow, anyPeer())))
	s.apply(t, n)

	out, err := n.br.Ofctl("dump-flows")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := ovsctl.ParseDumpFlows(out)
	if err != nil {
		t.Fatal(err)
	}
	rules := n.r.Rules()
	found := map[string]bool{}
	for _, st := range stats {
		if st.Cookie == openflow.SentinelCookie {
			continue // the OpenFlow client's own marker
		}
		round, role, id := pipeline.DecodeCookie(st.Cookie)
		if round != n.r.Round() {
			t.Errorf("flow with cookie %#x of round %d, want %d", st.Cookie, round, n.r.Round())
		}
		if id == 0 {
			continue
		}
		ri, ok := rules[id]
		if !ok {
			t.Errorf("cookie %#x names unknown rule %d", st.Cookie, id)
			continue
		}
		table := pipeline.Table(st.Table).String()
		if role == pipeline.RoleAction || role == pipeline.RoleClause {
			if table != ri.Table {
				t.Errorf("rule %d (%s) flow in table %s, want %s", id, ri.Policy, table, ri.Table)
			}
		}
		found[fmt.Sprintf("%s %s %s %s", table, role, ri.Policy.Name, ri.Action)] = true
	}
	for _, want := range []string{
		"IngressAdmin action deny-a Deny",
		"IngressAdmin clause deny-a Deny",
		"IngressNetworkPolicy action web Allow",
		"IngressMetric metric web Allow",
		"EgressBaseline action default Allow",
		"EgressMetric metric default Allow",
	} {
		if !found[want] {
			t.Errorf("no flow %q read back; got %v", want, found)
		}
	}
	// The isolation flow of b is in IngressIsolation.
	iso, err := n.br.DumpFlows(int(pipeline.IngressIsolation))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(iso, "\n"), fmt.Sprintf("reg1=0x%x", b.OFPort)) {
		t.Errorf("no isolation flow for b's port %d in IngressIsolation:\n%s", b.OFPort, strings.Join(iso, "\n"))
	}
	_ = context.Background
}
