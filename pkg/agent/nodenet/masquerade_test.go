package nodenet

import (
	"net/netip"
	"strings"
	"testing"
)

func rulesText(rules [][]string) string {
	var lines []string
	for _, r := range rules {
		lines = append(lines, strings.Join(r, " "))
	}
	return strings.Join(lines, "\n")
}

func TestNATRules(t *testing.T) {
	local := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/64")}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:2::/64")}
	c := natConfig{local: local, cluster: cluster, gateway: "tierflow-gw0", nodeIP: netip.MustParseAddr("192.168.0.1"),
		kubeProxyMark: 1 << 14, masquerade: true}
	// What kube-proxy would masquerade into the gateway gets the node's
	// address first; then every pod CIDR (the local one too) is exempt,
	// and the local pods' traffic leaving other than through the gateway
	// is masqueraded.
	want4 := `-o tierflow-gw0 -m mark --mark 0x4000/0x4000 -m addrtype ! --src-type LOCAL -j SNAT --to-source 192.168.0.1
-d 10.244.0.0/24 -j RETURN
-d 10.244.1.0/24 -j RETURN
-d 10.244.2.0/24 -j RETURN
-s 10.244.1.0/24 ! -o tierflow-gw0 -j MASQUERADE`
	if got := rulesText(natRules(c, true)); got != want4 {
		t.Errorf("IPv4 rules:\n%s\nwant:\n%s", got, want4)
	}
	// No IPv6 InternalIP: no SNAT rule for IPv6.
	want6 := `-d fd00:1::/64 -j RETURN
-d fd00:2::/64 -j RETURN
-s fd00:1::/64 ! -o tierflow-gw0 -j MASQUERADE`
	if got := rulesText(natRules(c, false)); got != want6 {
		t.Errorf("IPv6 rules:\n%s\nwant:\n%s", got, want6)
	}
	// Without masquerading the gateway's SNAT stays.
	c.masquerade = false
	if got := rulesText(natRules(c, true)); got != strings.Split(want4, "\n")[0] {
		t.Errorf("IPv4 rules without masquerade:\n%s", got)
	}
	if got := natRules(c, false); len(got) != 0 {
		t.Errorf("IPv6 rules without masquerade or InternalIP: %v", got)
	}
	if hasFamily(local[:1], false) {
		t.Error("an IPv4-only node has an IPv6 pod CIDR")
	}
}

func TestSpoofRules(t *testing.T) {
	local := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/64")}
	remote := []remoteRoute{
		{netip.MustParsePrefix("10.244.2.0/24"), "eth0"},
		{netip.MustParsePrefix("fd00:2::/64"), "eth0"},
		{netip.MustParsePrefix("10.244.0.0/24"), "eth1"},
		{netip.MustParsePrefix("10.244.3.0/24"), ""}, // interface unknown: no rule
	}
	want4 := `-s 10.244.1.0/24 ! -i tierflow-gw0 -j DROP
-s 10.244.0.0/24 ! -i eth1 -j DROP
-s 10.244.2.0/24 ! -i eth0 -j DROP`
	if got := rulesText(spoofRules(local, "tierflow-gw0", remote, true)); got != want4 {
		t.Errorf("IPv4 rules:\n%s\nwant:\n%s", got, want4)
	}
	want6 := `-s fd00:1::/64 ! -i tierflow-gw0 -j DROP
-s fd00:2::/64 ! -i eth0 -j DROP`
	if got := rulesText(spoofRules(local, "tierflow-gw0", remote, false)); got != want6 {
		t.Errorf("IPv6 rules:\n%s\nwant:\n%s", got, want6)
	}
}
