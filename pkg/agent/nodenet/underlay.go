package nodenet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tierflow/tierflow/pkg/cni/hostguard"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// OVS's userspace datapath tunnels only through an OVS bridge: it routes
// an encapsulated packet with its copy of the kernel's routes (ovs-appctl
// ovs/route/show) and sends it out of the bridge the route's device names,
// resolving the next hop itself (tnl/neigh/show); it takes a tunnel packet
// in when one of its bridges delivers it to its own interface holding the
// destination address. So the node's address must be on a netdev bridge's
// own interface, with the network interface a port of that bridge (OVS's
// "br-phy" setup). ensureUnderlay does that for the interface holding the
// node's tunnel endpoint.

// UnderlayKey is the external_ids key of the underlay bridge recording
// what the agent moved onto it (JSON, underlayRecord): the agent restores
// it whenever the bridge's interface lacks it (a re-created interface has
// no address), and an operator can undo the move with it.
const UnderlayKey = "tierflow.io/underlay"

// underlayRecord is what was moved from the network interface to the
// bridge.
type underlayRecord struct {
	// Interface is the network interface, now a port of the bridge.
	Interface string `json:"interface"`
	MAC       string `json:"mac"`
	MTU       int    `json:"mtu"`
	// Addresses are its global addresses (address/prefix length).
	Addresses []string `json:"addresses"`
	// Routes are its routes in the main table other than the ones the
	// kernel derives from the addresses.
	Routes []underlayRoute `json:"routes"`
}

type underlayRoute struct {
	Dst    string `json:"dst"`
	Via    string `json:"via,omitempty"`
	Metric int    `json:"metric,omitempty"`
	Src    string `json:"src,omitempty"`
}

// underlay moves the node's interface onto the underlay bridge and keeps
// it there: the Manager's, and RestoreUnderlay's at the agent's start.
type underlay struct {
	db   *ovsdb.Client
	host *host
	log  *slog.Logger
	// bridge is the underlay bridge's name.
	bridge string
}

// RestoreUnderlay puts back, from the underlay bridge's record, what the
// agent had moved onto it (addresses, routes, the interface as a port)
// whenever the bridge's interface lacks it (a re-created interface has no
// address: ovs-vswitchd stopped with exit --cleanup, the bridge deleted
// and created again). It needs neither the
// Node objects nor the API server, which the node may reach only once its
// address is back: the agent runs it when it starts, before anything that
// needs the API. Without a record (nothing was moved) it does nothing.
func RestoreUnderlay(ctx context.Context, db *ovsdb.Client, bridge, netns string, log *slog.Logger) error {
	return withRecord(ctx, db, bridge, netns, log, func(u *underlay, rec *underlayRecord) error {
		return u.complete(ctx, rec)
	})
}

// withRecord runs f with the underlay bridge's record and the node's
// host, only when there is a record (the host is opened only then).
func withRecord(ctx context.Context, db *ovsdb.Client, bridge, netns string, log *slog.Logger, f func(*underlay, *underlayRecord) error) error {
	rec, err := (&underlay{db: db, bridge: bridge}).record(ctx)
	if err != nil || rec == nil {
		return err
	}
	h, err := openHost(netns)
	if err != nil {
		return err
	}
	defer h.close()
	h.log = log
	return f(&underlay{db: db, host: h, log: log, bridge: bridge}, rec)
}

// ensure makes the interface holding endpoint a port of the underlay
// bridge, the bridge's own interface holding its addresses and routes. An
// address already on a netdev bridge's own interface (an operator's
// br-phy, or ours) is used as it is; ours is completed from its record
// (the move is restartable at every step).
func (u *underlay) ensure(ctx context.Context, endpoint netip.Addr) error {
	name := u.bridge
	link, err := u.host.linkWithAddr(endpoint)
	if err != nil {
		return err
	}
	if link == nil {
		// Nowhere: our bridge's interface lost it (ovs-vswitchd
		// restarted), or the node has no such address.
		rec, err := u.record(ctx)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("underlay: the node's InternalIP %s is on no interface of this host", endpoint)
		}
		return u.complete(ctx, rec)
	}
	dev := link.Attrs().Name
	if dev != name {
		if br, err := u.db.Bridge(ctx, dev); err == nil && br.DatapathType == "netdev" {
			return nil // the operator's underlay bridge
		}
		if _, err := u.db.Interface(ctx, dev); err == nil {
			return fmt.Errorf("underlay: the node's InternalIP %s is on %s, an OVS interface that is no netdev bridge's own", endpoint, dev)
		}
		return u.move(ctx, link)
	}
	rec, err := u.record(ctx)
	if err != nil || rec == nil {
		return err // a netdev bridge of that name the operator made: used as it is
	}
	return u.complete(ctx, rec)
}

