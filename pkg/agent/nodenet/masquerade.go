package nodenet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// MasqueradeChain is the nat chain holding the agent's masquerade rules,
// jumped to from POSTROUTING.
const MasqueradeChain = "TIERFLOW-POSTROUTING"

// masqueradeRules are the rules of MasqueradeChain for one family: traffic
// to any node's pods keeps its pod source address (policy at the
// destination sees the real pod; the other nodes route back to it);
// anything else a local pod sends out of the node — not back through the
// gateway — leaves with the node's own address, because the destination
// (the internet, the nodes' upstream DNS server) has no route to pod CIDRs.
// Service traffic is DNATed to pod addresses before POSTROUTING, so it is
// never masqueraded here.
func masqueradeRules(local []netip.Prefix, cluster []netip.Prefix, gateway string, v4 bool) [][]string {
	var out [][]string
	seen := map[netip.Prefix]bool{}
	var dsts []netip.Prefix
	for _, p := range append(slices.Clone(local), cluster...) {
		if p.Addr().Is4() == v4 && !seen[p] {
			seen[p] = true
			dsts = append(dsts, p)
		}
	}
	slices.SortFunc(dsts, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	for _, p := range dsts {
		out = append(out, []string{"-d", p.String(), "-j", "RETURN"})
	}
	for _, p := range local {
		if p.Addr().Is4() == v4 {
			out = append(out, []string{"-s", p.String(), "!", "-o", gateway, "-j", "MASQUERADE"})
		}
	}
	return out
}

// syncMasquerade makes MasqueradeChain hold exactly the rules for the
// local and cluster pod CIDRs, per family the node has (enabled false
// removes the chain and its jump). The chain is rewritten only when it
// differs, so established state is not disturbed by resyncs.
func (h *host) syncMasquerade(enabled bool, local, cluster []netip.Prefix, gateway string) error {
	return h.inNetNS(func() error {
		for _, v4 := range []bool{true, false} {
			proto := iptables.ProtocolIPv4
			if !v4 {
				proto = iptables.ProtocolIPv6
			}
			want := masqueradeRules(local, cluster, gateway, v4)
			if err := syncChain(proto, enabled && len(want) > 0 && hasFamily(local, v4), want); err != nil {
				return err
			}
		}
		return nil
	})
}

func hasFamily(ps []netip.Prefix, v4 bool) bool {
	for _, p := range ps {
		if p.Addr().Is4() == v4 {
			return true
		}
	}
	return false
}

func syncChain(proto iptables.Protocol, enabled bool, want [][]string) error {
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return fmt.Errorf("iptables (%v): %w", proto, err)
	}
	jump := []string{"-j", MasqueradeChain}
	exists, err := ipt.ChainExists("nat", MasqueradeChain)
	if err != nil {
		return fmt.Errorf("iptables nat %s: %w", MasqueradeChain, err)
	}
	if !enabled {
		if !exists {
			return nil
		}
		if err := ipt.DeleteIfExists("nat", "POSTROUTING", jump...); err != nil {
			return fmt.Errorf("iptables: removing the jump to %s: %w", MasqueradeChain, err)
		}
		return ipt.ClearAndDeleteChain("nat", MasqueradeChain)
	}
	if !exists {
		if err := ipt.NewChain("nat", MasqueradeChain); err != nil {
			return fmt.Errorf("iptables: creating %s: %w", MasqueradeChain, err)
		}
	}
	have, err := ipt.List("nat", MasqueradeChain)
	if err != nil {
		return fmt.Errorf("iptables: listing %s: %w", MasqueradeChain, err)
	}
	wantLines := []string{"-N " + MasqueradeChain}
	for _, r := range want {
		wantLines = append(wantLines, "-A "+MasqueradeChain+" "+strings.Join(r, " "))
	}
	if !slices.Equal(have, wantLines) {
		if err := ipt.ClearChain("nat", MasqueradeChain); err != nil {
			return fmt.Errorf("iptables: clearing %s: %w", MasqueradeChain, err)
		}
		for _, r := range want {
			if err := ipt.Append("nat", MasqueradeChain, r...); err != nil {
				return fmt.Errorf("iptables: %s %s: %w", MasqueradeChain, strings.Join(r, " "), err)
			}
		}
	}
	if ok, err := ipt.Exists("nat", "POSTROUTING", jump...); err != nil {
		return fmt.Errorf("iptables: POSTROUTING: %w", err)
	} else if !ok {
		if err := ipt.Insert("nat", "POSTROUTING", 1, jump...); err != nil {
			return fmt.Errorf("iptables: jump to %s: %w", MasqueradeChain, err)
		}
	}
	return nil
}
