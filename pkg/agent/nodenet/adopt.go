package nodenet

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
)

// AdoptGateway returns the gateway a previous run of the agent left on the node,
// read from OVSDB (the port on the bridge and its OpenFlow port) and from
// the kernel (the interface's addresses and MAC), without the API server.
// The agent builds its first pipeline with it, before it applies anything:
// a restarted agent must keep the node's pods connected while its Node
// informer syncs, and for as long as the API server cannot be reached.
// The first sync from the Node objects then corrects whatever changed.
//
// It needs only o's OVSDB, Bridge, GatewayName and NetNS; pass what it
// returns to New as Options.Adopted.
//
// ok is false when there is no usable gateway: no such port on the
// bridge, no OpenFlow port, the link missing or down, or addresses that
// are not what ensureGateway configures (the first address of a pod CIDR,
// at most one per family). The pipeline then has no gateway until the
// first sync creates one (nothing leaves the node before that).
func AdoptGateway(ctx context.Context, o Options) (gw pipeline.Gateway, ok bool, err error) {
	name := o.GatewayName
	if o.OVSDB == nil {
		return gw, false, fmt.Errorf("nodenet: no OVSDB client")
	}
	br, err := o.OVSDB.PortBridge(ctx, name)
	if err != nil {
		return gw, false, fmt.Errorf("gateway %s: %w", name, err)
	}
	if br == "" || br != o.Bridge {
		return gw, false, nil
	}
	iface, err := o.OVSDB.Interface(ctx, name)
	if err != nil {
		return gw, false, fmt.Errorf("gateway %s: %w", name, err)
	}
	if iface.OFPort == nil || *iface.OFPort <= 0 || iface.ExternalIDs[gatewayKey] != "true" {
		return gw, false, nil
	}
	h, err := openHost(o.NetNS)
	if err != nil {
		return gw, false, err
	}
	defer h.close()
	mac, prefixes, up, err := h.gatewayLink(name)
	if err != nil || !up {
		return gw, false, err
	}
	if !isGatewayPrefixes(prefixes) || len(mac) != 6 {
		return gw, false, nil
	}
	return gatewayOf(uint32(*iface.OFPort), mac, prefixes), true, nil
}

// isGatewayPrefixes reports whether ps is what GatewayPrefixes makes of
// some pod CIDRs: one or two prefixes of distinct families, each holding
// the first address of its network.
func isGatewayPrefixes(ps []netip.Prefix) bool {
	if len(ps) == 0 || len(ps) > 2 || (len(ps) == 2 && ps[0].Addr().Is4() == ps[1].Addr().Is4()) {
		return false
	}
	for _, p := range ps {
		if model.NodeGatewayAddress(p) != p.Addr() {
			return false
		}
	}
	return true
}

// gatewayLink reads the gateway interface: its MAC, its addresses other
// than link-local ones, and whether it is up. A missing link is not an
// error (nothing to adopt).
func (h *host) gatewayLink(name string) (net.HardwareAddr, []netip.Prefix, bool, error) {
	link, err := h.h.LinkByName(name)
	if err != nil {
		if _, missing := err.(netlink.LinkNotFoundError); missing {
			return nil, nil, false, nil
		}
		return nil, nil, false, fmt.Errorf("gateway interface %s: %w", name, err)
	}
	addrs, err := h.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, false, fmt.Errorf("gateway %s: addresses: %w", name, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok && !p.Addr().IsLinkLocalUnicast() {
			out = append(out, p)
		}
	}
	return link.Attrs().HardwareAddr, out, link.Attrs().Flags&net.FlagUp != 0, nil
}
