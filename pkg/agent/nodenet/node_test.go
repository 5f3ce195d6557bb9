package nodenet

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, cidrs []string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.9"})
	return n
}

func TestParseNode(t *testing.T) {
	got, err := ParseNode(node("n1", []string{"10.244.1.0/24", "fd00:10:244:1::/64"}, "172.18.0.2", "fc00:f853::2", "172.18.0.3"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.PodCIDRs) != 2 || got.PodCIDRs[1] != netip.MustParsePrefix("fd00:10:244:1::/64") {
		t.Fatalf("pod CIDRs %v", got.PodCIDRs)
	}
	// One InternalIP per family (the first); ExternalIPs are not next hops.
	if len(got.InternalIPs) != 2 || got.InternalIPs[0] != netip.MustParseAddr("172.18.0.2") {
		t.Fatalf("internal IPs %v", got.InternalIPs)
	}
	legacy := node("n2", nil, "172.18.0.4")
	legacy.Spec.PodCIDR = "10.244.2.0/24"
	if got, err := ParseNode(legacy); err != nil || len(got.PodCIDRs) != 1 {
		t.Fatalf("spec.podCIDR only: %v %v", got, err)
	}
	if gw := GatewayPrefixes(got.PodCIDRs); gw[0] != netip.MustParsePrefix("10.244.1.1/24") || gw[1] != netip.MustParsePrefix("fd00:10:244:1::1/64") {
		t.Fatalf("gateway prefixes %v", gw)
	}

	for _, tc := range []struct {
		cidrs []string
		want  string
	}{
		{nil, "no spec.podCIDRs"},
		{[]string{"10.244.1.0"}, "not a CIDR"},
		{[]string{"bogus/24"}, "not a CIDR"},
		{[]string{"10.244.1.5/24"}, "host bits set"},
		{[]string{"10.244.1.0/31"}, "too small"},
		{[]string{"10.244.1.0/24", "10.244.2.0/24"}, "more than one per address family"},
	} {
		_, err := ParseNode(node("bad", tc.cidrs, "172.18.0.9"))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "node bad") {
			t.Errorf("pod CIDRs %v: error %v, want %q", tc.cidrs, err, tc.want)
		}
	}
	if _, err := ParseNode(node("bad", nil)); !errors.Is(err, ErrNoPodCIDR) {
		t.Errorf("no pod CIDR: %v is not ErrNoPodCIDR", err)
	}
}

