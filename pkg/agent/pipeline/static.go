package pipeline

import (
	"net"
	"net/netip"
	"sort"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

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
	ctNew  = 0x01
	ctEst  = 0x02
	ctRel  = 0x04
	ctRpl  = 0x08
	ctInv  = 0x10
	ctTrk  = 0x20
	ctDNAT = 0x80
)

func ctState(value, mask uint32) *openflow.Masked { return &openflow.Masked{Value: value, Mask: mask} }

func goTo(t Table) openflow.Action { return openflow.GotoTable{Table: t.ID()} }

// regs matches reg0's flags.
func flags(m openflow.Masked) map[int]openflow.Masked { return map[int]openflow.Masked{RegFlags: m} }

// toPort chooses port as the packet's output port.
func toPort(port uint32) openflow.LoadReg {
	return openflow.LoadReg{Reg: RegOutPort, Start: 0, End: 31, Value: port}
}

var zeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// linkLocal is where IPv6 neighbour discovery legitimately comes from besides
// a pod's own addresses.
var linkLocal = netip.MustParsePrefix("fe80::/10")

// staticFlows collects the static flows; every one carries the pipeline
// cookie.
type staticFlows struct {
	cookie uint64
	zone   uint16
	out    []openflow.Flow
}

func (s *staticFlows) add(t Table, prio uint16, m openflow.Match, acts ...openflow.Action) {
	s.out = append(s.out, openflow.Flow{Table: t.ID(), Priority: prio, Cookie: s.cookie, Match: m, Actions: acts})
}

// StaticFlows returns the pipeline's flows that do not depend on policy:
// each table's miss flow (as declared in tables.go), port classification,
// spoof guard, conntrack, forwarding, commit and output, for the local
// pods and for the node's uplink (uplink mode) or gateway (routed mode).
// With synced false no port is classified, so nothing passes: the state
// before the first full policy sync.
func StaticFlows(cfg Config, pods []LocalPod, synced bool, round uint8) []openflow.Flow {
	s := &staticFlows{cookie: Cookie(round, RolePipeline, 0), zone: cfg.CtZone}
	pods = append([]LocalPod(nil), pods...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].OFPort < pods[j].OFPort })

	// Sentinel: a no-op flow whose absence means the flows were wiped.
	s.out = append(s.out, openflow.Flow{Table: Classifier.ID(), Priority: 1, Cookie: Cookie(round, RoleSentinel, 0),
		Match: openflow.Match{InPort: 0xfffffff0}})
	for _, t := range Tables() {
		s.miss(t)
	}
	for _, p := range pods {
		s.pod(p, synced)
	}
	s.conntrack(cfg.CtZone)
	s.services()
	s.policyBypass()
	s.commit(cfg.CtZone)
	if cfg.UplinkPort != 0 {
		s.uplink(cfg.UplinkPort, synced)
	}
	if cfg.Gateway.Port != 0 {
		s.gateway(cfg.Gateway, cfg.CtZone, synced)
		s.gatewaySources(cfg.Gateway, pods)
	}
	if cfg.Tunnel.Port != 0 {
		s.tunnel(cfg.Tunnel, cfg.Gateway, pods, synced)
	}
	return s.out
}

// miss adds t's miss flow (priority 0, matching everything): on to the
// next table, or drop (no actions), as the table is declared.
func (s *staticFlows) miss(t Table) {
	if t.missGoesOn() {
		s.add(t, PriorityDefault, openflow.Match{}, goTo(t+1))
	} else {
		s.add(t, PriorityDefault, openflow.Match{})
	}
}

