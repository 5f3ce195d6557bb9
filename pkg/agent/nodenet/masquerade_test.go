package nodenet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMasqueradeRules(t *testing.T) {
	local := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/64")}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:2::/64")}
	text := func(rules [][]string) string {
		var lines []string
		for _, r := range rules {
			lines = append(lines, strings.Join(r, " "))
		}
		return strings.Join(lines, "\n")
	}
	// Every pod CIDR (the local one too) is exempt, then the local pods'
	// traffic leaving other than through the gateway is masqueraded.
	want4 := `-d 10.244.0.0/24 -j RETURN
-d 10.244.1.0/24 -j RETURN
-d 10.244.2.0/24 -j RETURN
-s 10.244.1.0/24 ! -o tierflow-gw0 -j MASQUERADE`
	if got := text(masqueradeRules(local, cluster, "tierflow-gw0", true)); got != want4 {
		t.Errorf("IPv4 rules:\n%s\nwant:\n%s", got, want4)
	}
	want6 := `-d fd00:1::/64 -j RETURN
-d fd00:2::/64 -j RETURN
-s fd00:1::/64 ! -o tierflow-gw0 -j MASQUERADE`
	if got := text(masqueradeRules(local, cluster, "tierflow-gw0", false)); got != want6 {
		t.Errorf("IPv6 rules:\n%s\nwant:\n%s", got, want6)
	}
	if hasFamily(local[:1], false) {
		t.Error("an IPv4-only node has an IPv6 pod CIDR")
	}
}
