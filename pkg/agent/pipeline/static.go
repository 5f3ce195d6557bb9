package pipeline

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
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

const (
	ethIPv4     = 0x0800
	ethIPv6     = 0x86dd
	ethARP      = 0x0806
	protoICMPv6 = 58
	icmp6NS     = 135
	icmp6NA     = 136
)

func u8(v uint8) *uint8 { return &v }

// ctState values (ovs-fields(7)).
const (
	ctNew = 0x01
	ctEst = 0x02
	ctRel = 0x04
	ctRpl = 0x08
	ctInv = 0x10
	ctTrk = 0x20
)

func ctState(value, mask uint32) *openflow.Masked { return &openflow.Masked{Value: value, Mask: mask} }

func goTo(t Table) openflow.Action { return openflow.GotoTable{Table: t.ID()} }

var zeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// linkLocal is where IPv6 neighbour discovery legitimately comes from besides
// a pod's own addresses.
var linkLocal = netip.MustParsePrefix("fe80::/10")

// StaticFlows returns the pipeline's flows that do not depend on policy:
// port classification, spoof guard, conntrack, forwarding, commit, output,
// and each policy table's fall-through. With synced false no pod port is
// classified, so nothing passes: the state before the first full policy sync.
func StaticFlows(cfg Config, pods []LocalPod, synced bool, round uint8) []openflow.Flow {
	ck := Cookie(round, RolePipeline, 0)
	var fs []openflow.Flow
	add := func(t Table, prio uint16, m openflow.Match, acts ...openflow.Action) {
		fs = append(fs, openflow.Flow{Table: t.ID(), Priority: prio, Cookie: ck, Match: m, Actions: acts})
	}
	gw := cfg.Gateway
	pods = append([]LocalPod(nil), pods...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].OFPort < pods[j].OFPort })

	// Sentinel: a no-op flow whose absence means the flows were wiped.
	fs = append(fs, openflow.Flow{Table: Classifier.ID(), Priority: 1, Cookie: Cookie(round, RoleSentinel, 0),
		Match: openflow.Match{InPort: 0xfffffff0}})

	// Classifier: unknown ports drop (the default with no actions).
	add(Classifier, PriorityDefault, openflow.Match{})
	if synced {
		if cfg.UplinkPort != 0 {
			add(Classifier, PriorityNormal, openflow.Match{InPort: cfg.UplinkPort}, LoadSrc(SrcUplink), goTo(SpoofGuard))
		}
		if gw.Port != 0 {
			add(Classifier, PriorityNormal, openflow.Match{InPort: gw.Port}, LoadSrc(SrcGateway), goTo(SpoofGuard))
		}
		for _, p := range pods {
			add(Classifier, PriorityNormal, openflow.Match{InPort: p.OFPort}, LoadSrc(SrcLocalPod), goTo(SpoofGuard))
		}
	}

	// SpoofGuard.
	add(SpoofGuard, PriorityDefault, openflow.Match{})
	// The uplink and the gateway are trusted: traffic through them was
	// guarded at its source node, or comes from the host itself.
	for _, src := range []struct {
		port uint32
		kind uint32
	}{{cfg.UplinkPort, SrcUplink}, {gw.Port, SrcGateway}} {
		if src.port == 0 {
			continue
		}
		up := map[int]openflow.Masked{RegFlags: MatchSrc(src.kind)}
		add(SpoofGuard, PriorityNormal, openflow.Match{Regs: up, EthType: ethARP}, LoadBypass(), goTo(Forwarding))
		for _, t := range []uint8{icmp6NS, icmp6NA} {
			add(SpoofGuard, PriorityHigh, openflow.Match{Regs: up, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(t)}, LoadBypass(), goTo(Forwarding))
		}
		add(SpoofGuard, PriorityNormal, openflow.Match{Regs: up, EthType: ethIPv4}, goTo(Conntrack))
		add(SpoofGuard, PriorityNormal, openflow.Match{Regs: up, EthType: ethIPv6}, goTo(Conntrack))
	}
	for _, p := range pods {
		var has6 bool
		for _, ip := range p.IPs {
			if ip.Is4() {
				add(SpoofGuard, PriorityNormal, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethARP, ArpSpa: ip, ArpSha: p.MAC}, LoadBypass(), goTo(Forwarding))
				add(SpoofGuard, PriorityNormal, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv4, IPSrc: netip.PrefixFrom(ip, 32)}, goTo(Conntrack))
				continue
			}
			has6 = true
			add(SpoofGuard, PriorityNormal, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv6, IPSrc: netip.PrefixFrom(ip, 128)}, goTo(Conntrack))
		}
		if !has6 {
			continue
		}
		// Neighbour discovery: a solicitation may come from the pod's own
		// addresses, its link-local address or :: (duplicate address
		// detection) and may only advertise the pod's MAC; an advertisement
		// may only claim the pod's own addresses (or link-local ones).
		srcs := []netip.Prefix{linkLocal, netip.MustParsePrefix("::/128")}
		targets := []netip.Prefix{linkLocal}
		for _, ip := range p.IPs {
			if ip.Is6() {
				srcs = append(srcs, netip.PrefixFrom(ip, 128))
				targets = append(targets, netip.PrefixFrom(ip, 128))
			}
		}
		for _, mac := range []net.HardwareAddr{p.MAC, zeroMAC} {
			for _, s := range srcs {
				add(SpoofGuard, PriorityHigh, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv6, IPSrc: s, IPProto: protoICMPv6, ICMPType: u8(icmp6NS), ICMPCode: u8(0), NDSll: mac}, LoadBypass(), goTo(Forwarding))
			}
			for _, tg := range targets {
				add(SpoofGuard, PriorityHigh, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(icmp6NA), ICMPCode: u8(0), NDTarget: tg, NDTll: mac}, LoadBypass(), goTo(Forwarding))
			}
		}
		// Any other ND message from the pod (a spoofed target, address or
		// link-layer option) drops, above the pod's generic IPv6 flow.
		for _, t := range []uint8{icmp6NS, icmp6NA} {
			add(SpoofGuard, PriorityHigh-10, openflow.Match{InPort: p.OFPort, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(t)})
		}
	}

	// Conntrack.
	ctTable := ConntrackState.ID()
	for _, et := range []uint16{ethIPv4, ethIPv6} {
		add(Conntrack, PriorityNormal, openflow.Match{EthType: et}, openflow.CT{Zone: cfg.CtZone, Table: &ctTable})
	}
	add(Conntrack, PriorityDefault, openflow.Match{})

	// ConntrackState: invalid drops; replies and related packets of a
	// connection pass without policy unless a policy blocked it; original-
	// direction packets (new and established) are evaluated by the policy
	// tables, so a connection policy stops allowing is cut at its next packet.
	blocked := &openflow.Masked{Value: CtMarkBlocked, Mask: CtMarkBlocked}
	add(ConntrackState, PriorityHigh, openflow.Match{CtState: ctState(ctInv|ctTrk, ctInv|ctTrk)})
	add(ConntrackState, PriorityNormal+10, openflow.Match{CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk), CtMark: blocked})
	add(ConntrackState, PriorityNormal+10, openflow.Match{CtState: ctState(ctRel|ctTrk, ctRel|ctTrk), CtMark: blocked})
	add(ConntrackState, PriorityNormal, openflow.Match{CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk)}, LoadBypass(), goTo(Forwarding))
	add(ConntrackState, PriorityNormal, openflow.Match{CtState: ctState(ctRel|ctTrk, ctRel|ctTrk)}, LoadBypass(), goTo(Forwarding))
	add(ConntrackState, PriorityLow, openflow.Match{CtState: ctState(ctTrk, ctTrk)}, goTo(EgressAdmin))
	add(ConntrackState, PriorityDefault, openflow.Match{})

	// Egress tables: traffic from the uplink was policed at its source
	// node; traffic from the gateway is the host's or was routed from
	// another node, where its source pod's egress policy ran.
	add(EgressAdmin, PriorityBypass, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchSrc(SrcUplink)}}, goTo(Forwarding))
	if gw.Port != 0 {
		add(EgressAdmin, PriorityBypass, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchSrc(SrcGateway)}}, goTo(Forwarding))
	}
	add(EgressAdmin, PriorityDefault, openflow.Match{}, goTo(EgressNetworkPolicy))
	add(EgressNetworkPolicy, PriorityDefault, openflow.Match{}, goTo(EgressIsolation))
	add(EgressIsolation, PriorityDefault, openflow.Match{}, goTo(EgressBaseline))
	add(EgressBaseline, PriorityDefault, openflow.Match{}, goTo(EgressMetric))
	add(EgressMetric, PriorityDefault, openflow.Match{}, goTo(Forwarding))

	// Forwarding: local pods by destination address (ARP by target address,
	// neighbour solicitations by ND target), everything else from a local pod
	// to the uplink; packets from the uplink for no local pod drop (no
	// hairpin back to the fabric).
	for _, p := range pods {
		to := []openflow.Action{openflow.LoadReg{Reg: RegOutPort, Start: 0, End: 31, Value: p.OFPort}, LoadDst(DstLocalPod), goTo(IngressAdmin)}
		for _, ip := range p.IPs {
			if ip.Is4() {
				add(Forwarding, PriorityNormal, openflow.Match{EthType: ethARP, ArpTpa: ip}, to...)
				add(Forwarding, PriorityNormal, openflow.Match{EthType: ethIPv4, IPDst: netip.PrefixFrom(ip, 32)}, to...)
			} else {
				add(Forwarding, PriorityHigh, openflow.Match{EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(icmp6NS), ICMPCode: u8(0), NDTarget: netip.PrefixFrom(ip, 128)}, to...)
				add(Forwarding, PriorityNormal, openflow.Match{EthType: ethIPv6, IPDst: netip.PrefixFrom(ip, 128)}, to...)
			}
		}
	}
	if cfg.UplinkPort != 0 {
		add(Forwarding, PriorityLow, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchSrc(SrcLocalPod)}},
			openflow.LoadReg{Reg: RegOutPort, Start: 0, End: 31, Value: cfg.UplinkPort}, LoadDst(DstUplink), goTo(IngressAdmin))
	}
	// Routed mode: everything from a local pod that is not for a local pod
	// (the gateway's own address and its ARP/ND, other nodes' pods,
	// services, the host, outside) goes to the host through the gateway.
	// The pods' default route points at the gateway address, so such
	// packets already carry the gateway's MAC, and the host resolves the
	// pods' MACs itself (ARP/ND through the gateway): no MAC rewriting.
	// Packets from the gateway for no local pod drop (no hairpin).
	if gw.Port != 0 {
		add(Forwarding, PriorityLow, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchSrc(SrcLocalPod)}},
			openflow.LoadReg{Reg: RegOutPort, Start: 0, End: 31, Value: gw.Port}, LoadDst(DstGateway), goTo(IngressAdmin))
		// A local pod's reply on a connection that came in through the
		// gateway goes back through it (to the gateway's MAC), even to a
		// local pod: the host may have DNATed the connection (a Service
		// backed by a pod of this node) and must undo it on the reply.
		fromGW := &openflow.Masked{Value: CtMarkFromGateway, Mask: CtMarkFromGateway}
		add(Forwarding, PriorityHigh+10, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchSrc(SrcLocalPod)},
			CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk), CtMark: fromGW},
			openflow.SetEthDst{MAC: gw.MAC}, openflow.LoadReg{Reg: RegOutPort, Start: 0, End: 31, Value: gw.Port}, LoadDst(DstGateway), goTo(IngressAdmin))
	}
	add(Forwarding, PriorityDefault, openflow.Match{})

	// Ingress tables: bypassed packets go straight out; packets leaving for
	// the uplink are policed on their destination node.
	add(IngressAdmin, PriorityBypass, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchBypass()}}, goTo(Output))
	add(IngressAdmin, PriorityBypass-1, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchDst(DstUplink)}}, goTo(ConntrackCommit))
	if gw.Port != 0 {
		// Leaving through the gateway: a pod destination is policed by its
		// own node's ingress tables.
		add(IngressAdmin, PriorityBypass-1, openflow.Match{Regs: map[int]openflow.Masked{RegFlags: MatchDst(DstGateway)}}, goTo(ConntrackCommit))
		// The node's own traffic (source: a gateway address, as the host
		// picks for anything it sends to the pods, kubelet probes
		// included) skips ingress policy, as Kubernetes expects: a pod
		// cannot block its own node. It is still committed, so the pod's
		// replies are tracked.
		fromGW := map[int]openflow.Masked{RegFlags: MatchSrc(SrcGateway)}
		for _, ip := range sortedAddrs(gw.IPs) {
			et, bits := uint16(ethIPv4), 32
			if ip.Is6() {
				et, bits = ethIPv6, 128
			}
			add(IngressAdmin, PriorityBypass-2, openflow.Match{Regs: fromGW, EthType: et, IPSrc: netip.PrefixFrom(ip, bits)}, goTo(ConntrackCommit))
		}
	}
	add(IngressAdmin, PriorityDefault, openflow.Match{}, goTo(IngressNetworkPolicy))
	add(IngressNetworkPolicy, PriorityDefault, openflow.Match{}, goTo(IngressIsolation))
	add(IngressIsolation, PriorityDefault, openflow.Match{}, goTo(IngressBaseline))
	add(IngressBaseline, PriorityDefault, openflow.Match{}, goTo(IngressMetric))
	add(IngressMetric, PriorityDefault, openflow.Match{}, goTo(ConntrackCommit))

	// ConntrackCommit: a denied packet of an established connection marks
	// the connection blocked (so its replies drop too) and drops; other
	// denied packets drop; an allowed new connection is committed with the
	// deciding rules in ct_label; an allowed packet of a blocked connection
	// unblocks it (the policy allows it again).
	deny := map[int]openflow.Masked{RegFlags: MatchDeny()}
	labels := []openflow.RegToLabel{{Reg: RegEgressRule, LabelStart: CtLabelEgressShift}, {Reg: RegIngrRule, LabelStart: CtLabelIngressShift}}
	// ct(commit) needs an IP match, so the commit flows exist per family.
	for _, et := range []uint16{ethIPv4, ethIPv6} {
		add(ConntrackCommit, PriorityHigh, openflow.Match{EthType: et, Regs: deny, CtState: ctState(ctEst|ctTrk, ctEst|ctTrk)},
			openflow.CT{Commit: true, Zone: cfg.CtZone, SetMark: &openflow.Masked{Value: CtMarkBlocked, Mask: CtMarkBlocked}})
		add(ConntrackCommit, PriorityNormal, openflow.Match{EthType: et, CtState: ctState(ctNew|ctTrk, ctNew|ctTrk)},
			openflow.CT{Commit: true, Zone: cfg.CtZone, SetMark: &openflow.Masked{Value: 0, Mask: CtMarkBlocked}, LabelFromRegs: labels}, goTo(Output))
		if gw.Port != 0 {
			// Connections entering through the gateway are marked, so
			// their replies return through it (see Forwarding).
			add(ConntrackCommit, PriorityNormal+5, openflow.Match{EthType: et, Regs: map[int]openflow.Masked{RegFlags: MatchSrc(SrcGateway)}, CtState: ctState(ctNew|ctTrk, ctNew|ctTrk)},
				openflow.CT{Commit: true, Zone: cfg.CtZone, SetMark: &openflow.Masked{Value: CtMarkFromGateway, Mask: CtMarkBlocked | CtMarkFromGateway}, LabelFromRegs: labels}, goTo(Output))
		}
		add(ConntrackCommit, PriorityNormal, openflow.Match{EthType: et, CtState: ctState(ctEst|ctTrk, ctEst|ctTrk), CtMark: blocked},
			openflow.CT{Commit: true, Zone: cfg.CtZone, SetMark: &openflow.Masked{Value: 0, Mask: CtMarkBlocked}, LabelFromRegs: labels}, goTo(Output))
	}
	add(ConntrackCommit, PriorityHigh-10, openflow.Match{Regs: deny})
	add(ConntrackCommit, PriorityDefault, openflow.Match{}, goTo(Output))

	// Output: to the port Forwarding chose.
	outs := []uint32{}
	for _, p := range pods {
		outs = append(outs, p.OFPort)
	}
	if cfg.UplinkPort != 0 {
		outs = append(outs, cfg.UplinkPort)
	}
	if gw.Port != 0 {
		outs = append(outs, gw.Port)
	}
	for _, port := range outs {
		add(Output, PriorityNormal, openflow.Match{Regs: map[int]openflow.Masked{RegOutPort: {Value: port, Mask: 0xffffffff}}}, openflow.Output{Port: port})
	}
	add(Output, PriorityDefault, openflow.Match{})
	return fs
}

// sortedAddrs returns a sorted copy, so the flows come out in one order.
func sortedAddrs(ips []netip.Addr) []netip.Addr {
	out := append([]netip.Addr(nil), ips...)
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