// pod adds a local pod's flows: its port is classified (once synced), its
// source addresses, MAC and neighbour discovery guarded, and packets for
// its addresses forwarded and output to its port.
func (s *staticFlows) pod(p LocalPod, synced bool) {
	if synced {
		s.add(Classifier, PriorityNormal, openflow.Match{InPort: p.OFPort}, LoadSrc(SrcLocalPod), goTo(SpoofGuard))
	}

	// SpoofGuard: the pod may send only from its own addresses and MAC.
	var has6 bool
	for _, ip := range p.IPs {
		if ip.Is4() {
			s.add(SpoofGuard, PriorityNormal, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethARP, ArpSpa: ip, ArpSha: p.MAC}, LoadBypass(), goTo(Forwarding))
			s.add(SpoofGuard, PriorityNormal, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv4, IPSrc: netip.PrefixFrom(ip, 32)}, goTo(Conntrack))
			continue
		}
		has6 = true
		s.add(SpoofGuard, PriorityNormal, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv6, IPSrc: netip.PrefixFrom(ip, 128)}, goTo(Conntrack))
	}
	if has6 {
		s.neighbourDiscovery(p)
	}

	// Forwarding: by destination address (ARP by target address,
	// neighbour solicitations by ND target). IP packets get the pod's MAC
	// as destination: one a Service load-balanced was sent to another
	// address (the Service's, a node's, the gateway's).
	to := []openflow.Action{toPort(p.OFPort), LoadDst(DstLocalPod), goTo(IngressAdmin)}
	toIP := append([]openflow.Action{openflow.SetEthDst{MAC: p.MAC}}, to...)
	for _, ip := range p.IPs {
		if ip.Is4() {
			s.add(Forwarding, PriorityNormal, openflow.Match{EthType: ethARP, ArpTpa: ip}, to...)
			s.add(Forwarding, PriorityNormal, openflow.Match{EthType: ethIPv4, IPDst: netip.PrefixFrom(ip, 32)}, toIP...)
		} else {
			s.add(Forwarding, PriorityHigh, openflow.Match{EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(icmp6NS), ICMPCode: u8(0), NDTarget: netip.PrefixFrom(ip, 128)}, to...)
			s.add(Forwarding, PriorityNormal, openflow.Match{EthType: ethIPv6, IPDst: netip.PrefixFrom(ip, 128)}, toIP...)
		}
	}
	s.hairpin(p)
	s.output(p.OFPort)
	// A pod's connection to itself through a Service leaves by the port
	// it came in on, which OpenFlow outputs to only as IN_PORT.
	s.add(Output, PriorityHigh, openflow.Match{InPort: p.OFPort, Regs: map[int]openflow.Masked{RegOutPort: {Value: p.OFPort, Mask: 0xffffffff}}},
		openflow.Output{Port: openflow.PortInPort})
}

// neighbourDiscovery guards an IPv6 pod's ND: a solicitation may come from
// the pod's own addresses, its link-local address or :: (duplicate address
// detection) and may only advertise the pod's MAC; an advertisement may
// only claim the pod's own addresses (or link-local ones).
func (s *staticFlows) neighbourDiscovery(p LocalPod) {
	srcs := []netip.Prefix{linkLocal, netip.MustParsePrefix("::/128")}
	targets := []netip.Prefix{linkLocal}
	for _, ip := range p.IPs {
		if ip.Is6() {
			srcs = append(srcs, netip.PrefixFrom(ip, 128))
			targets = append(targets, netip.PrefixFrom(ip, 128))
		}
	}
	for _, mac := range []net.HardwareAddr{p.MAC, zeroMAC} {
		for _, src := range srcs {
			s.add(SpoofGuard, PriorityHigh, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv6, IPSrc: src, IPProto: protoICMPv6, ICMPType: u8(icmp6NS), ICMPCode: u8(0), NDSll: mac}, LoadBypass(), goTo(Forwarding))
		}
		for _, tg := range targets {
			s.add(SpoofGuard, PriorityHigh, openflow.Match{InPort: p.OFPort, EthSrc: p.MAC, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(icmp6NA), ICMPCode: u8(0), NDTarget: tg, NDTll: mac}, LoadBypass(), goTo(Forwarding))
		}
	}
	// Any other ND message from the pod (a spoofed target, address or
	// link-layer option) drops, above the pod's generic IPv6 flow.
	for _, t := range []uint8{icmp6NS, icmp6NA} {
		s.add(SpoofGuard, PriorityHigh-10, openflow.Match{InPort: p.OFPort, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(t)})
	}
}

// output sends packets Forwarding chose port for to port.
func (s *staticFlows) output(port uint32) {
	s.add(Output, PriorityNormal, openflow.Match{Regs: map[int]openflow.Masked{RegOutPort: {Value: port, Mask: 0xffffffff}}}, openflow.Output{Port: port})
}

