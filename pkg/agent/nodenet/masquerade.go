package nodenet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// MasqueradeChain is the nat chain holding the agent's NAT rules, jumped
// to first from POSTROUTING.
const MasqueradeChain = "TIERFLOW-POSTROUTING"

// SpoofChain is the raw chain dropping packets whose pod source address
// cannot come from the interface they arrive on, jumped to first from
// PREROUTING.
const SpoofChain = "TIERFLOW-PREROUTING"

// natConfig is what the NAT rules of one family are made of.
type natConfig struct {
	// local and cluster are this node's and the other nodes' pod CIDRs.
	local, cluster []netip.Prefix
	gateway        string
	// nodeIP is the node's InternalIP of the family (invalid: none).
	nodeIP netip.Addr
	// kubeProxyMark is kube-proxy's masquerade mark (1 << its
	// --iptables-masquerade-bit).
	kubeProxyMark uint32
	masquerade    bool
}

// natRules are the rules of MasqueradeChain for one family:
//
//   - Connections the host forwards into the gateway that kube-proxy
//     marked for masquerading (NodePort, LoadBalancer and external
//     traffic to a pod of this node, a pod reaching a NodePort) leave
//     with the node's InternalIP as source. kube-proxy's own MASQUERADE
//     would give them the gateway's address, which the pipeline trusts as
//     the node's own traffic (pkg/agent/pipeline/DESIGN.md, "Host
//     traffic"): the gateway's address must only ever be the source of
//     connections the node itself opens.
//   - With masquerade: traffic to any node's pods keeps its pod source
//     address (policy at the destination sees the real pod; the other
//     nodes route back to it); anything else a local pod sends out of the
//     node — not back through the gateway — leaves with the node's own
//     address, because the destination (the internet, the nodes' upstream
//     DNS server) has no route to pod CIDRs. Service traffic is DNATed to
//     pod addresses before POSTROUTING, so it is never masqueraded here.
func natRules(c natConfig, v4 bool) [][]string {
	var out [][]string
	if c.nodeIP.IsValid() && c.nodeIP.Is4() == v4 && hasFamily(c.local, v4) {
		mark := fmt.Sprintf("0x%x/0x%x", c.kubeProxyMark, c.kubeProxyMark)
		out = append(out, []string{"-o", c.gateway, "-m", "mark", "--mark", mark, "-m", "addrtype", "!", "--src-type", "LOCAL",
			"-j", "SNAT", "--to-source", c.nodeIP.String()})
	}
	if !c.masquerade {
		return out
	}
	seen := map[netip.Prefix]bool{}
	var dsts []netip.Prefix
	for _, p := range append(slices.Clone(c.local), c.cluster...) {
		if p.Addr().Is4() == v4 && !seen[p] {
			seen[p] = true
			dsts = append(dsts, p)
		}
	}
	slices.SortFunc(dsts, comparePrefixes)
	for _, p := range dsts {
		out = append(out, []string{"-d", p.String(), "-j", "RETURN"})
	}
	for _, p := range c.local {
		if p.Addr().Is4() == v4 {
			out = append(out, []string{"-s", p.String(), "!", "-o", c.gateway, "-j", "MASQUERADE"})
		}
	}
	return out
}

func comparePrefixes(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) }

// remoteRoute is another node's pod CIDR and the interface the route to
// it leaves by.
type remoteRoute struct {
	dst   netip.Prefix
	iface string
}

// spoofRules are the rules of SpoofChain for one family: a packet
// arriving at the host with a source address of this node's pods that did
// not come out of the gateway, or of another node's pods that did not
// come in on the interface the route to that node uses, is not from that
// pod: it drops before the host forwards it (into the gateway, where the
// pipeline would take it for the pod). Packets the host sends itself do
// not pass PREROUTING.
func spoofRules(local []netip.Prefix, gateway string, remote []remoteRoute, v4 bool) [][]string {
	var out [][]string
	for _, p := range local {
		if p.Addr().Is4() == v4 {
			out = append(out, []string{"-s", p.String(), "!", "-i", gateway, "-j", "DROP"})
		}
	}
	remote = slices.Clone(remote)
	slices.SortFunc(remote, func(a, b remoteRoute) int { return comparePrefixes(a.dst, b.dst) })
	for _, r := range remote {
		if r.dst.Addr().Is4() == v4 && r.iface != "" {
			out = append(out, []string{"-s", r.dst.String(), "!", "-i", r.iface, "-j", "DROP"})
		}
	}
	return out
}

