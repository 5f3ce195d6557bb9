package nodenet

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the kernel routes the agent owns (rtm_protocol; `ip
// route show proto 0x54`): stale ones are found by it and removed, and no
// route of anyone else is ever touched. 0x54 ('T') is not assigned in
// iproute2's rt_protos.
const RouteProtocol netlink.RouteProtocol = 0x54

// host is the node's network stack: the network namespace the agent
// configures (its own unless Options.NetNS names another, as tests do to
// run several nodes on one machine).
type host struct {
	nsPath string
	h      *netlink.Handle
	// log reports what a step does on its own (the underlay's kept
	// connections); it discards unless the caller has a logger.
	log *slog.Logger
}

func openHost(nsPath string) (*host, error) {
	if nsPath == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		return &host{h: h, log: slog.New(slog.DiscardHandler)}, nil
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", nsPath, err)
	}
	return &host{nsPath: nsPath, h: h, log: slog.New(slog.DiscardHandler)}, nil
}

func (h *host) close() { h.h.Close() }

// inNetNS runs fn on a thread in the node's namespace (for /proc/sys/net,
// which shows the namespace of the thread that opens it).
func (h *host) inNetNS(fn func() error) error {
	if h.nsPath == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromPath(h.nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked and dies with its goroutine rather than
		// run other goroutines in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("returning to the original network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// ensureForwarding turns IP forwarding on for the families in use: the
// host routes between the gateway and the node network. A node where it is
// off and cannot be turned on (read-only /proc/sys in an unprivileged
// container) gets a clear error; Kubernetes nodes normally have it on.
func (h *host) ensureForwarding(v4, v6 bool) error {
	return h.inNetNS(func() error {
		var files []string
		if v4 {
			files = append(files, "/proc/sys/net/ipv4/ip_forward")
		}
		if v6 {
			files = append(files, "/proc/sys/net/ipv6/conf/all/forwarding")
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("reading %s: %w", f, err)
			}
			if strings.TrimSpace(string(b)) == "1" {
				continue
			}
			if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
				return fmt.Errorf("IP forwarding is off (%s) and cannot be turned on: %w", f, err)
			}
		}
		return nil
	})
}

// configureGateway gives the gateway interface exactly the addresses want
// (besides link-local ones), the MTU (0: leave it), brings it up and
// returns its MAC address.
func (h *host) configureGateway(name string, want []netip.Prefix, mtu int) (net.HardwareAddr, error) {
	mac, err := h.configureGatewayLink(name, want, mtu)
	if err != nil {
		return nil, err
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("gateway %s: MAC %v is not an Ethernet address", name, mac)
	}
	return mac, nil
}

func (h *host) configureGatewayLink(name string, want []netip.Prefix, mtu int) (net.HardwareAddr, error) {
	link, err := h.h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("gateway interface %s: %w", name, err)
	}
	if mtu != 0 && link.Attrs().MTU != mtu {
		if err := h.h.LinkSetMTU(link, mtu); err != nil {
			return nil, fmt.Errorf("gateway %s: MTU %d: %w", name, mtu, err)
		}
	}
	have, err := h.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: addresses: %w", name, err)
	}
	wanted := map[netip.Prefix]bool{}
	for _, p := range want {
		wanted[p] = true
	}
	present := map[netip.Prefix]bool{}
	for _, a := range have {
		p, ok := prefixOf(a.IPNet)
		if !ok || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if wanted[p] {
			present[p] = true
			continue
		}
		// A previous pod CIDR of this node (or someone's manual address):
		// the gateway owns only the current ones.
		if err := h.h.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("gateway %s: removing stale address %s: %w", name, p, err)
		}
	}
	for _, p := range want {
		if present[p] {
			continue
		}
		addr := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			// No duplicate address detection: the address is the node's
			// own by allocation, and DAD would hold it back for seconds.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.h.AddrAdd(link, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("gateway %s: adding %s: %w", name, p, err)
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := h.h.LinkSetUp(link); err != nil {
			return nil, fmt.Errorf("gateway %s: link up: %w", name, err)
		}
	}
	return link.Attrs().HardwareAddr, nil
}