// trusted lets a port's traffic through SpoofGuard unchecked: traffic
// through the uplink was guarded at its source node. ARP and ND bypass
// policy.
func (s *staticFlows) trusted(kind uint32) {
	up := flags(MatchSrc(kind))
	s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: up, EthType: ethARP}, LoadBypass(), goTo(Forwarding))
	for _, t := range []uint8{icmp6NS, icmp6NA} {
		s.add(SpoofGuard, PriorityHigh, openflow.Match{Regs: up, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(t)}, LoadBypass(), goTo(Forwarding))
	}
	s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: up, EthType: ethIPv4}, goTo(Conntrack))
	s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: up, EthType: ethIPv6}, goTo(Conntrack))
}

// conntrack adds Conntrack and ConntrackState: IP packets are tracked in
// zone, with the translation their connection has (a Service's
// destination NAT, un-done on replies); invalid ones drop; replies and
// related packets of a connection pass without policy unless a policy
// blocked it; new connections from local pods go through the Service
// tables; original-direction packets (new and established) are evaluated
// by the policy tables, so a connection policy stops allowing is cut at
// its next packet.
//
// A reply to a hairpin address is first un-SNATed in the hairpin zone
// (and tracked again from Conntrack, now as the reply of its connection
// in zone): see HairpinSNAT.
func (s *staticFlows) conntrack(zone uint16) {
	ctTable, again := ConntrackState.ID(), Conntrack.ID()
	for _, et := range []uint16{ethIPv4, ethIPv6} {
		s.add(Conntrack, PriorityNormal, openflow.Match{EthType: et}, openflow.CT{Zone: zone, Table: &ctTable, NAT: &openflow.NAT{}})
	}
	for _, hp := range []netip.Addr{HairpinIPv4, HairpinIPv6} {
		et, bits := uint16(ethIPv4), 32
		if hp.Is6() {
			et, bits = ethIPv6, 128
		}
		s.add(Conntrack, PriorityHigh, openflow.Match{EthType: et, IPDst: netip.PrefixFrom(hp, bits), CtState: ctState(0, ctTrk)},
			openflow.CT{Zone: HairpinZone(zone), Table: &again, NAT: &openflow.NAT{}})
	}
	blocked := &openflow.Masked{Value: CtMarkBlocked, Mask: CtMarkBlocked}
	s.add(ConntrackState, PriorityHigh, openflow.Match{CtState: ctState(ctInv|ctTrk, ctInv|ctTrk)})
	s.add(ConntrackState, PriorityNormal+10, openflow.Match{CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk), CtMark: blocked})
	s.add(ConntrackState, PriorityNormal+10, openflow.Match{CtState: ctState(ctRel|ctTrk, ctRel|ctTrk), CtMark: blocked})
	s.add(ConntrackState, PriorityNormal, openflow.Match{CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk)}, LoadBypass(), goTo(Forwarding))
	s.add(ConntrackState, PriorityNormal, openflow.Match{CtState: ctState(ctRel|ctTrk, ctRel|ctTrk)}, LoadBypass(), goTo(Forwarding))
	// A local pod's new connection: mark node addresses, look up a
	// learned affinity, then balance (ServiceLB goes on to the policy
	// tables).
	s.add(ConntrackState, PriorityLow+10, openflow.Match{Regs: flags(MatchSrc(SrcLocalPod)), CtState: ctState(ctNew|ctTrk, ctNew|ctTrk|ctDNAT)},
		openflow.Resubmit{Table: ServiceNodePort.ID()}, openflow.Resubmit{Table: ServiceAffinity.ID()}, openflow.Resubmit{Table: ServiceLB.ID()})
	s.add(ConntrackState, PriorityLow, openflow.Match{CtState: ctState(ctTrk, ctTrk)}, goTo(EgressAdmin))
}