// record reads the bridge's record (nil: no bridge, or not ours).
func (u *underlay) record(ctx context.Context) (*underlayRecord, error) {
	bridge := u.bridge
	br, err := u.db.Bridge(ctx, bridge)
	if errors.Is(err, ovsdb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseRecord(bridge, br.ExternalIDs)
}

// parseRecord reads the record among a bridge's external_ids (nil: none).
func parseRecord(bridge string, externalIDs map[string]string) (*underlayRecord, error) {
	raw, ok := externalIDs[UnderlayKey]
	if !ok {
		return nil, nil
	}
	var rec underlayRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Interface == "" {
		return nil, fmt.Errorf("underlay bridge %s: record %s=%q does not parse: %v", bridge, UnderlayKey, raw, err)
	}
	return &rec, nil
}

// move records nic's configuration in a new underlay bridge and moves it
// there.
func (u *underlay) move(ctx context.Context, nic netlink.Link) error {
	bridge := u.bridge
	rec, err := u.host.snapshot(nic)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	u.log.Info("moving the node's interface onto the underlay bridge (userspace tunnelling)", "interface", rec.Interface, "bridge", bridge, "addresses", rec.Addresses)
	if _, err := u.db.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: bridge, DatapathType: "netdev", Standalone: true,
		// The bridge's interface takes over the node's MAC address too:
		// neighbours' ARP and ND caches stay right.
		OtherConfig: map[string]string{"hwaddr": rec.MAC},
		ExternalIDs: map[string]string{"tierflow.io/managed-by": "tierflow-agent", UnderlayKey: string(raw)}}); err != nil {
		return fmt.Errorf("underlay bridge %s: %w", bridge, err)
	}
	return u.complete(ctx, rec)
}