// syncRoutes makes the agent's routes (RouteProtocol, main table) exactly
// want: missing or changed ones are replaced, stale ones deleted. Each
// route that fails is reported; the others are still applied.
func (h *host) syncRoutes(want []Route) error {
	have, err := h.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("listing routes: %w", err)
	}
	wanted := map[netip.Prefix]Route{}
	var errs []error
	links := map[string]int{}
	for _, r := range want {
		if r.Iface != "" {
			if _, ok := links[r.Iface]; !ok {
				l, err := h.h.LinkByName(r.Iface)
				if err != nil {
					errs = append(errs, fmt.Errorf("route %s: device %s: %w", r, r.Iface, err))
					continue
				}
				links[r.Iface] = l.Attrs().Index
			}
		}
		wanted[r.Dst] = r
	}
	current := map[netip.Prefix]bool{}
	for _, r := range have {
		dst, ok := prefixOf(r.Dst)
		via, okVia := netip.AddrFromSlice(r.Gw)
		w, isWanted := wanted[dst]
		if ok && okVia && isWanted && w.Via == via.Unmap() && len(r.MultiPath) == 0 &&
			(w.Iface == "" || r.LinkIndex == links[w.Iface]) && w.OnLink == (r.Flags&unix.RTNH_F_ONLINK != 0) {
			current[dst] = true
			continue
		}
		if err := h.h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("removing stale route %v: %w", r.Dst, err))
		}
	}
	for _, r := range want {
		if current[r.Dst] {
			continue
		}
		if _, ok := wanted[r.Dst]; !ok {
			continue // its device is missing: reported above
		}
		nr := &netlink.Route{Dst: ipNet(r.Dst), Gw: net.IP(r.Via.AsSlice()), Protocol: RouteProtocol}
		if r.Iface != "" {
			nr.LinkIndex = links[r.Iface]
		}
		if r.OnLink {
			nr.Flags = unix.RTNH_F_ONLINK
		}
		if err := h.h.RouteReplace(nr); err != nil {
			// Typically ENETUNREACH: the next hop is not on a directly
			// connected network (noEncap needs L2-adjacent nodes).
			errs = append(errs, fmt.Errorf("route %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// routes lists the agent's routes as they are in the kernel.
func (h *host) routes() ([]Route, error) {
	have, err := h.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, err
	}
	var out []Route
	for _, r := range have {
		dst, ok := prefixOf(r.Dst)
		via, okVia := netip.AddrFromSlice(r.Gw)
		if !ok || !okVia {
			continue
		}
		rt := Route{Dst: dst, Via: via.Unmap(), OnLink: r.Flags&unix.RTNH_F_ONLINK != 0}
		if link, err := h.h.LinkByIndex(r.LinkIndex); err == nil {
			rt.Iface = link.Attrs().Name
		}
		out = append(out, rt)
	}
	return out, nil
}

// syncNeighbors makes dev's permanent neighbour entries with link-layer
// address mac exactly the addresses in want (the next hops of the encap
// routes). Entries with another address or state are not the agent's and
// are left alone.
func (h *host) syncNeighbors(dev string, want []netip.Addr, mac net.HardwareAddr) error {
	link, err := h.h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("neighbours on %s: %w", dev, err)
	}
	idx := link.Attrs().Index
	have, err := h.h.NeighList(idx, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("neighbours on %s: %w", dev, err)
	}
	wanted := map[netip.Addr]bool{}
	for _, a := range want {
		wanted[a] = true
	}
	present := map[netip.Addr]bool{}
	var errs []error
	for _, n := range have {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || n.State&netlink.NUD_PERMANENT == 0 || !bytes.Equal(n.HardwareAddr, mac) {
			continue
		}
		ip = ip.Unmap()
		if wanted[ip] {
			present[ip] = true
			continue
		}
		if err := h.h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing neighbour %s on %s: %w", ip, dev, err))
		}
	}
	for _, a := range want {
		if present[a] {
			continue
		}
		fam := netlink.FAMILY_V4
		if a.Is6() {
			fam = netlink.FAMILY_V6
		}
		n := &netlink.Neigh{LinkIndex: idx, Family: fam, State: netlink.NUD_PERMANENT, IP: net.IP(a.AsSlice()), HardwareAddr: mac}
		if err := h.h.NeighSet(n); err != nil {
			errs = append(errs, fmt.Errorf("neighbour %s on %s: %w", a, dev, err))
		}
	}
	return errors.Join(errs...)
}

// linkWithAddr returns the interface holding ip (nil: none).
func (h *host) linkWithAddr(ip netip.Addr) (netlink.Link, error) {
	addrs, err := h.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok && p.Addr() == ip {
			l, err := h.h.LinkByIndex(a.LinkIndex)
			if err != nil {
				return nil, fmt.Errorf("interface of %s: %w", ip, err)
			}
			return l, nil
		}
	}
	return nil, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