// services adds the Service tables' static flows (the rest is package
// proxy's): an endpoint chosen by a group or an affinity flow goes to
// ServiceDNAT; ARP and neighbour solicitations for the hairpin addresses
// are answered; the second step of every neighbour advertisement the
// bridge answers with.
func (s *staticFlows) services() {
	s.add(ServiceLB, PriorityHigh, openflow.Match{Regs: map[int]openflow.Masked{RegService: MatchService(ServiceChosen)}}, goTo(ServiceDNAT))
	s.add(ServiceLB, PriorityHigh, openflow.Match{Regs: map[int]openflow.Masked{RegService: MatchService(ServiceAffine)}}, goTo(ServiceDNAT))
	for _, hp := range []netip.Addr{HairpinIPv4, HairpinIPv6} {
		s.out = append(s.out, Responder(hp, s.cookie)...)
	}
	s.add(Forwarding, PriorityResponder, openflow.Match{EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(icmp6NA), ICMPCode: u8(0),
		Regs: map[int]openflow.Masked{RegService: MatchService(ServiceNDReply)}},
		openflow.SetField{Field: openflow.FieldNDTll, MAC: ServiceMAC}, openflow.Output{Port: openflow.PortInPort})
}

// PriorityResponder is the priority of the ARP and neighbour responders
// in Forwarding, above every pod's flows.
const PriorityResponder = PriorityHigh + 20

// Responder returns the Forwarding flows that answer a local pod's ARP
// request (IPv4) or neighbour solicitation (IPv6) for ip with ServiceMAC,
// out of the port it came in on: in uplink mode pods resolve every
// address on-link, Services' and hairpin addresses included. A
// solicitation without a source link-layer address (duplicate address
// detection, or a sender that left it out) is not answered.
func Responder(ip netip.Addr, cookie uint64) []openflow.Flow {
	local := flags(MatchSrc(SrcLocalPod))
	flow := func(prio uint16, m openflow.Match, acts ...openflow.Action) openflow.Flow {
		return openflow.Flow{Table: Forwarding.ID(), Priority: prio, Cookie: cookie, Match: m, Actions: acts}
	}
	if ip.Is4() {
		return []openflow.Flow{flow(PriorityResponder, openflow.Match{Regs: local, EthType: ethARP, ArpOp: 1, ArpTpa: ip},
			openflow.Move{Src: openflow.FieldEthSrc, Dst: openflow.FieldEthDst},
			openflow.SetField{Field: openflow.FieldEthSrc, MAC: ServiceMAC},
			openflow.SetField{Field: openflow.FieldArpOp, Value: 2},
			openflow.Move{Src: openflow.FieldArpSha, Dst: openflow.FieldArpTha},
			openflow.SetField{Field: openflow.FieldArpSha, MAC: ServiceMAC},
			openflow.Move{Src: openflow.FieldArpSpa, Dst: openflow.FieldArpTpa},
			openflow.SetField{Field: openflow.FieldArpSpa, Addr: ip},
			openflow.Output{Port: openflow.PortInPort})}
	}
	ns := openflow.Match{Regs: local, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(icmp6NS), ICMPCode: u8(0), NDTarget: netip.PrefixFrom(ip, 128)}
	noSLL := ns
	noSLL.NDSll = zeroMAC
	return []openflow.Flow{
		flow(PriorityResponder+1, noSLL),
		// The advertisement: solicited and override flags, the target
		// link-layer address option in place of the source's; OVS sets
		// nd_tll only in a packet that is an advertisement already, so a
		// second step (static) does.
		flow(PriorityResponder, ns,
			openflow.Move{Src: openflow.FieldEthSrc, Dst: openflow.FieldEthDst},
			openflow.SetField{Field: openflow.FieldEthSrc, MAC: ServiceMAC},
			openflow.Move{Src: openflow.FieldIPv6Src, Dst: openflow.FieldIPv6Dst},
			openflow.SetField{Field: openflow.FieldIPv6Src, Addr: ip},
			openflow.SetField{Field: openflow.FieldICMPv6Type, Value: icmp6NA},
			openflow.SetField{Field: openflow.FieldNDReserved, Value: ndSolicitedOverride},
			openflow.SetField{Field: openflow.FieldNDOptionsType, Value: ndOptTargetLL},
			LoadService(ServiceNDReply),
			openflow.Resubmit{Table: Forwarding.ID()}),
	}
}

