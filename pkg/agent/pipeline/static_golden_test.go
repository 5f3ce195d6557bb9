package pipeline

import (
	"cmp"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

var update = flag.Bool("update", false, "rewrite testdata/static-flows.golden from StaticFlows")

// staticCases are the node configurations the golden file pins: uplink
// mode, routed mode with an IPv4, an IPv6 and a dual-stack gateway, encap
// mode (gateway and tunnel, with and without peers), a bridge with neither, before and after the first sync, with IPv4-only,
// IPv6-only and dual-stack pods given out of port order.
func staticCases() []struct {
	name   string
	cfg    Config
	pods   []LocalPod
	synced bool
} {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{0x0a, 0x58, 0, 0, 0, b} }
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	pod := func(name string, port uint32, ips ...string) LocalPod {
		return LocalPod{Pod: model.PodRef{Namespace: "ns", Name: name}, OFPort: port, MAC: mac(byte(port)), IPs: addrs(ips...),
			Ports: []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: 80}}}
	}
	pods := []LocalPod{
		pod("dual", 7, "10.244.1.7", "fd00:10:244:1::7"),
		pod("v4", 3, "10.244.1.3"),
		pod("v6", 5, "fd00:10:244:1::5"),
	}
	gw := func(ips ...string) Gateway {
		g := Gateway{Port: 2, IPs: addrs(ips...), MAC: mac(2)}
		for _, ip := range g.IPs {
			bits := 24
			if ip.Is6() {
				bits = 64
			}
			g.PodCIDRs = append(g.PodCIDRs, netip.PrefixFrom(ip, bits).Masked())
		}
		return g
	}
	// Two peers, given out of order: a dual-stack node with an IPv4
	// endpoint and an IPv6-only node with an IPv6 endpoint.
	tunnel := Tunnel{Port: 9, Peers: []TunnelPeer{
		{Node: "n3", IP: netip.MustParseAddr("fd00:172:18::3"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:10:244:3::/64")},
			HostIPs: []netip.Addr{netip.MustParseAddr("fd00:172:18::3")}},
		{Node: "n2", IP: netip.MustParseAddr("172.18.0.2"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:10:244:2::/64")},
			HostIPs: []netip.Addr{netip.MustParseAddr("fd00:172:18::2"), netip.MustParseAddr("172.18.0.2")}},
	}}
	type c = struct {
		name   string
		cfg    Config
		pods   []LocalPod
		synced bool
	}
	return []c{
		{"uplink, before the first sync", Config{UplinkPort: 1, CtZone: 5}, pods, false},
		{"uplink", Config{UplinkPort: 1, CtZone: 5}, pods, true},
		{"uplink, no pods", Config{UplinkPort: 1, CtZone: 5}, nil, true},
		{"no uplink, no gateway", Config{CtZone: 5}, pods, true},
		{"gateway IPv4, before the first sync", Config{CtZone: 6, Gateway: gw("10.244.1.1")}, pods, false},
		{"gateway IPv4", Config{CtZone: 6, Gateway: gw("10.244.1.1")}, pods, true},
		{"gateway IPv6", Config{CtZone: 6, Gateway: gw("fd00:10:244:1::1")}, pods, true},
		{"gateway dual-stack", Config{CtZone: 6, Gateway: gw("fd00:10:244:1::1", "10.244.1.1")}, pods, true},
		{"encap, before the first sync", Config{CtZone: 6, Gateway: gw("10.244.1.1", "fd00:10:244:1::1"), Tunnel: tunnel}, pods, false},
		{"encap", Config{CtZone: 6, Gateway: gw("10.244.1.1", "fd00:10:244:1::1"), Tunnel: tunnel}, pods, true},
		{"encap, no peers", Config{CtZone: 6, Gateway: gw("10.244.1.1"), Tunnel: Tunnel{Port: 9}}, pods, true},
	}
}

// TestStaticFlowsGolden pins every static flow (table, priority, match,
// actions, cookie) of every node configuration: a change of the pipeline
// shows here as a diff of testdata/static-flows.golden (go test -update
// rewrites it).
func TestStaticFlowsGolden(t *testing.T) {
	var b strings.Builder
	for _, tc := range staticCases() {
		if err := tc.cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fmt.Fprintf(&b, "# %s\n", tc.name)
		// The flows as the bridge holds them: by key (a second flow with a
		// key would replace the first), in table and priority order. The
		// order StaticFlows lists them in does not matter: they are
		// installed in one bundle.
		flows := StaticFlows(tc.cfg, tc.pods, tc.synced, 7)
		keys := map[string]bool{}
		for _, f := range flows {
			if keys[f.Key()] {
				t.Errorf("%s: two flows with key %s", tc.name, f.Key())
			}
			keys[f.Key()] = true
		}
		slices.SortFunc(flows, func(a, b openflow.Flow) int {
			if a.Table != b.Table {
				return cmp.Compare(a.Table, b.Table)
			}
			if a.Priority != b.Priority {
				return cmp.Compare(b.Priority, a.Priority)
			}
			return strings.Compare(a.String(), b.String())
		})
		for _, f := range flows {
			fmt.Fprintln(&b, f.String())
		}
		b.WriteString("\n")
	}
	path := filepath.Join("testdata", "static-flows.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("static flows differ from %s at line %d:\n got: %s\nwant: %s", path, i+1, g, w)
			}
		}
	}
}
