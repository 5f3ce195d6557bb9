package realizer_test

import (
	"net/netip"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/ovsenv"
)

type expectation struct {
	src, dst *testPod
	v6       bool
	proto    model.Protocol
	port     int32
	allowed  bool
}

// TestTierSemantics installs one policy set after another on a real OVS
// bridge and probes real TCP/UDP connections between namespace pods; every
// probe's outcome must equal both the expectation written here and the
// reference evaluator's (pkg/explain) verdict.
func TestTierSemantics(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	http := func(port int32) model.NamedPort {
		return model.NamedPort{Name: "http", Protocol: model.ProtocolTCP, Port: port}
	}
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2, http(8080))
	c := n.addPod(t, "c", 3, http(9090))
	all := []*testPod{a, b, c}
	for _, p := range []*testPod{b, c} {
		for _, port := range []uint16{80, 8080, 9090} {
			srv := p.ListenTCP(port)
			t.Cleanup(srv.Close)
		}
		srv := p.ListenUDP(53)
		t.Cleanup(srv.Close)
	}
	n.start(t)
	in, out := model.DirectionIn, model.DirectionOut
	allow, deny, pass := model.ActionAllow, model.ActionDeny, model.ActionPass

	cases := []struct {
		name   string
		build  func(s *state)
		expect []expectation
	}{
		{"no policy allows everything", func(s *state) {}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: b, v6: true, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: c, proto: "UDP", port: 53, allowed: true},
		}},
		{"admin allow over a NetworkPolicy that would deny", func(s *state) {
			s.add(np("deny-all-to-b", s.atg(b), []model.Direction{in}))
			s.add(anp("allow-a", 10, s.atg(b), rule(in, allow, peerGroups(s.ag(a)), tcp(80))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: false},
			{src: c, dst: b, proto: "TCP", port: 80, allowed: false},
		}},
		{"admin deny over a NetworkPolicy allow", func(s *state) {
			s.add(np("allow-a-to-b", s.atg(b), []model.Direction{in}, rule(in, allow, peerGroups(s.ag(a)))))
			s.add(anp("deny-a-80", 10, s.atg(b), rule(in, deny, peerGroups(s.ag(a)), tcp(80))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: true},
			{src: c, dst: b, proto: "TCP", port: 8080, allowed: false},
		}},
		{"pass to the NetworkPolicy tier", func(s *state) {
			s.add(anp("pass-a", 10, s.atg(b), rule(in, pass, peerGroups(s.ag(a)))))
			s.add(anp("deny-all", 20, s.atg(b), rule(in, deny, anyPeer())))
			s.add(np("allow-a-to-b", s.atg(b), []model.Direction{in}, rule(in, allow, peerGroups(s.ag(a)), tcp(80))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: false},
			{src: c, dst: b, proto: "TCP", port: 80, allowed: false},
		}},
		{"pass with no NetworkPolicy goes to the baseline", func(s *state) {
			s.add(anp("pass-a", 10, s.atg(b), rule(in, pass, peerGroups(s.ag(a)))))
			s.add(anp("deny-all", 20, s.atg(b), rule(in, deny, anyPeer())))
			s.add(banp(s.atg(b), rule(in, deny, peerGroups(s.ag(a)), tcp(80))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: true},
			{src: c, dst: b, proto: "TCP", port: 8080, allowed: false},
		}},
		{"NetworkPolicy isolation over a baseline allow", func(s *state) {
			s.add(np("isolate-b", s.atg(b), []model.Direction{in}, rule(in, allow, peerGroups(s.ag(c)))))
			s.add(banp(s.atg(b), rule(in, allow, peerGroups(s.ag(a)))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: c, dst: b, proto: "TCP", port: 80, allowed: true},
		}},
		{"baseline deny, pass to the default allow", func(s *state) {
			s.add(banp(s.atg(b, c), rule(in, pass, peerGroups(s.ag(a)), tcp(8080)), rule(in, deny, anyPeer())))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: true},
			{src: a, dst: c, proto: "UDP", port: 53, allowed: false},
		}},
		{"port ranges", func(s *state) {
			s.add(anp("deny-range", 10, s.atg(a), rule(out, deny, anyPeer(), model.Port{Protocol: model.ProtocolTCP, Port: 8000, EndPort: 8999})))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: false},
			{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: b, proto: "TCP", port: 9090, allowed: true},
			{src: c, dst: b, proto: "TCP", port: 8080, allowed: true},
		}},
		{"named port resolving per destination pod (ingress)", func(s *state) {
			s.add(np("http-only", s.atg(b, c), []model.Direction{in}, rule(in, allow, peerGroups(s.ag(a)), model.Port{Name: "http"})))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: true},
			{src: a, dst: b, proto: "TCP", port: 9090, allowed: false},
			{src: a, dst: c, proto: "TCP", port: 9090, allowed: true},
			{src: a, dst: c, proto: "TCP", port: 8080, allowed: false},
			{src: a, dst: b, v6: true, proto: "TCP", port: 8080, allowed: true},
		}},
		{"named port resolving per peer pod (egress)", func(s *state) {
			s.add(anp("no-http-out", 5, s.atg(a), rule(out, deny, peerGroups(s.ag(b, c)), model.Port{Protocol: model.ProtocolTCP, Name: "http"})))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 8080, allowed: false},
			{src: a, dst: b, proto: "TCP", port: 9090, allowed: true},
			{src: a, dst: c, proto: "TCP", port: 9090, allowed: false},
			{src: a, dst: c, proto: "TCP", port: 8080, allowed: true},
		}},
		{"ipBlock with except", func(s *state) {
			s.add(anp("deny-net", 10, s.atg(a), rule(out, deny, peerCIDR("10.0.0.0/16", "10.0.0.3/32"))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: c, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: b, v6: true, proto: "TCP", port: 80, allowed: true},
		}},
		{"IPv6", func(s *state) {
			s.add(anp("deny-v6", 10, s.atg(b), rule(in, deny, peerCIDR("fd00::1/128"))))
			s.add(np("isolate-c", s.atg(c), []model.Direction{in}, rule(in, allow, peerCIDR("fd00::/64"), tcp(80))))
		}, []expectation{
			{src: a, dst: b, v6: true, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: c, v6: true, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: c, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: c, v6: true, proto: "UDP", port: 53, allowed: false},
		}},
		{"UDP", func(s *state) {
			s.add(anp("deny-dns", 10, s.atg(b), rule(in, deny, anyPeer(), model.Port{Protocol: model.ProtocolUDP, Port: 53})))
		}, []expectation{
			{src: a, dst: b, proto: "UDP", port: 53, allowed: false},
			{src: a, dst: c, proto: "UDP", port: 53, allowed: true},
			{src: a, dst: b, proto: "TCP", port: 80, allowed: true},
		}},
		{"same priority: alphabetical order decides", func(s *state) {
			s.add(anp("bbb-allow", 10, s.atg(b), rule(in, allow, anyPeer())))
			s.add(anp("aaa-deny", 10, s.atg(b), rule(in, deny, peerGroups(s.ag(a)))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: c, dst: b, proto: "TCP", port: 80, allowed: true},
		}},
		{"egress isolation", func(s *state) {
			s.add(np("a-egress", s.atg(a), []model.Direction{out}, rule(out, allow, peerGroups(s.ag(c)), tcp(80))))
		}, []expectation{
			{src: a, dst: b, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: c, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: c, proto: "TCP", port: 8080, allowed: false},
			{src: b, dst: c, proto: "TCP", port: 8080, allowed: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newState()
			tc.build(s)
			s.apply(t, n)
			for _, e := range tc.expect {
				dstIP := e.dst.IPv4()
				if e.v6 {
					dstIP = e.dst.IPv6()
				}
				ref := s.verdictOf(t, all, e.src, e.dst, dstIP, e.proto, e.port)
				got := probe(t, e.src, dstIP, e.proto, e.port, e.allowed)
				if got != e.allowed || ref != e.allowed {
					t.Errorf("%s -> %s %s/%d: datapath allowed=%v, explain allowed=%v, want %v", e.src.ref, netip.AddrPortFrom(dstIP, uint16(e.port)), e.proto, e.port, got, ref, e.allowed)
				}
			}
		})
	}
}