// Neighbour advertisement flags (solicited, override) and the target
// link-layer address option type (RFC 4861).
const (
	ndSolicitedOverride = 0x60000000
	ndOptTargetLL       = 2
)

// hairpin adds the source NAT of a pod's connection to itself through a
// Service: after destination NAT its source and destination are the pod's
// address, which the pod's kernel would drop as a martian. The source
// becomes the hairpin address, in the hairpin zone; the pod answers that
// address (answered by the responder in uplink mode, routed to the
// gateway otherwise), and Conntrack undoes both translations.
func (s *staticFlows) hairpin(p LocalPod) {
	out := Output.ID()
	for _, ip := range p.IPs {
		et, bits, hp := uint16(ethIPv4), 32, HairpinIPv4
		if ip.Is6() {
			et, bits, hp = ethIPv6, 128, HairpinIPv6
		}
		host := netip.PrefixFrom(ip, bits)
		s.add(HairpinSNAT, PriorityNormal, openflow.Match{EthType: et, IPSrc: host, IPDst: host},
			openflow.CT{Commit: true, Zone: HairpinZone(s.zone), Table: &out, NAT: &openflow.NAT{Src: true, Addr: hp}})
	}
}

// policyBypass adds the policy tables' bypasses every mode has: traffic
// from the uplink skips egress policy (it was policed at its source node),
// bypassed packets go straight to Output, and packets leaving for the
// uplink skip ingress policy (policed on their destination node). Without
// an uplink no packet carries those marks.
func (s *staticFlows) policyBypass() {
	s.add(EgressAdmin, PriorityBypass, openflow.Match{Regs: flags(MatchSrc(SrcUplink))}, goTo(Forwarding))
	s.add(IngressAdmin, PriorityBypass, openflow.Match{Regs: flags(MatchBypass())}, goTo(Output))
	s.add(IngressAdmin, PriorityBypass-1, openflow.Match{Regs: flags(MatchDst(DstUplink))}, goTo(ConntrackCommit))
}

// commit adds ConntrackCommit: a denied packet of an established
// connection marks the connection blocked (so its replies drop too) and
// drops; other denied packets drop; an allowed new connection is committed
// with the deciding rules in ct_label; an allowed packet of a blocked
// connection unblocks it (the policy allows it again).
func (s *staticFlows) commit(zone uint16) {
	deny := flags(MatchDeny())
	blocked := &openflow.Masked{Value: CtMarkBlocked, Mask: CtMarkBlocked}
	// ct(commit) needs an IP match, so the commit flows exist per family.
	for _, et := range []uint16{ethIPv4, ethIPv6} {
		s.add(ConntrackCommit, PriorityHigh, openflow.Match{EthType: et, Regs: deny, CtState: ctState(ctEst|ctTrk, ctEst|ctTrk)},
			openflow.CT{Commit: true, Zone: zone, SetMark: &openflow.Masked{Value: CtMarkBlocked, Mask: CtMarkBlocked}})
		s.add(ConntrackCommit, PriorityNormal, openflow.Match{EthType: et, CtState: ctState(ctNew|ctTrk, ctNew|ctTrk)},
			openflow.CT{Commit: true, Zone: zone, SetMark: &openflow.Masked{Value: 0, Mask: CtMarkBlocked}, LabelFromRegs: ruleLabels}, goTo(HairpinSNAT))
		s.add(ConntrackCommit, PriorityNormal, openflow.Match{EthType: et, CtState: ctState(ctEst|ctTrk, ctEst|ctTrk), CtMark: blocked},
			openflow.CT{Commit: true, Zone: zone, SetMark: &openflow.Masked{Value: 0, Mask: CtMarkBlocked}, LabelFromRegs: ruleLabels}, goTo(HairpinSNAT))
	}
	s.add(ConntrackCommit, PriorityHigh-10, openflow.Match{Regs: deny})
}

// ruleLabels copies the rules that allowed a packet into the connection's
// ct_label at commit.
var ruleLabels = []openflow.RegToLabel{{Reg: RegEgressRule, LabelStart: CtLabelEgressShift}, {Reg: RegIngrRule, LabelStart: CtLabelIngressShift}}

