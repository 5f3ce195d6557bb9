package realizer_test

import (
	"fmt"
	"math/rand"
	"net/netip"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestDifferentialAgainstExplain generates random policy sets over all
// three tiers (Admin/NetworkPolicy/Baseline, every action, address groups,
// ipBlocks with excepts, numeric, ranged, protocol-only and named ports,
// same-priority ties), installs each on a real bridge and compares, for
// every ordered pod pair, port and address family, the pipeline's verdict
// for a new connection (ovs-appctl ofproto/trace) with the reference
// evaluator's (pkg/explain). Deterministic seed; zero disagreements.
func TestDifferentialAgainstExplain(t *testing.T) {
	env := ovsenv.Start(t)
	// Two nodes joined by patch ports: p1, p2 on n1 and p3, p4 on n2, so
	// half the pairs cross nodes (egress decided on the source node,
	// ingress on the destination node, one trace following the packet
	// through both bridges).
	n := newNode(t, env, "n1", 1)
	n2 := newNode(t, env, "n2", 2)
	joinNodes(t, env, n, n2)
	named := func(http int32, dns bool) []model.NamedPort {
		ps := []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: http}}
		if dns {
			ps = append(ps, model.NamedPort{Name: "dns", Protocol: model.ProtocolUDP, Port: 53})
		}
		return ps
	}
	pods := []*testPod{
		n.addPod(t, "p1", 1, named(80, true)...),
		n.addPod(t, "p2", 2, named(8080, false)...),
		n2.addPod(t, "p3", 3, named(8080, true)...),
		n2.addPod(t, "p4", 4),
	}
	n.start(t)
	n2.start(t)
	nodeOf := map[*testPod]*node{pods[0]: n, pods[1]: n, pods[2]: n2, pods[3]: n2}
	r := rand.New(rand.NewSource(20261122))
	type query struct {
		proto model.Protocol
		port  int32
	}
	queries := []query{{"TCP", 80}, {"TCP", 8080}, {"TCP", 81}, {"UDP", 53}, {"SCTP", 80}}
	const scenarios = 24
	cells, disagreements, namedOnBlocks := 0, 0, 0
	for sc := 0; sc < scenarios; sc++ {
		s := randomState(r, pods)
		for _, p := range s.policies {
			for _, x := range p.Rules {
				if len(x.NamedPortGroups) > 0 {
					namedOnBlocks++
				}
			}
		}
		s.apply(t, n, n2)
		for _, src := range pods {
			for _, dst := range pods {
				if src == dst {
					continue
				}
				for _, q := range queries {
					for _, v6 := range []bool{false, true} {
						dstIP, srcIP := dst.IPv4(), src.IPv4()
						if v6 {
							dstIP, srcIP = dst.IPv6(), src.IPv6()
						}
						want := s.verdictOf(t, pods, src, dst, dstIP, q.proto, q.port)
						got := traceAllowed(t, nodeOf[src], src, dst, srcIP, dstIP, q.proto, q.port)
						cells++
						if got != want {
							disagreements++
							if disagreements <= 10 {
								t.Errorf("scenario %d: %s -> %s %s/%d: datapath allowed=%v, explain allowed=%v\n%s",
									sc, src.ref, dstIP, q.proto, q.port, got, want, describe(s))
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d scenarios, %d cells, %d disagreements, %d rules with NamedPortGroups", scenarios, cells, disagreements, namedOnBlocks)
	if namedOnBlocks == 0 {
		t.Errorf("the generator produced no egress named port towards ipBlocks (NamedPortGroups)")
	}
}

func traceAllowed(t *testing.T, n *node, src, dst *testPod, srcIP, dstIP netip.Addr, proto model.Protocol, port int32) bool {
	t.Helper()
	l3, l4 := "ip", strings.ToLower(string(proto))
	addr := fmt.Sprintf("nw_src=%s,nw_dst=%s", srcIP, dstIP)
	if srcIP.Is6() {
		l3 = "ipv6"
		addr = fmt.Sprintf("ipv6_src=%s,ipv6_dst=%s", srcIP, dstIP)
	}
	spec := fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,%s,nw_proto=%d,%s_dst=%d", src.OFPort, l3, src.MAC, dst.MAC, addr,
		map[model.Protocol]int{"TCP": 6, "UDP": 17, "SCTP": 132}[proto], l4, port)
	// One --ct-next per conntrack recirculation: the source bridge's and,
	// across the patch ports, the destination bridge's.
	out, err := n.br.Trace(spec, "--ct-next", "trk,new", "--ct-next", "trk,new")
	if err != nil {
		t.Fatalf("trace %s: %v", spec, err)
	}
	// The verdict is the last recirculation's: drop, or a commit and an
	// output. A cross-node packet allowed at the source commits there and
	// is then decided by the destination bridge after its own conntrack
	// pass (the last "Datapath actions:" line).
	last := lastLine(out, "Datapath actions:")
	switch {
	case strings.Contains(last, "drop"):
		return false
	case strings.Contains(last, "ct(commit") && !strings.HasSuffix(strings.TrimSpace(last), ")"):
		return true
	}
	t.Fatalf("trace %s: unexpected datapath actions %q\n%s", spec, last, out)
	return false
}

// randomState builds a random policy set over pods.
func randomState(r *rand.Rand, pods []*testPod) *state {
	s := newState()
	subset := func() []*testPod {
		var out []*testPod
		for _, p := range pods {
			if r.Intn(2) == 0 {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			out = append(out, pods[r.Intn(len(pods))])
		}
		return out
	}
	peer := func() model.Peer {
		switch r.Intn(5) {
		case 0:
			return anyPeer()
		case 1:
			// A block around some pods with an exception.
			cidrs := []string{"10.0.0.0/29", "10.0.0.0/30", "10.0.0.2/31", "fd00::/125", "fd00::/126", "fd00::2/127"}
			c := cidrs[r.Intn(len(cidrs))]
			pfx := netip.MustParsePrefix(c)
			var ex []string
			if r.Intn(2) == 0 {
				p := pods[r.Intn(len(pods))]
				ip := p.IPv4()
				if pfx.Addr().Is6() {
					ip = p.IPv6()
				}
				ex = append(ex, netip.PrefixFrom(ip, ip.BitLen()).String())
			}
			return peerCIDR(c, ex...)
		case 2:
			return model.Peer{AddressGroups: []string{s.ag(subset()...)}, IPBlocks: []model.IPBlock{{CIDR: netip.MustParsePrefix("10.0.0.4/32")}}}
		default:
			return peerGroups(s.ag(subset()...))
		}
	}
	ports := func() []model.Port {
		all := []model.Port{
			tcp(80), tcp(8080), {Protocol: model.ProtocolTCP, Port: 79, EndPort: 81}, {Protocol: model.ProtocolTCP},
			{Protocol: model.ProtocolUDP, Port: 53}, {Protocol: model.ProtocolSCTP, Port: 80}, {Name: "http"},
			{Protocol: model.ProtocolTCP, Name: "http"}, {Name: "dns"}, {Protocol: model.ProtocolUDP, Name: "http"},
		}
		if r.Intn(3) == 0 {
			return nil
		}
		var out []model.Port
		for i := 0; i < 1+r.Intn(2); i++ {
			out = append(out, all[r.Intn(len(all))])
		}
		return out
	}
	dir := func() model.Direction {
		if r.Intn(2) == 0 {
			return model.DirectionIn
		}
		return model.DirectionOut
	}
	rules := func(actions []model.Action) []model.Rule {
		var out []model.Rule
		for i := 0; i < 1+r.Intn(3); i++ {
			out = append(out, rule(dir(), actions[r.Intn(len(actions))], peer(), ports()...))
		}
		return indexRules(out)
	}
	// Rules must be listed ingress first, then egress (model.Policy.Rules).
	order := func(rs []model.Rule) []model.Rule {
		var in, out []model.Rule
		for _, x := range rs {
			if x.Direction == model.DirectionIn {
				in = append(in, x)
			} else {
				out = append(out, x)
			}
		}
		return indexRules(append(in, out...))
	}
	all := []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass}
	for i := 0; i < r.Intn(4); i++ {
		s.add(anp(fmt.Sprintf("anp%d", i), int32(r.Intn(3)), s.atg(subset()...), order(rules(all))...))
	}
	if r.Intn(2) == 0 {
		p := anp("cnp-admin", int32(r.Intn(3)), s.atg(subset()...), order(rules(all))...)
		p.Source.Kind = model.KindClusterNetworkPolicy
		s.add(p)
	}
	for i := 0; i < r.Intn(3); i++ {
		rs := order(rules([]model.Action{model.ActionAllow}))
		var iso []model.Direction
		for _, d := range []model.Direction{model.DirectionIn, model.DirectionOut} {
			if r.Intn(2) == 0 {
				iso = append(iso, d)
			}
		}
		// As pkg/compute does: an egress named port towards ipBlocks
		// resolves through NamedPortGroups, per name every pod declaring
		// it (admin rules get none: their named ports cannot be used with
		// networks peers).
		for j := range rs {
			if rs[j].Direction == model.DirectionOut && len(rs[j].Peer.IPBlocks) > 0 {
				for _, pt := range rs[j].Ports {
					if pt.Name != "" {
						rs[j].NamedPortGroups = append(rs[j].NamedPortGroups, s.namedPortGroup(pt.Name, pods))
					}
				}
			}
		}
		s.add(np(fmt.Sprintf("np%d", i), s.atg(subset()...), iso, rs...))
	}
	if r.Intn(2) == 0 {
		s.add(banp(s.atg(subset()...), order(rules(all))...))
	}
	if r.Intn(2) == 0 {
		p := anp("cnp-baseline", int32(r.Intn(3)), s.atg(subset()...), order(rules(all))...)
		p.Source.Kind = model.KindClusterNetworkPolicy
		p.Tier = model.TierBaseline
		s.add(p)
	}
	return s
}

// namedPortGroup returns the ID of the group of pods declaring a container
// port named name (what pkg/compute builds for model.Rule.NamedPortGroups).
func (s *state) namedPortGroup(name string, pods []*testPod) string {
	g := &model.AddressGroup{Meta: model.Meta{ID: "namedPort=" + name}, Selector: "namedPort=" + name}
	for _, p := range pods {
		for _, np := range p.ports {
			if np.Name == name {
				g.Members = append(g.Members, p.member())
				break
			}
		}
	}
	s.ags[g.ID] = g
	return g.ID
}

func describe(s *state) string {
	var b strings.Builder
	for _, p := range s.policies {
		fmt.Fprintf(&b, "  %s tier=%s prio=%d applied=%v isolates=%v\n", p.Source, p.Tier, p.Priority, p.AppliedToGroups, p.Isolates)
		for _, r := range p.Rules {
			fmt.Fprintf(&b, "    %s[%d] %s peer=%+v ports=%+v namedPortGroups=%v\n", r.Direction, r.Index, r.Action, r.Peer, r.Ports, r.NamedPortGroups)
		}
	}
	return b.String()
}
