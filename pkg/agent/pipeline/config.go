package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/tierflow/tierflow/pkg/model"
)

// Config is what the static pipeline needs to know about its node.
type Config struct {
	// UplinkPort is the OpenFlow port towards other nodes (0: none, a
	// single-node bridge).
	UplinkPort uint32
	// CtZone is the conntrack zone of this node's connections. Nodes that
	// share a datapath (tests run several bridges in one ovs-vswitchd) must
	// use different zones.
	CtZone uint16
	// Gateway is the node's gateway port (routed node networking, see
	// pkg/agent/nodenet); its zero value means none. A bridge has an uplink
	// or a gateway, not both.
	Gateway Gateway
	// Tunnel is the node's tunnel port and the other nodes behind it
	// (encap node networking); its zero value means none. A tunnel needs a
	// gateway and excludes an uplink.
	Tunnel Tunnel
}

// Tunnel is an OVS tunnel port (Geneve or VXLAN) with flow-based remote
// endpoints (options:remote_ip=flow): a local pod's packet for another
// node's pod CIDR leaves through it to that node's address, and packets
// arriving through it come from the other nodes' pods and hosts.
type Tunnel struct {
	// Port is the tunnel's OpenFlow port (0: no tunnel).
	Port uint32
	// Peers are the other nodes the tunnel reaches. A node that is not
	// listed is neither sent to nor accepted from.
	Peers []TunnelPeer
}

// TunnelPeer is another node reachable through the tunnel.
type TunnelPeer struct {
	Node string
	// IP is the node's tunnel endpoint (its InternalIP): the outer
	// destination of what is sent to it, and the only outer source
	// accepted for its pod CIDRs.
	IP netip.Addr
	// PodCIDRs are the node's pod CIDRs: the inner destinations sent to
	// it, and inner sources accepted from it (its pods, and its host
	// through its gateway, which owns the first address).
	PodCIDRs []netip.Prefix
	// HostIPs are the node's InternalIPs, the other inner sources
	// accepted from it: its host sends through the tunnel, with its
	// InternalIP as source, the connections kube-proxy marked for
	// masquerading (a NodePort reached from outside, backed by a pod of
	// this node; pkg/agent/nodenet). Local pods' replies to them go back
	// through the tunnel.
	HostIPs []netip.Addr
}

// Gateway is the OVS internal port through which the node's host stack
// reaches the pods and routes their traffic to everything that is not a
// local pod (other nodes' pods, services, the host, outside).
type Gateway struct {
	// Port is the gateway's OpenFlow port (0: no gateway).
	Port uint32
	// IPs are the gateway's own addresses (the first address of each of
	// the node's pod CIDRs). Packets from the gateway with one of them as
	// source are the node's own traffic (kubelet probes): see DESIGN.md.
	IPs []netip.Addr
	// MAC is the gateway interface's address: replies of connections that
	// came in through the gateway are sent back to it with this
	// destination MAC.
	MAC net.HardwareAddr
	// PodCIDRs are this node's pod CIDRs (the networks the IPs are the
	// first address of). A source in them arriving from the gateway that
	// is neither a gateway address nor a local pod's is spoofed: it drops.
	PodCIDRs []netip.Prefix
}

// Equal reports whether g and o are the same gateway.
func (g Gateway) Equal(o Gateway) bool {
	return g.Port == o.Port && slices.Equal(g.IPs, o.IPs) && bytes.Equal(g.MAC, o.MAC) && slices.Equal(g.PodCIDRs, o.PodCIDRs)
}

// Validate reports why the configuration cannot be installed.
func (c Config) Validate() error {
	if c.UplinkPort != 0 && c.Gateway.Port != 0 {
		return fmt.Errorf("pipeline: uplink port %d and gateway port %d: a bridge has one or the other", c.UplinkPort, c.Gateway.Port)
	}
	if c.UplinkPort >= 0xff00 {
		return fmt.Errorf("pipeline: invalid uplink port %d", c.UplinkPort)
	}
	if c.Gateway.Port >= 0xff00 {
		return fmt.Errorf("pipeline: invalid gateway port %d", c.Gateway.Port)
	}
	if c.Gateway.Port != 0 && len(c.Gateway.IPs) == 0 {
		return errors.New("pipeline: gateway without an address")
	}
	if c.Gateway.Port != 0 && len(c.Gateway.MAC) != 6 {
		return fmt.Errorf("pipeline: gateway MAC %v is not an Ethernet address", c.Gateway.MAC)
	}
	for _, p := range c.Gateway.PodCIDRs {
		if !p.IsValid() || p.Addr().Is4In6() || p.Masked() != p {
			return fmt.Errorf("pipeline: invalid pod CIDR %v", p)
		}
	}
	for _, ip := range c.Gateway.IPs {
		if !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" {
			return fmt.Errorf("pipeline: invalid gateway address %v", ip)
		}
		if !slices.ContainsFunc(c.Gateway.PodCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return fmt.Errorf("pipeline: gateway address %v is in none of the pod CIDRs %v", ip, c.Gateway.PodCIDRs)
		}
	}
	return c.Tunnel.validate(c)
}

