package nodenet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// EncapOptions configure the encap node network (see doc.go, "Encap").
type EncapOptions struct {
	// TunnelType is config.TunnelGeneve or config.TunnelVXLAN.
	TunnelType string
	// TunnelName is the tunnel's OVS port (default TunnelPortName).
	TunnelName string
	// UnderlayBridge, when set, is the netdev bridge that takes over the
	// node's InternalIP and its interface (userspace tunnelling, see
	// underlay.go); empty with the kernel datapath, which routes tunnel
	// packets through the host's stack.
	UnderlayBridge string
	// OnTunnel is called whenever the tunnel's port or peers change; the
	// agent rebuilds its pipeline with them.
	OnTunnel func(pipeline.Tunnel)
}

// TunnelPortName is the default name of the tunnel's OVS port.
const TunnelPortName = "tierflow-tun0"

// RemoteGatewayMAC is the link-layer address of the permanent neighbour
// entries the host gets for other nodes' gateway addresses (the next hops
// of its routes to their pod CIDRs, on the local gateway). Any unicast
// address does: the pipeline forwards what the host sends by IP address,
// and the destination node sets the MAC addresses its pod expects.
var RemoteGatewayMAC = net.HardwareAddr{0x02, 0x74, 0x66, 0x00, 0x00, 0x01}

// EncapOverhead is what encapsulation adds to a pod's IP packet on the
// underlay: the inner Ethernet header (14 bytes), the Geneve (without
// options) or VXLAN header (8), UDP (8) and the outer IPv4 (20) or IPv6
// (40) header: 50 bytes over IPv4, 70 over IPv6.
func EncapOverhead(tunnelType string, ipv6Underlay bool) int {
	ip := 20
	if ipv6Underlay {
		ip = 40
	}
	const eth, tunnelHeader, udp = 14, 8, 8 // Geneve and VXLAN alike
	return eth + tunnelHeader + udp + ip
}

// TunnelEndpoint is the node's address tunnels run between: its IPv4
// InternalIP, else its IPv6 one. Every node picks the same way, so two
// dual-stack nodes tunnel over IPv4 and a node reaches peers through the
// family of its own endpoint.
func TunnelEndpoint(n Node) (netip.Addr, error) {
	if ip := n.internalIP(true); ip.IsValid() {
		return ip, nil
	}
	if ip := n.internalIP(false); ip.IsValid() {
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("node %s has no InternalIP: nothing to tunnel from", n.Name)
}

// DesiredPeers computes the tunnel's peers: every other node with the
// pod CIDRs it can safely claim (see claims) and its InternalIP of the
// family of the local endpoint; and the host's routes to those CIDRs,
// via each peer's gateway address (the CIDR's first address) on the local
// gateway, on-link. A node without an InternalIP of that family is left
// out with an error.
func DesiredPeers(local Node, endpoint netip.Addr, others []Node, bad map[string]error, gateway string) ([]pipeline.TunnelPeer, []Route, map[string]error) {
	nodes, errs := claims(local, others, bad)
	// A host address claimed by two nodes (or this one) could not tell
	// them apart: neither is accepted for it.
	hostClaims := map[netip.Addr]int{}
	for _, n := range append([]Node{local}, nodes...) {
		for _, ip := range n.InternalIPs {
			hostClaims[ip]++
		}
	}
	var cands []pipeline.TunnelPeer
	byIP := map[netip.Addr][]string{}
	for _, n := range nodes {
		if len(n.PodCIDRs) == 0 {
			continue
		}
		ip := n.internalIP(endpoint.Is4())
		if !ip.IsValid() {
			errs[n.Name] = errors.Join(errs[n.Name], fmt.Errorf("node %s: no InternalIP of the family of this node's tunnel endpoint %s; not tunneled to", n.Name, endpoint))
			continue
		}
		var hosts []netip.Addr
		for _, h := range n.InternalIPs {
			if hostClaims[h] == 1 {
				hosts = append(hosts, h)
			}
		}
		cands = append(cands, pipeline.TunnelPeer{Node: n.Name, IP: ip, PodCIDRs: n.PodCIDRs, HostIPs: hosts})
		byIP[ip] = append(byIP[ip], n.Name)
	}
	var peers []pipeline.TunnelPeer
	var routes []Route
	for _, p := range cands {
		// A node claiming this node's InternalIP or another's: a packet's
		// outer source could not tell them apart, so it is not tunneled
		// to (nor is the other).
		if p.IP == endpoint || len(byIP[p.IP]) > 1 {
			errs[p.Node] = errors.Join(errs[p.Node], fmt.Errorf("node %s: InternalIP %s is also another node's; not tunneled to", p.Node, p.IP))
			continue
		}
		peers = append(peers, p)
		for _, c := range p.PodCIDRs {
			routes = append(routes, Route{Node: p.Node, Dst: c, Via: c.Addr().Next(), Iface: gateway, OnLink: true})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].Node < peers[j].Node })
	sort.Slice(routes, func(i, j int) bool { return routes[i].Dst.String() < routes[j].Dst.String() })
	return peers, routes, errs
}