// uplink adds uplink mode's flows: the uplink joins the nodes' bridges in
// one L2 network. Its port is classified (once synced) and trusted, and a
// local pod's packets for anything that is no local pod go out of it;
// packets from it for no local pod drop (no hairpin back to the fabric).
func (s *staticFlows) uplink(port uint32, synced bool) {
	if synced {
		s.add(Classifier, PriorityNormal, openflow.Match{InPort: port}, LoadSrc(SrcUplink), goTo(SpoofGuard))
	}
	s.trusted(SrcUplink)
	s.add(Forwarding, PriorityLow, openflow.Match{Regs: flags(MatchSrc(SrcLocalPod))}, toPort(port), LoadDst(DstUplink), goTo(IngressAdmin))
	// A connection a Service sent to another node's pod: the pod sent it
	// to the Service's address (ServiceMAC) or to a node's, and its
	// endpoint's MAC is not known here. ServiceMAC, which no port has,
	// makes the fabric flood it; the endpoint's node delivers it (with
	// the pod's MAC) and the others drop it.
	s.add(Forwarding, PriorityLow+1, openflow.Match{Regs: flags(MatchSrc(SrcLocalPod)), CtState: ctState(ctDNAT|ctTrk, ctDNAT|ctTrk|ctRpl)},
		openflow.SetEthDst{MAC: ServiceMAC}, toPort(port), LoadDst(DstUplink), goTo(IngressAdmin))
	s.output(port)
}

// gateway adds routed mode's flows (see DESIGN.md, "Routed mode"). The
// gateway is classified (once synced) and trusted, and its traffic skips
// egress policy (it is the host's, or was routed from another node, where
// its source pod's egress policy ran).
func (s *staticFlows) gateway(gw Gateway, zone uint16, synced bool) {
	if synced {
		s.add(Classifier, PriorityNormal, openflow.Match{InPort: gw.Port}, LoadSrc(SrcGateway), goTo(SpoofGuard))
	}
	s.add(EgressAdmin, PriorityBypass, openflow.Match{Regs: flags(MatchSrc(SrcGateway))}, goTo(Forwarding))

	// Everything from a local pod that is not for a local pod (the
	// gateway's own address and its ARP/ND, other nodes' pods, services,
	// the host, outside) goes to the host through the gateway. The pods'
	// default route points at the gateway address, so such packets already
	// carry the gateway's MAC, and the host resolves the pods' MACs itself
	// (ARP/ND through the gateway): no MAC rewriting. Packets from the
	// gateway for no local pod drop (no hairpin).
	s.add(Forwarding, PriorityLow, openflow.Match{Regs: flags(MatchSrc(SrcLocalPod))}, toPort(gw.Port), LoadDst(DstGateway), goTo(IngressAdmin))
	// A local pod's reply on a connection that came in through the
	// gateway goes back through it (to the gateway's MAC), even to a local
	// pod: the host may have DNATed the connection (a Service backed by a
	// pod of this node) and must undo it on the reply.
	fromGW := &openflow.Masked{Value: CtMarkFromGateway, Mask: CtMarkFromGateway}
	s.add(Forwarding, PriorityHigh+10, openflow.Match{Regs: flags(MatchSrc(SrcLocalPod)), CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk), CtMark: fromGW},
		openflow.SetEthDst{MAC: gw.MAC}, toPort(gw.Port), LoadDst(DstGateway), goTo(IngressAdmin))

	// Leaving through the gateway: a pod destination is policed by its own
	// node's ingress tables.
	s.add(IngressAdmin, PriorityBypass-1, openflow.Match{Regs: flags(MatchDst(DstGateway))}, goTo(ConntrackCommit))
	// The node's own traffic (source: a gateway address, as the host picks
	// for anything it sends to the pods, kubelet probes included) skips
	// ingress policy, as Kubernetes expects: a pod cannot block its own
	// node. It is still committed, so the pod's replies are tracked.
	for _, ip := range sortedAddrs(gw.IPs) {
		s.add(IngressAdmin, PriorityBypass-2, openflow.Match{Regs: flags(MatchSrc(SrcGateway)), EthType: ethType(ip), IPSrc: hostPrefix(ip)}, goTo(ConntrackCommit))
	}

	// Connections entering through the gateway are marked, so their
	// replies return through it (see Forwarding).
	for _, et := range []uint16{ethIPv4, ethIPv6} {
		s.add(ConntrackCommit, PriorityNormal+5, openflow.Match{EthType: et, Regs: flags(MatchSrc(SrcGateway)), CtState: ctState(ctNew|ctTrk, ctNew|ctTrk)},
			openflow.CT{Commit: true, Zone: zone, SetMark: &openflow.Masked{Value: CtMarkFromGateway, Mask: CtMarkBlocked | CtMarkFromGateway}, LabelFromRegs: ruleLabels}, goTo(HairpinSNAT))
	}
	s.output(gw.Port)
}