// validate checks the tunnel against the rest of the configuration: it
// needs a gateway (the pods' next hop) and no uplink, and its peers must
// be unambiguous, since a packet's inner destination picks the peer and
// its outer source vouches for its inner source.
func (t Tunnel) validate(c Config) error {
	if t.Port == 0 {
		if len(t.Peers) > 0 {
			return errors.New("pipeline: tunnel peers without a tunnel port")
		}
		return nil
	}
	switch {
	case t.Port >= 0xff00:
		return fmt.Errorf("pipeline: invalid tunnel port %d", t.Port)
	case c.UplinkPort != 0:
		return fmt.Errorf("pipeline: uplink port %d and tunnel port %d: a bridge has one or the other", c.UplinkPort, t.Port)
	case c.Gateway.Port == 0:
		return fmt.Errorf("pipeline: tunnel port %d without a gateway", t.Port)
	case t.Port == c.Gateway.Port:
		return fmt.Errorf("pipeline: tunnel and gateway on one port %d", t.Port)
	}
	endpoints, hosts := map[netip.Addr]string{}, map[netip.Addr]string{}
	var cidrs []netip.Prefix
	for _, p := range t.Peers {
		if !p.IP.IsValid() || p.IP.Is4In6() || p.IP.Zone() != "" || p.IP.IsUnspecified() {
			return fmt.Errorf("pipeline: tunnel peer %s: invalid endpoint %v", p.Node, p.IP)
		}
		if other, dup := endpoints[p.IP]; dup {
			return fmt.Errorf("pipeline: tunnel peers %s and %s share endpoint %s", other, p.Node, p.IP)
		}
		endpoints[p.IP] = p.Node
		for _, c := range p.PodCIDRs {
			if !c.IsValid() || c.Masked() != c || c.Addr().Is4In6() || c.Addr().Zone() != "" {
				return fmt.Errorf("pipeline: tunnel peer %s: invalid pod CIDR %v", p.Node, c)
			}
			for _, o := range cidrs {
				if o.Overlaps(c) {
					return fmt.Errorf("pipeline: tunnel peer %s: pod CIDR %s overlaps %s", p.Node, c, o)
				}
			}
			cidrs = append(cidrs, c)
		}
		for _, ip := range p.HostIPs {
			if !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" || ip.IsUnspecified() {
				return fmt.Errorf("pipeline: tunnel peer %s: invalid host address %v", p.Node, ip)
			}
			if other, dup := hosts[ip]; dup && other != p.Node {
				return fmt.Errorf("pipeline: tunnel peers %s and %s share host address %s", other, p.Node, ip)
			}
			hosts[ip] = p.Node
		}
	}
	return nil
}

// LocalPod is a pod attached to this node's bridge.
type LocalPod struct {
	Pod    model.PodRef
	OFPort uint32
	MAC    net.HardwareAddr
	IPs    []netip.Addr
	// Ports are the pod's named container ports.
	Ports []model.NamedPort
}

// Validate reports why a pod cannot be attached safely.
func (p LocalPod) Validate() error {
	if p.OFPort == 0 || p.OFPort >= 0xff00 {
		return fmt.Errorf("pod %s: invalid OpenFlow port %d", p.Pod, p.OFPort)
	}
	if len(p.MAC) != 6 {
		return fmt.Errorf("pod %s: invalid MAC %v", p.Pod, p.MAC)
	}
	for _, ip := range p.IPs {
		if !ip.IsValid() || ip.Is4In6() {
			return fmt.Errorf("pod %s: invalid IP %v", p.Pod, ip)
		}
	}
	return nil
}
