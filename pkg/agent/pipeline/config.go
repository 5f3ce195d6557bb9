package pipeline

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

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
	for _, ip := range c.Gateway.IPs {
		if !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" {
			return fmt.Errorf("pipeline: invalid gateway address %v", ip)
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