// tunnel adds encap mode's flows (see DESIGN.md, "Encap mode"), on top of
// routed mode's: the tunnel port is classified (once synced); a packet
// from it is accepted only from a known peer's endpoint (tun_src) with an
// inner source in that peer's pod CIDRs, skips egress policy (it ran on the
// source node) and goes to a local pod, with the MACs the gateway would
// have given it had it routed the packet, or to the gateway; local pods'
// and the gateway's packets for a peer's pod CIDR go into the tunnel to
// that peer. Nothing from the tunnel goes back into it (no hairpin).
// setTunDst sets the outer destination address the flow-based tunnel port
// encapsulates the packet to: the peer node's endpoint.
func setTunDst(ip netip.Addr) openflow.SetField {
	if ip.Is4() {
		return openflow.SetField{Field: openflow.FieldTunDst, Addr: ip}
	}
	return openflow.SetField{Field: openflow.FieldTunIPv6Dst, Addr: ip}
}

func (s *staticFlows) tunnel(t Tunnel, gw Gateway, pods []LocalPod, synced bool) {
	if synced {
		s.add(Classifier, PriorityNormal, openflow.Match{InPort: t.Port}, LoadSrc(SrcTunnel), goTo(SpoofGuard))
	}
	fromTunnel := flags(MatchSrc(SrcTunnel))
	peers := append([]TunnelPeer(nil), t.Peers...)
	sort.Slice(peers, func(i, j int) bool { return peers[i].IP.Less(peers[j].IP) })
	for _, p := range peers {
		for _, c := range p.PodCIDRs {
			et := ethType(c.Addr())
			// SpoofGuard: the peer vouches for its own pod CIDRs only.
			s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: fromTunnel, TunSrc: p.IP, EthType: et, IPSrc: c}, goTo(Conntrack))
			// Forwarding: the peer's pods, from local pods and from the
			// host (its own traffic, and what it routes there: a
			// Service's DNAT to a pod of that node).
			for _, src := range []uint32{SrcLocalPod, SrcGateway} {
				s.add(Forwarding, PriorityNormal-10, openflow.Match{Regs: flags(MatchSrc(src)), EthType: et, IPDst: c},
					setTunDst(p.IP), toPort(t.Port), LoadDst(DstTunnel), goTo(IngressAdmin))
			}
		}
		// The peer's host, by its InternalIPs: what it forwards with them
		// as source (kube-proxy's masqueraded connections) is accepted,
		// and local pods' replies go back through the tunnel, where the
		// peer's conntrack undoes its NAT. A local pod's own connection
		// to the peer's host goes out through the gateway (routed by the
		// underlay).
		for _, ip := range sortedAddrs(p.HostIPs) {
			et := ethType(ip)
			s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: fromTunnel, TunSrc: p.IP, EthType: et, IPSrc: hostPrefix(ip)}, goTo(Conntrack))
			s.add(Forwarding, PriorityNormal-10, openflow.Match{Regs: flags(MatchSrc(SrcLocalPod)), CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk), EthType: et, IPDst: hostPrefix(ip)},
				setTunDst(p.IP), toPort(t.Port), LoadDst(DstTunnel), goTo(IngressAdmin))
		}
	}
	// From the tunnel to a local pod: the packet carries the sending
	// node's MACs; the pod gets it as from its gateway.
	for _, p := range pods {
		for _, ip := range p.IPs {
			s.add(Forwarding, PriorityNormal+10, openflow.Match{Regs: fromTunnel, EthType: ethType(ip), IPDst: hostPrefix(ip)},
				openflow.SetField{Field: openflow.FieldEthSrc, MAC: gw.MAC}, openflow.SetEthDst{MAC: p.MAC}, toPort(p.OFPort), LoadDst(DstLocalPod), goTo(IngressAdmin))
		}
	}
	// From the tunnel to the host: replies to its own connections to
	// other nodes' pods (it sends them with a gateway address), and
	// replies of connections that entered through the gateway (the host
	// may have DNATed them to the peer's pod and must undo it).
	for _, ip := range sortedAddrs(gw.IPs) {
		s.add(Forwarding, PriorityNormal+10, openflow.Match{Regs: fromTunnel, EthType: ethType(ip), IPDst: hostPrefix(ip)},
			openflow.SetEthDst{MAC: gw.MAC}, toPort(gw.Port), LoadDst(DstGateway), goTo(IngressAdmin))
	}
	fromGW := &openflow.Masked{Value: CtMarkFromGateway, Mask: CtMarkFromGateway}
	s.add(Forwarding, PriorityHigh+10, openflow.Match{Regs: fromTunnel, CtState: ctState(ctRpl|ctTrk, ctRpl|ctTrk), CtMark: fromGW},
		openflow.SetEthDst{MAC: gw.MAC}, toPort(gw.Port), LoadDst(DstGateway), goTo(IngressAdmin))
	s.output(t.Port)
}