// complete brings the underlay to what rec says, idempotently:
// the bridge's interface up with the MTU, addresses and routes of the
// network interface, which holds none of them any more, receives nothing
// into the host's stack (package hostguard: ovs-vswitchd reads it with a
// packet socket, which would leave the stack a copy) and is a port of the
// bridge. Between the addresses appearing on the bridge and the interface
// joining it (a few milliseconds) the node's traffic is dropped.
func (u *underlay) complete(ctx context.Context, rec *underlayRecord) error {
	bridge := u.bridge
	if err := u.db.AddPort(ctx, bridge, ovsdb.PortConfig{Name: bridge, Type: ovsdb.PortInternal, MTURequest: rec.MTU}); err != nil {
		return fmt.Errorf("underlay bridge %s: %w", bridge, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := u.db.WaitOFPort(wctx, bridge); err != nil {
		return fmt.Errorf("underlay bridge %s: %w", bridge, err)
	}
	if err := u.host.takeOver(bridge, rec); err != nil {
		return err
	}
	if err := hostguard.Install(u.host.nsPath, rec.Interface); err != nil {
		return fmt.Errorf("underlay: %w", err)
	}
	if err := u.db.AddPort(ctx, bridge, ovsdb.PortConfig{Name: rec.Interface}); err != nil {
		return fmt.Errorf("underlay: attaching %s to %s: %w", rec.Interface, bridge, err)
	}
	if _, err := u.db.WaitOFPort(wctx, rec.Interface); err != nil {
		return fmt.Errorf("underlay: %w", err)
	}
	return nil
}

// snapshot reads what the underlay bridge takes over from nic.
func (h *host) snapshot(nic netlink.Link) (*underlayRecord, error) {
	a := nic.Attrs()
	rec := &underlayRecord{Interface: a.Name, MAC: a.HardwareAddr.String(), MTU: a.MTU}
	addrs, err := h.h.AddrList(nic, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("underlay: addresses of %s: %w", a.Name, err)
	}
	for _, ad := range addrs {
		if p, ok := prefixOf(ad.IPNet); ok && !p.Addr().IsLinkLocalUnicast() {
			rec.Addresses = append(rec.Addresses, p.String())
		}
	}
	routes, err := h.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: a.Index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("underlay: routes of %s: %w", a.Name, err)
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL || r.Type != unix.RTN_UNICAST || len(r.MultiPath) > 0 {
			continue // derived from an address, or not a plain route
		}
		ur := underlayRoute{Dst: "default", Metric: r.Priority}
		if dst, ok := prefixOf(r.Dst); ok {
			if dst.Addr().IsLinkLocalUnicast() || dst.Addr().IsMulticast() {
				continue
			}
			ur.Dst = dst.String()
		} else if r.Family == netlink.FAMILY_V6 {
			ur.Dst = "default6"
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			ur.Via = gw.Unmap().String()
		}
		if src, ok := netip.AddrFromSlice(r.Src); ok {
			ur.Src = src.Unmap().String()
		}
		rec.Routes = append(rec.Routes, ur)
	}
	return rec, nil
}

// takeOver gives bridge's interface rec's addresses and routes, brings it
// up, and removes them from rec's interface.
func (h *host) takeOver(bridge string, rec *underlayRecord) error {
	return h.moveAddresses(bridge, rec.Interface, rec)
}

// moveAddresses gives interface to rec's addresses and routes (bringing
// it up), then removes them from interface from, with the routes that
// outlived its addresses there. The node's established connections
// masqueraded to those addresses are kept first (keepMasqueraded: the
// removal would end them).
func (h *host) moveAddresses(to, from string, rec *underlayRecord) error {
	var prefixes []netip.Prefix
	var addrs []netip.Addr
	for _, s := range rec.Addresses {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("underlay record: address %q: %w", s, err)
		}
		prefixes = append(prefixes, p)
		addrs = append(addrs, p.Addr())
	}
	if leaving := h.heldBy(from, addrs); len(leaving) > 0 {
		kept, err := h.keepMasqueraded(leaving)
		if err != nil {
			h.log.Warn("some masqueraded connections of the node's address will be reset as it moves", "err", err)
		}
		h.log.Info("kept the node's masqueraded connections across the address move", "connections", kept, "from", from, "to", to)
	}
	dst, err := h.h.LinkByName(to)
	if err != nil {
		return fmt.Errorf("underlay: interface %s: %w", to, err)
	}
	if dst.Attrs().Flags&net.FlagUp == 0 {
		if err := h.h.LinkSetUp(dst); err != nil {
			return fmt.Errorf("underlay: %s: link up: %w", to, err)
		}
	}
	for _, p := range prefixes {
		addr := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.h.AddrAdd(dst, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("underlay: %s: adding %s: %w", to, p, err)
		}
	}
	var errs []error
	for _, r := range rec.Routes {
		nr, err := r.netlink(dst.Attrs().Index)
		if err != nil {
			return err
		}
		if err := h.h.RouteReplace(nr); err != nil {
			errs = append(errs, fmt.Errorf("underlay: %s: route %s via %s: %w", to, r.Dst, r.Via, err))
		}
	}
	var notFound netlink.LinkNotFoundError
	if src, err := h.h.LinkByName(from); err == nil {
		for _, p := range prefixes {
			if err := h.h.AddrDel(src, &netlink.Addr{IPNet: ipNet(p)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("underlay: removing %s from %s: %w", p, from, err))
			}
		}
		left, _ := h.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: src.Attrs().Index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		for _, r := range left {
			if r.Protocol != unix.RTPROT_KERNEL && r.Type == unix.RTN_UNICAST {
				_ = h.h.RouteDel(&r)
			}
		}
	} else if !errors.As(err, &notFound) { // gone: nothing left to remove
		errs = append(errs, fmt.Errorf("underlay: interface %s: %w", from, err))
	}
	return errors.Join(errs...)
}

func (r underlayRoute) netlink(link int) (*netlink.Route, error) {
	nr := &netlink.Route{LinkIndex: link, Priority: r.Metric, Table: unix.RT_TABLE_MAIN}
	switch r.Dst {
	case "default":
		nr.Family = netlink.FAMILY_V4
		nr.Dst = ipNet(netip.MustParsePrefix("0.0.0.0/0"))
	case "default6":
		nr.Family = netlink.FAMILY_V6
		nr.Dst = ipNet(netip.MustParsePrefix("::/0"))
	default:
		p, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			return nil, fmt.Errorf("underlay record: route %q: %w", r.Dst, err)
		}
		nr.Dst = ipNet(p)
	}
	if r.Via != "" {
		gw, err := netip.ParseAddr(r.Via)
		if err != nil {
			return nil, fmt.Errorf("underlay record: next hop %q: %w", r.Via, err)
		}
		nr.Gw = net.IP(gw.AsSlice())
	}
	if r.Src != "" {
		src, err := netip.ParseAddr(r.Src)
		if err != nil {
			return nil, fmt.Errorf("underlay record: source %q: %w", r.Src, err)
		}
		nr.Src = net.IP(src.AsSlice())
	}
	return nr, nil
}