// PodMTU is the MTU of the node's pods and gateway: cni.mtu as configured,
// except in encap mode, where 0 means the MTU of the interface holding
// the node's tunnel endpoint minus the encapsulation overhead, and where a
// configured value must leave room for the overhead. In encap mode the
// result must reach the minimum of the pods' address families
// (config.MinPodMTUIPv4, config.MinPodMTUIPv6). netns is the node's
// network namespace ("" for the agent's own). Every error says what to
// change; the agent refuses to start with one, and so does
// tierflow-install-cni.
func PodMTU(cfg *config.Agent, local Node, netns string) (int, error) {
	if cfg.NodeNetwork.Mode != config.NodeNetworkEncap {
		return cfg.CNI.MTU, nil
	}
	endpoint, err := TunnelEndpoint(local)
	if err != nil {
		return 0, err
	}
	h, err := openHost(netns)
	if err != nil {
		return 0, err
	}
	defer h.close()
	link, err := h.linkWithAddr(endpoint)
	if err != nil {
		return 0, err
	}
	if link == nil && cfg.DatapathType == config.DatapathNetdev {
		// A re-created underlay bridge interface has no address until
		// the agent restores it; its MTU is the one the node's interface
		// had.
		link, _ = h.h.LinkByName(cfg.NodeNetwork.UnderlayBridge)
	}
	if link == nil {
		return 0, fmt.Errorf("encap: node %s's InternalIP %s is on no interface of this host, so the pod MTU cannot be derived from it: set cni.mtu", local.Name, endpoint)
	}
	underlay := link.Attrs().MTU
	overhead := EncapOverhead(cfg.NodeNetwork.TunnelType, endpoint.Is6())
	fits := underlay - overhead
	what := fmt.Sprintf("%s's MTU %d minus %d bytes of %s over IPv%d", link.Attrs().Name, underlay, overhead, cfg.NodeNetwork.TunnelType, map[bool]int{true: 6, false: 4}[endpoint.Is6()])
	mtu := fits
	if cfg.CNI.MTU != 0 {
		if cfg.CNI.MTU > fits {
			return 0, fmt.Errorf("encap: cni.mtu %d does not fit the underlay (%s leaves %d): encapsulated packets would be dropped; set cni.mtu to at most %d, or 0 to derive it", cfg.CNI.MTU, what, fits, fits)
		}
		mtu = cfg.CNI.MTU
		what = "cni.mtu"
	}
	for _, p := range local.PodCIDRs {
		min, fam := config.MinPodMTUIPv4, "IPv4"
		if p.Addr().Is6() {
			min, fam = config.MinPodMTUIPv6, "IPv6"
		}
		if mtu < min {
			return 0, fmt.Errorf("encap: pod MTU %d (%s) is below %d, the minimum for the %s pod CIDR %s: raise the underlay's MTU", mtu, what, min, fam, p)
		}
	}
	return mtu, nil
}

// ensureTunnel creates (or adopts) the tunnel port with flow-based remote
// endpoints and returns its OpenFlow port.
func (m *Manager) ensureTunnel(ctx context.Context) (uint32, error) {
	e := m.o.Encap
	typ := ovsdb.PortGeneve
	if e.TunnelType == config.TunnelVXLAN {
		typ = ovsdb.PortVXLAN
	}
	if err := m.o.OVSDB.AddPort(ctx, m.o.Bridge, ovsdb.PortConfig{Name: e.TunnelName, Type: typ,
		// The remote endpoint is each packet's tun_dst, set by the
		// pipeline's Forwarding table from the destination's pod CIDR.
		Options:     map[string]string{"remote_ip": "flow"},
		ExternalIDs: map[string]string{"tierflow.io/managed-by": "tierflow-agent", "tierflow.io/tunnel": "true"}}); err != nil {
		return 0, fmt.Errorf("tunnel port %s on %s: %w", e.TunnelName, m.o.Bridge, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	port, err := m.o.OVSDB.WaitOFPort(wctx, e.TunnelName)
	if err != nil {
		// As for the gateway: ovs-vswitchd does not retry a port it
		// could not open (e.g. another tunnel port of the type and UDP
		// port exists); the next attempt creates it anew.
		if derr := m.o.OVSDB.DeletePort(ctx, m.o.Bridge, e.TunnelName); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the failed port: %w", derr))
		}
		return 0, fmt.Errorf("tunnel port %s: %w", e.TunnelName, err)
	}
	return port, nil
}

// syncEncap is the encap part of a sync, after the gateway is up: the
// tunnel port, its peers (handed to the pipeline) and the host's routes
// and neighbour entries to the peers' pod CIDRs through the gateway.
func (m *Manager) syncEncap(ctx context.Context, local Node, endpoint netip.Addr, others []Node, bad map[string]error) ([]Route, map[string]error, error) {
	port, err := m.ensureTunnel(ctx)
	if err != nil {
		return nil, nil, err
	}
	peers, routes, nodeErrs := DesiredPeers(local, endpoint, others, bad, m.o.GatewayName)
	t := pipeline.Tunnel{Port: port, Peers: peers}
	m.mu.Lock()
	changed := !sameTunnel(m.status.Tunnel, t)
	m.status.Tunnel = t
	m.status.Endpoint = endpoint
	m.mu.Unlock()
	if changed {
		var names []string
		for _, p := range peers {
			names = append(names, p.Node+"="+p.IP.String())
		}
		m.log.Info("tunnel ready", "port", m.o.Encap.TunnelName, "ofport", port, "endpoint", endpoint, "peers", names)
		m.o.Encap.OnTunnel(t)
	}
	var next []netip.Addr
	for _, r := range routes {
		next = append(next, r.Via)
	}
	err = m.host.syncNeighbors(m.o.GatewayName, next, RemoteGatewayMAC)
	return routes, nodeErrs, err
}

func sameTunnel(a, b pipeline.Tunnel) bool {
	return a.Port == b.Port && slices.EqualFunc(a.Peers, b.Peers, func(x, y pipeline.TunnelPeer) bool {
		return x.Node == y.Node && x.IP == y.IP && slices.Equal(x.PodCIDRs, y.PodCIDRs)
	})
}