// gatewaySources adds SpoofGuard's flows for the gateway: which source
// addresses the host may send into the bridge (see DESIGN.md, "Host
// traffic"). Its ARP and neighbour discovery pass (bypass). An address of
// this node's pod CIDRs can only be the gateway's own (the node itself)
// or a local pod's (a connection of that pod the host translated and sent
// back, such as a Service DNAT to a pod of this node; the host drops such
// sources arriving on any other interface, see pkg/agent/nodenet); any
// other address of them is spoofed and drops. Every other source — other
// nodes' pods routed here, other nodes' hosts, clients outside the cluster
// — goes on to conntrack and policy, which see it as what it is.
func (s *staticFlows) gatewaySources(gw Gateway, pods []LocalPod) {
	from := flags(MatchSrc(SrcGateway))
	s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: from, EthType: ethARP}, LoadBypass(), goTo(Forwarding))
	for _, t := range []uint8{icmp6NS, icmp6NA} {
		s.add(SpoofGuard, PriorityHigh, openflow.Match{Regs: from, EthType: ethIPv6, IPProto: protoICMPv6, ICMPType: u8(t)}, LoadBypass(), goTo(Forwarding))
	}
	own := sortedAddrs(gw.IPs)
	for _, p := range pods {
		own = append(own, sortedAddrs(p.IPs)...)
	}
	for _, ip := range own {
		s.add(SpoofGuard, PriorityNormal+20, openflow.Match{Regs: from, EthType: ethType(ip), IPSrc: hostPrefix(ip)}, goTo(Conntrack))
	}
	for _, c := range gw.PodCIDRs {
		s.add(SpoofGuard, PriorityNormal+10, openflow.Match{Regs: from, EthType: ethType(c.Addr()), IPSrc: c.Masked()})
	}
	s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: from, EthType: ethIPv4}, goTo(Conntrack))
	s.add(SpoofGuard, PriorityNormal, openflow.Match{Regs: from, EthType: ethIPv6}, goTo(Conntrack))
}

// ethType is the Ethernet type of ip's family.
func ethType(ip netip.Addr) uint16 {
	if ip.Is4() {
		return ethIPv4
	}
	return ethIPv6
}

// hostPrefix is ip as a one-address prefix.
func hostPrefix(ip netip.Addr) netip.Prefix { return netip.PrefixFrom(ip, ip.BitLen()) }

// sortedAddrs returns a sorted copy, so the flows come out in one order.
func sortedAddrs(ips []netip.Addr) []netip.Addr {
	out := append([]netip.Addr(nil), ips...)
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