// syncNAT makes MasqueradeChain of one family hold exactly natRules (no
// rule: no chain and no jump).
func (h *host) syncNAT(c natConfig, v4 bool) error {
	return h.inNetNS(func() error {
		return syncChain(protocol(v4), "nat", MasqueradeChain, "POSTROUTING", natRules(c, v4))
	})
}

// syncSpoofGuard makes SpoofChain hold exactly spoofRules per family.
func (h *host) syncSpoofGuard(local []netip.Prefix, gateway string, remote []remoteRoute) error {
	return h.inNetNS(func() error {
		for _, v4 := range []bool{true, false} {
			if err := syncChain(protocol(v4), "raw", SpoofChain, "PREROUTING", spoofRules(local, gateway, remote, v4)); err != nil {
				return err
			}
		}
		return nil
	})
}

func protocol(v4 bool) iptables.Protocol {
	if v4 {
		return iptables.ProtocolIPv4
	}
	return iptables.ProtocolIPv6
}

func hasFamily(ps []netip.Prefix, v4 bool) bool {
	for _, p := range ps {
		if p.Addr().Is4() == v4 {
			return true
		}
	}
	return false
}

// syncChain makes chain (in table) hold exactly want, jumped to first
// from parent; without rules the chain and its jump are removed. The
// chain is rewritten only when it differs, so resyncs disturb nothing.
// The jump is moved back to the top when something was inserted above it
// (kube-proxy prepends its own jumps when they are missing): the agent's
// rules must see the packets first.
func syncChain(proto iptables.Protocol, table, chain, parent string, want [][]string) error {
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return fmt.Errorf("iptables (%v): %w", proto, err)
	}
	jump := []string{"-j", chain}
	exists, err := ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("iptables %s %s: %w", table, chain, err)
	}
	if len(want) == 0 {
		if !exists {
			return nil
		}
		if err := ipt.DeleteIfExists(table, parent, jump...); err != nil {
			return fmt.Errorf("iptables: removing the jump to %s: %w", chain, err)
		}
		return ipt.ClearAndDeleteChain(table, chain)
	}
	if !exists {
		if err := ipt.NewChain(table, chain); err != nil {
			return fmt.Errorf("iptables: creating %s %s: %w", table, chain, err)
		}
	}
	have, err := ipt.List(table, chain)
	if err != nil {
		return fmt.Errorf("iptables: listing %s %s: %w", table, chain, err)
	}
	wantLines := []string{"-N " + chain}
	for _, r := range want {
		wantLines = append(wantLines, "-A "+chain+" "+strings.Join(r, " "))
	}
	if !slices.Equal(have, wantLines) {
		if err := ipt.ClearChain(table, chain); err != nil {
			return fmt.Errorf("iptables: clearing %s %s: %w", table, chain, err)
		}
		for _, r := range want {
			if err := ipt.Append(table, chain, r...); err != nil {
				return fmt.Errorf("iptables: %s %s %s: %w", table, chain, strings.Join(r, " "), err)
			}
		}
	}
	rules, err := ipt.List(table, parent)
	if err != nil {
		return fmt.Errorf("iptables: listing %s %s: %w", table, parent, err)
	}
	first := ""
	for _, r := range rules {
		if strings.HasPrefix(r, "-A ") {
			first = r
			break
		}
	}
	if first == "-A "+parent+" -j "+chain {
		return nil
	}
	if err := ipt.DeleteIfExists(table, parent, jump...); err != nil {
		return fmt.Errorf("iptables: moving the jump to %s: %w", chain, err)
	}
	if err := ipt.Insert(table, parent, 1, jump...); err != nil {
		return fmt.Errorf("iptables: jump to %s: %w", chain, err)
	}
	return nil
}
