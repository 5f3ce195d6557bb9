package pipeline

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

func TestTablesNamedOnceInOrder(t *testing.T) {
	seen := map[string]bool{}
	for i, tb := range Tables() {
		if int(tb.ID()) != i {
			t.Fatalf("table %s has ID %d at position %d", tb, tb.ID(), i)
		}
		if seen[tb.String()] {
			t.Fatalf("table name %s used twice", tb)
		}
		seen[tb.String()] = true
		if got, ok := TableByName(tb.String()); !ok || got != tb {
			t.Fatalf("TableByName(%s) = %v, %v", tb, got, ok)
		}
	}
	if EgressAdmin >= EgressNetworkPolicy || EgressBaseline >= Forwarding || IngressMetric >= ConntrackCommit {
		t.Fatal("tables out of pipeline order")
	}
}

func TestCookieRoundTrip(t *testing.T) {
	c := Cookie(0xab, RoleAction, 0xdeadbeef)
	r, role, id := DecodeCookie(c)
	if r != 0xab || role != RoleAction || id != 0xdeadbeef {
		t.Fatalf("decode %#x = %d %v %#x", c, r, role, id)
	}
	if c&CookieRoundMask != uint64(0xab)<<56 {
		t.Fatalf("round mask: %#x", c&CookieRoundMask)
	}
}

func TestStaticFlowsClassifyOnlyAfterSync(t *testing.T) {
	pod := LocalPod{Pod: model.PodRef{Namespace: "ns", Name: "a"}, OFPort: 3, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3},
		IPs: []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fd00::3")}}
	classified := func(synced bool) int {
		n := 0
		for _, f := range StaticFlows(Config{UplinkPort: 9, CtZone: 5}, []LocalPod{pod}, synced, 1) {
			if f.Table == Classifier.ID() && f.Match.InPort != 0 && len(f.Actions) > 0 {
				n++
			}
		}
		return n
	}
	if n := classified(false); n != 0 {
		t.Fatalf("%d ports classified before the first sync", n)
	}
	if n := classified(true); n != 2 {
		t.Fatalf("%d ports classified after sync, want the pod and the uplink", n)
	}
	if err := (LocalPod{Pod: pod.Pod, OFPort: 0xfffe, MAC: pod.MAC}).Validate(); err == nil {
		t.Fatal("reserved port number accepted")
	}
}

