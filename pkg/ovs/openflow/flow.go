package openflow

import (
	"net"
	"net/netip"
)

// Flow is one OpenFlow 1.3 flow entry with the Nicira extensions tierflow
// uses. It is the unit the agent's pipeline produces and the client installs;
// String renders it in ovs-ofctl syntax so the same flows can be compared
// with `ovs-ofctl dump-flows` and installed by `ovs-ofctl --bundle add-flows`.
//
// A zero field in Match means "not matched" (wildcard).
type Flow struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	Match    Match
	// Actions run in order. An empty list drops the packet.
	Actions []Action
}

// Masked is a value under a mask; a zero Mask means an exact match.
type Masked struct {
	Value uint32
	Mask  uint32
}

// Match holds the match fields. Pointers and zero values are wildcards.
type Match struct {
	InPort  uint32 // 0: any
	EthType uint16 // 0: any; 0x0800 IPv4, 0x86dd IPv6, 0x0806 ARP
	EthSrc  net.HardwareAddr
	EthDst  net.HardwareAddr
	// IPSrc and IPDst match nw_src/nw_dst or ipv6_src/ipv6_dst by family
	// (EthType must agree); an invalid Prefix is a wildcard.
	IPSrc   netip.Prefix
	IPDst   netip.Prefix
	IPProto uint8 // 0: any; 6 TCP, 17 UDP, 132 SCTP
	// L4Dst matches tcp_dst/udp_dst/sctp_dst (by IPProto) under a mask.
	L4Dst *Masked
	// ARP fields (EthType 0x0806).
	ArpSpa netip.Addr
	ArpSha net.HardwareAddr
	ArpTpa netip.Addr // arp_tpa; invalid: any
	ArpOp  uint16     // arp_op; 0: any (1 request, 2 reply)
	// ICMPType and ICMPCode match icmp_type/icmp_code, or icmpv6_type/icmpv6_code
	// when IPProto is 58; nil: any.
	ICMPType *uint8
	ICMPCode *uint8
	// IPv6 neighbor discovery (IPProto 58, ICMPType 135 or 136).
	NDTarget netip.Prefix     // nd_target (masked by prefix length); invalid: any
	NDSll    net.HardwareAddr // nd_sll; nil: any (all zeros matches "option absent")
	NDTll    net.HardwareAddr // nd_tll; nil: any (all zeros matches "option absent")
	// Conntrack.
	CtState *Masked // bits as in ovs-fields(7): new=0x01 est=0x02 rel=0x04 rpl=0x08 inv=0x10 trk=0x20
	CtMark  *Masked
	CtZone  *uint16
	// TunSrc matches the tunnel's outer source address of a packet that
	// arrived through a tunnel port (tun_src, or tun_ipv6_src for an IPv6
	// address); invalid: any.
	TunSrc netip.Addr
	// Regs matches NXM registers reg0..reg15.
	Regs map[int]Masked
	// ConjID matches conj_id (the packet matched every clause of that conjunction).
	ConjID *uint32
}

// Action is one flow action. Implementations are the types below.
type Action interface{ isAction() }

// Output sends the packet out of a port.
type Output struct{ Port uint32 }

// GotoTable continues the pipeline at a later table.
type GotoTable struct{ Table uint8 }

// Resubmit re-runs the packet through a table (Nicira resubmit(,T)).
type Resubmit struct{ Table uint8 }

// Conjunction marks clause Clause (1-based) of NClauses of conjunction ID.
type Conjunction struct {
	ID       uint32
	Clause   uint8
	NClauses uint8
}

// LoadReg loads Value into bits [Start, End] of register Reg.
type LoadReg struct {
	Reg        int
	Start, End int
	Value      uint32
}

// CT sends the packet through conntrack (Nicira ct action).
type CT struct {
	Commit bool
	Zone   uint16
	// Table resumes the pipeline there after conntrack (recirculation); nil: no recirculation.
	Table *uint8
	// SetMark and SetLabel, only with Commit, are written to the connection.
	SetMark  *Masked
	SetLabel *LabelSet
	// LabelFromRegs, only with Commit, copies registers into ct_label
	// (move:NXM_NX_REGn[]->NXM_NX_CT_LABEL[start..start+31]), so one commit
	// flow can record values decided earlier in the pipeline.
	LabelFromRegs []RegToLabel
	// NAT translates the packet through conntrack (see NAT).
	NAT *NAT
}

// NAT is conntrack's network address translation (the nat of a ct
// action). With no address it applies the translation the connection
// already has: a reply is un-NATed, a later packet of the original
// direction translated like the first. With Dst (or Src) and Addr, and
// only with Commit, a new connection's destination (or source) becomes
// Addr, and its port Port (0: unchanged).
type NAT struct {
	Src, Dst bool
	Addr     netip.Addr
	Port     uint16
}

// RegToLabel copies all 32 bits of register Reg into ct_label bits
// [LabelStart, LabelStart+31] (LabelStart+31 < 128).
type RegToLabel struct {
	Reg        int
	LabelStart int
}

// LabelSet sets ct_label's low 64 bits under a mask.
type LabelSet struct {
	Value uint64
	Mask  uint64
}

// Controller sends the packet to the OpenFlow connections that asked for
// packet-ins (see Options.OnPacketIn), truncated to MaxLen bytes (0: the
// whole packet).
type Controller struct{ MaxLen uint16 }

// Normal hands the packet to the OVS normal L2 pipeline.
type Normal struct{}

// SetEthDst rewrites the destination MAC address (OpenFlow 1.3
// set_field eth_dst), e.g. to hand a packet to a router port.
type SetEthDst struct{ MAC net.HardwareAddr }

func (Output) isAction()      {}
func (GotoTable) isAction()   {}
func (Resubmit) isAction()    {}
func (Conjunction) isAction() {}
func (LoadReg) isAction()     {}
func (CT) isAction()          {}
func (Normal) isAction()      {}
func (SetEthDst) isAction()   {}
func (Controller) isAction()  {}
