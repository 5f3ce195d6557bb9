package nodenet

import (
	"errors"
	"fmt"
	"slices"

	"github.com/coreos/go-iptables/iptables"
)

// Cleanup removes the node network's host state for good, when tierflow
// is uninstalled (a running or restarting agent keeps it; see "Restarts"):
// every route of RouteProtocol, the nat chain MasqueradeChain with its
// POSTROUTING jump and the raw chain SpoofChain with its PREROUTING jump,
// in both address families. The gateway interface is an
// OVS port; pkg/agent/uninstall removes it with the bridge's other ports.
// netNS is the node's network namespace ("": this process's). It returns
// what it removed; a second call removes nothing and succeeds.
func Cleanup(netNS string) ([]string, error) {
	h, err := openHost(netNS)
	if err != nil {
		return nil, err
	}
	defer h.close()
	var removed []string
	routes, err := h.routes()
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	var errs []error
	if err := h.syncRoutes(nil); err != nil {
		errs = append(errs, err)
	}
	left, err := h.routes()
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range routes {
		if !slices.Contains(left, r) {
			removed = append(removed, fmt.Sprintf("route %s via %s proto %#x", r.Dst, r.Via, int(RouteProtocol)))
		}
	}
	err = h.inNetNS(func() error {
		for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
			ipt, err := iptables.NewWithProtocol(proto)
			if err != nil {
				return fmt.Errorf("iptables (%v): %w", proto, err)
			}
			for _, c := range []struct{ table, chain, parent string }{
				{"nat", MasqueradeChain, "POSTROUTING"},
				{"raw", SpoofChain, "PREROUTING"},
			} {
				exists, err := ipt.ChainExists(c.table, c.chain)
				if err != nil {
					return fmt.Errorf("iptables %s %s: %w", c.table, c.chain, err)
				}
				if !exists {
					continue
				}
				if err := syncChain(proto, c.table, c.chain, c.parent, nil); err != nil {
					return err
				}
				family := "IPv4"
				if proto == iptables.ProtocolIPv6 {
					family = "IPv6"
				}
				removed = append(removed, fmt.Sprintf("%s %s chain %s", family, c.table, c.chain))
			}
		}
		return nil
	})
	return removed, errors.Join(append(errs, err)...)
}