func TestGatewayConfigValidate(t *testing.T) {
	gw := Gateway{Port: 2, IPs: []netip.Addr{netip.MustParseAddr("10.244.1.1")}, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1},
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"uplink only", Config{UplinkPort: 1}, true},
		{"gateway only", Config{Gateway: gw}, true},
		{"neither", Config{}, true},
		{"both", Config{UplinkPort: 1, Gateway: gw}, false},
		{"gateway without address", Config{Gateway: Gateway{Port: 2, MAC: gw.MAC}}, false},
		{"gateway without MAC", Config{Gateway: Gateway{Port: 2, IPs: gw.IPs}}, false},
		{"reserved gateway port", Config{Gateway: Gateway{Port: 0xfffe, IPs: gw.IPs, MAC: gw.MAC}}, false},
		{"invalid address", Config{Gateway: Gateway{Port: 2, IPs: []netip.Addr{{}}, MAC: gw.MAC}}, false},
		{"address outside the pod CIDRs", Config{Gateway: Gateway{Port: 2, IPs: gw.IPs, MAC: gw.MAC,
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}}}, false},
		{"pod CIDR with host bits", Config{Gateway: Gateway{Port: 2, IPs: gw.IPs, MAC: gw.MAC,
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.1/24")}}}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestGatewayFlows checks the routed mode's static flows by what they do:
// the gateway is classified, local pods' other traffic goes to it,
// traffic leaving through it skips ingress policy, and only the host's own
// addresses skip ingress policy towards a pod.
func TestGatewayFlows(t *testing.T) {
	pod := LocalPod{Pod: model.PodRef{Namespace: "ns", Name: "a"}, OFPort: 3, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3},
		IPs: []netip.Addr{netip.MustParseAddr("10.244.1.3")}}
	gw := Gateway{Port: 2, IPs: []netip.Addr{netip.MustParseAddr("fd00:10:244:1::1"), netip.MustParseAddr("10.244.1.1")},
		MAC:      net.HardwareAddr{2, 0, 0, 0, 0, 1},
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}}
	flows := StaticFlows(Config{Gateway: gw, CtZone: 1}, []LocalPod{pod}, true, 1)
	var classified, toGateway, leaving, outGW, replyToGW, markFromGW bool
	hostBypass := map[string]bool{}
	// Sources the gateway may send from: by priority, so the highest
	// matching flow decides.
	type source struct {
		prio uint16
		pass bool
	}
	var sources []struct {
		p netip.Prefix
		source
	}
	for _, f := range flows {
		text := f.String()
		if f.Table == SpoofGuard.ID() && f.Match.Regs[RegFlags] == MatchSrc(SrcGateway) && f.Match.IPProto == 0 && f.Match.EthType != ethARP {
			p := f.Match.IPSrc
			if !p.IsValid() {
				p = netip.MustParsePrefix("0.0.0.0/0")
				if f.Match.EthType == ethIPv6 {
					p = netip.MustParsePrefix("::/0")
				}
			}
			sources = append(sources, struct {
				p netip.Prefix
				source
			}{p, source{f.Priority, len(f.Actions) > 0}})
		}
		switch {
		case f.Table == Classifier.ID() && f.Match.InPort == 2:
			classified = true
		case f.Table == Forwarding.ID() && strings.Contains(text, "set_field:02:00:00:00:00:01->eth_dst") && f.Match.CtMark != nil:
			replyToGW = true
		case f.Table == Forwarding.ID() && strings.Contains(text, "load:0x2->NXM_NX_REG1"):
			toGateway = true
		case f.Table == ConntrackCommit.ID() && f.Match.Regs[RegFlags] == MatchSrc(SrcGateway) && strings.Contains(text, "load:0x2->NXM_NX_CT_MARK[0..1]"):
			markFromGW = true
		case f.Table == IngressAdmin.ID() && f.Match.IPSrc.IsValid():
			hostBypass[f.Match.IPSrc.Addr().String()] = true
		case f.Table == IngressAdmin.ID() && f.Match.Regs[RegFlags] == MatchDst(DstGateway):
			leaving = true
		case f.Table == Output.ID() && f.Match.Regs[RegOutPort].Value == 2:
			outGW = true
		}
	}
	if !classified || !toGateway || !leaving || !outGW || !replyToGW || !markFromGW {
		t.Fatalf("classified %v, to gateway %v, leaving skips ingress %v, output %v, replies to gateway %v, gateway connections marked %v:\n%v",
			classified, toGateway, leaving, outGW, replyToGW, markFromGW, flows)
	}
	if len(hostBypass) != 2 || !hostBypass["10.244.1.1"] || !hostBypass["fd00:10:244:1::1"] {
		t.Fatalf("host bypass for %v, want both gateway addresses", hostBypass)
	}
	// From the gateway: its own addresses and the local pods' (a Service
	// DNAT back to this node), other nodes' pods and non-pod addresses
	// pass; any other address of this node's pod CIDRs is spoofed.
	for src, want := range map[string]bool{
		"10.244.1.1": true, "fd00:10:244:1::1": true, "10.244.1.3": true,
		"10.244.2.7": true, "192.168.0.10": true, "fd00:10:244:2::7": true,
		"10.244.1.9": false, "fd00:10:244:1::9": false,
	} {
		ip := netip.MustParseAddr(src)
		best := source{}
		found := false
		for _, s := range sources {
			if s.p.Contains(ip) && (!found || s.prio > best.prio) {
				best, found = s.source, true
			}
		}
		if !found || best.pass != want {
			t.Errorf("source %s from the gateway: passes %v (a flow: %v), want %v", src, best.pass, found, want)
		}
	}
	// Without a gateway none of it exists.
	for _, f := range StaticFlows(Config{UplinkPort: 9}, []LocalPod{pod}, true, 1) {
		if f.Table == IngressAdmin.ID() && f.Match.IPSrc.IsValid() {
			t.Fatalf("uplink mode has a host bypass flow: %v", f)
		}
	}
}