func mustNode(t *testing.T, n *corev1.Node) Node {
	t.Helper()
	p, err := ParseNode(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDesiredRoutes: one route per other node and family via its
// InternalIP; nothing that could divert local or other nodes' traffic.
func TestDesiredRoutes(t *testing.T) {
	local := mustNode(t, node("n1", []string{"10.244.1.0/24", "fd00:1::/64"}, "172.18.0.2"))
	others := []Node{
		local, // the lister returns the local node too
		mustNode(t, node("n2", []string{"10.244.2.0/24", "fd00:2::/64"}, "172.18.0.3", "fc00::3")),
		mustNode(t, node("n3", []string{"10.244.3.0/24", "fd00:3::/64"}, "172.18.0.4")), // no IPv6 InternalIP
		mustNode(t, node("n4", []string{"10.244.1.128/25"}, "172.18.0.5")),              // inside the local CIDR
		mustNode(t, node("n5", []string{"10.244.3.0/25"}, "172.18.0.6")),                // inside n3's
	}
	bad := map[string]error{"n6": ErrNoPodCIDR}
	routes, errs := DesiredRoutes(local, others, bad)
	var got []string
	for _, r := range routes {
		got = append(got, r.String())
	}
	want := []string{"10.244.2.0/24 via 172.18.0.3 (node n2)", "fd00:2::/64 via fc00::3 (node n2)"}
	// n3's IPv4 CIDR overlaps n5's, so neither is routed: two nodes
	// claiming one address are never guessed between.
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("routes %q, want %q", got, want)
	}
	for name, frag := range map[string]string{
		"n3": "pod CIDR 10.244.3.0/24 overlaps node n5's 10.244.3.0/25; not routed\nnode n3: no InternalIP of the family of pod CIDR fd00:3::/64",
		"n4": "overlaps this node's 10.244.1.0/24",
		"n5": "overlaps node n3's 10.244.3.0/24",
		"n6": "no spec.podCIDRs",
	} {
		if errs[name] == nil || !strings.Contains(errs[name].Error(), frag) {
			t.Errorf("node %s: error %v, want %q", name, errs[name], frag)
		}
	}
	if errs["n1"] != nil || errs["n2"] != nil {
		t.Errorf("unexpected errors %v", errs)
	}
}

// TestSyncWithoutLocalPodCIDRsChangesNothing: without a usable local Node
// the sync fails with the reason before touching OVS or the host (the
// Manager here has neither: any use would panic).
func TestSyncWithoutLocalPodCIDRsChangesNothing(t *testing.T) {
	m := &Manager{o: Options{NodeName: "n1"}}
	for _, tc := range []struct {
		nodes []*corev1.Node
		want  string
	}{
		{[]*corev1.Node{node("n1", nil, "172.18.0.2"), node("n2", []string{"10.244.2.0/24"}, "172.18.0.3")}, "node n1: no spec.podCIDRs"},
		{[]*corev1.Node{node("n1", []string{"10.244.1.7/24"}, "172.18.0.2")}, "host bits set"},
		{[]*corev1.Node{node("n2", []string{"10.244.2.0/24"}, "172.18.0.3")}, `nodes "n1" not found`},
	} {
		err := m.sync(t.Context(), tc.nodes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sync: %v, want %q", err, tc.want)
		}
	}
	if st := m.Status(); st.Gateway.Port != 0 || len(st.Routes) != 0 {
		t.Fatalf("status changed: %v", st)
	}
}

// TestDesiredPeers: every other node is a peer at its InternalIP of the
// local endpoint's family with the pod CIDRs it can claim and its
// InternalIPs as host addresses, and the host
// routes each CIDR to its first address through the gateway; nodes that
// cannot be told apart by their outer source, or reached, are left out.
func TestDesiredPeers(t *testing.T) {
	local := mustNode(t, node("n1", []string{"10.244.1.0/24", "fd00:1::/64"}, "172.18.0.2", "fc00::2"))
	endpoint, err := TunnelEndpoint(local)
	if err != nil || endpoint != netip.MustParseAddr("172.18.0.2") {
		t.Fatalf("endpoint %v %v, want the IPv4 InternalIP", endpoint, err)
	}
	others := []Node{
		local,
		mustNode(t, node("n2", []string{"10.244.2.0/24", "fd00:2::/64"}, "172.18.0.3", "fc00::3")),
		mustNode(t, node("n3", []string{"fd00:3::/64"}, "fc00::4")),                     // no IPv4 InternalIP
		mustNode(t, node("n4", []string{"10.244.4.0/24"}, "172.18.0.5")),                // shares its address with n5
		mustNode(t, node("n5", []string{"10.244.5.0/24"}, "172.18.0.5")),                //
		mustNode(t, node("n6", []string{"10.244.1.0/25", "fd00:6::/64"}, "172.18.0.7")), // one CIDR inside the local one
		mustNode(t, node("n7", []string{"10.244.7.0/24"}, "172.18.0.2")),                // claims the local address
	}
	peers, routes, errs := DesiredPeers(local, endpoint, others, map[string]error{"n8": ErrNoPodCIDR}, "tierflow-gw0")
	var got []string
	for _, p := range peers {
		got = append(got, fmt.Sprintf("%s %s %v hosts %v", p.Node, p.IP, p.PodCIDRs, p.HostIPs))
	}
	want := []string{"n2 172.18.0.3 [10.244.2.0/24 fd00:2::/64] hosts [172.18.0.3 fc00::3]", "n6 172.18.0.7 [fd00:6::/64] hosts [172.18.0.7]"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("peers %q, want %q", got, want)
	}
	got = nil
	for _, r := range routes {
		got = append(got, r.String())
	}
	want = []string{"10.244.2.0/24 via 10.244.2.1 dev tierflow-gw0 onlink (node n2)",
		"fd00:2::/64 via fd00:2::1 dev tierflow-gw0 onlink (node n2)", "fd00:6::/64 via fd00:6::1 dev tierflow-gw0 onlink (node n6)"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("routes %q, want %q", got, want)
	}
	for name, frag := range map[string]string{
		"n3": "no InternalIP of the family of this node's tunnel endpoint 172.18.0.2",
		"n4": "InternalIP 172.18.0.5 is also another node's",
		"n5": "InternalIP 172.18.0.5 is also another node's",
		"n6": "overlaps this node's 10.244.1.0/24",
		"n7": "InternalIP 172.18.0.2 is also another node's",
		"n8": "no spec.podCIDRs",
	} {
		if errs[name] == nil || !strings.Contains(errs[name].Error(), frag) {
			t.Errorf("node %s: error %v, want %q", name, errs[name], frag)
		}
	}
	// An IPv6-only node tunnels over IPv6.
	v6 := mustNode(t, node("n9", []string{"fd00:9::/64"}, "fc00::9"))
	if ep, err := TunnelEndpoint(v6); err != nil || ep != netip.MustParseAddr("fc00::9") {
		t.Errorf("IPv6-only endpoint %v %v", ep, err)
	}
	if _, err := TunnelEndpoint(mustNode(t, node("n10", []string{"10.244.10.0/24"}))); err == nil {
		t.Error("a node without InternalIP has an endpoint")
	}
}

func TestEncapOverhead(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		v6   bool
		want int
	}{{"geneve", false, 50}, {"geneve", true, 70}, {"vxlan", false, 50}, {"vxlan", true, 70}} {
		if got := EncapOverhead(tc.typ, tc.v6); got != tc.want {
			t.Errorf("EncapOverhead(%s, IPv6 %v) = %d, want %d", tc.typ, tc.v6, got, tc.want)
		}
	}
}

// The adopted gateway's addresses must be what ensureGateway configures:
// the first address of each pod CIDR, at most one per family.
func TestIsGatewayPrefixes(t *testing.T) {
	for _, c := range []struct {
		ps   []string
		want bool
	}{
		{[]string{"10.77.1.1/24"}, true},
		{[]string{"10.77.1.1/24", "fd00:77:1::1/64"}, true},
		{[]string{"10.77.1.2/24"}, false},                 // not the first address
		{[]string{"10.77.1.1/24", "10.77.2.1/24"}, false}, // two of a family
		{[]string{"10.77.1.1/31"}, false},                 // no room for pods
		{nil, false},
	} {
		var ps []netip.Prefix
		for _, p := range c.ps {
			ps = append(ps, netip.MustParsePrefix(p))
		}
		if got := isGatewayPrefixes(ps); got != c.want {
			t.Errorf("isGatewayPrefixes(%v) = %v, want %v", c.ps, got, c.want)
		}
	}
}