// RevertUnderlay undoes what an agent moved onto the underlay bridge, as
// the bridge's record says: the interface gets back its addresses and
// routes, its host guard goes, and then it leaves the bridge, which is
// deleted. The agent runs it when it stops (a stopping agent is a
// stopping pod, whose OVS stops with it: without this the node would have
// no network until OVS is back, or ever, after an uninstall), and at
// start when its configuration has no underlay (another nodeNetwork.mode,
// or the kernel datapath). The host part needs only the record, which
// the OVSDB client's cache still holds when ovsdb-server is already
// stopping; the bridge's removal is then left to the next start or to the
// uninstall's cleanup, and reported. Without a record (nothing moved, or
// an operator's bridge) it does nothing. The node's traffic is dropped
// for a few milliseconds while the addresses move.
func RevertUnderlay(ctx context.Context, db *ovsdb.Client, bridge, netns string, log *slog.Logger) error {
	return withRecord(ctx, db, bridge, netns, log, func(u *underlay, rec *underlayRecord) error {
		return u.revert(ctx, rec)
	})
}

// RevertUnderlayHost is RevertUnderlay's host part alone, for tierflow's
// uninstall: it runs once OVS is gone and reads the underlay bridge's
// external_ids from OVS's database file. The network interface their
// record names gets back its addresses and routes and loses its host
// guard; the bridge's device, which held them, is the uninstall's to
// delete. It returns that interface, "" when there was nothing to move
// back (no record, or the interface holds the record's addresses).
func RevertUnderlayHost(bridge, netns string, externalIDs map[string]string) (string, error) {
	rec, err := parseRecord(bridge, externalIDs)
	if err != nil || rec == nil {
		return "", err
	}
	h, err := openHost(netns)
	if err != nil {
		return "", err
	}
	defer h.close()
	if back, err := h.holdsAll(rec.Interface, rec.Addresses); err != nil || back {
		return "", err
	}
	return rec.Interface, h.revert(bridge, rec)
}

// heldBy returns the addresses of addrs that the interface named iface
// holds (none when it is gone).
func (h *host) heldBy(iface string, addrs []netip.Addr) []netip.Addr {
	link, err := h.h.LinkByName(iface)
	if err != nil {
		return nil
	}
	list, err := h.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil
	}
	var held []netip.Addr
	for _, ad := range list {
		if p, ok := prefixOf(ad.IPNet); ok && slices.Contains(addrs, p.Addr()) {
			held = append(held, p.Addr())
		}
	}
	return held
}

// holdsAll reports whether the interface named iface holds every address
// of prefixes.
func (h *host) holdsAll(iface string, prefixes []string) (bool, error) {
	for _, s := range prefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return false, fmt.Errorf("underlay record: address %q: %w", s, err)
		}
		link, err := h.linkWithAddr(p.Addr())
		if err != nil || link == nil || link.Attrs().Name != iface {
			return false, err
		}
	}
	return true, nil
}

// revert is RevertUnderlay with the record.
func (u *underlay) revert(ctx context.Context, rec *underlayRecord) error {
	db, bridge := u.db, u.bridge
	u.log.Info("moving the node's interface back from the underlay bridge", "interface", rec.Interface, "bridge", bridge, "addresses", rec.Addresses)
	if err := u.host.revert(bridge, rec); err != nil {
		return err
	}
	// The node has its network back; the bridge's removal is OVSDB's, and
	// a stopping agent's OVS stops with it: the calls end with ctx
	// (pkg/ovs/ovsdb bounds them), so the DaemonSet's next pod, with the
	// node's next OVS, does not wait for an OVSDB that is gone.
	if err := db.DeletePort(ctx, bridge, rec.Interface); err != nil {
		return fmt.Errorf("underlay: detaching %s from %s: %w", rec.Interface, bridge, err)
	}
	if err := db.DeleteBridge(ctx, bridge); err != nil {
		return fmt.Errorf("underlay: deleting %s: %w", bridge, err)
	}
	return nil
}

// revert is takeOver reversed: rec's interface loses its host guard and
// gets its addresses and routes back, the bridge's interface loses them.
func (h *host) revert(bridge string, rec *underlayRecord) error {
	if err := hostguard.Remove(h.nsPath, rec.Interface); err != nil {
		return fmt.Errorf("underlay: %w", err)
	}
	return h.moveAddresses(rec.Interface, bridge, rec)
}
