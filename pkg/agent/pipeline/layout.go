package pipeline

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// Registers. reg0 carries per-packet flags, reg1 the output port chosen by
// Forwarding, reg2/reg3 the IDs of the rules that allowed the packet in each
// direction (copied into ct_label on commit), reg6 the Service tables'
// flags and reg7 the Service endpoint chosen for a new connection.
const (
	RegFlags      = 0
	RegOutPort    = 1
	RegEgressRule = 2
	RegIngrRule   = 3
	RegService    = 6
	RegEndpoint   = 7
)

// reg6 (RegService) bits.
const (
	// ServiceToNode: the packet is for a node address (ServiceNodePort),
	// where NodePort frontends listen.
	ServiceToNode = 1 << 0
	// ServiceChosen: a Service's group chose the endpoint in reg7 (a
	// frontend with session affinity learns it).
	ServiceChosen = 1 << 1
	// ServiceAffine: a learned affinity flow chose the endpoint in reg7.
	ServiceAffine = 1 << 2
	// ServiceNDReply: a neighbour solicitation is being turned into its
	// advertisement (the second step sets the target link-layer address).
	ServiceNDReply = 1 << 3
)

// MatchService matches reg6 bits.
func MatchService(bits uint32) openflow.Masked { return openflow.Masked{Value: bits, Mask: bits} }

// LoadService sets one reg6 bit.
func LoadService(bit uint32) openflow.LoadReg {
	n := 0
	for bit>>n != 1 {
		n++
	}
	return openflow.LoadReg{Reg: RegService, Start: n, End: n, Value: 1}
}

// ServiceMAC is the Ethernet address the bridge answers ARP and neighbour
// solicitations for Service and hairpin addresses with, and gives packets
// it load-balanced to another node's pod in uplink mode (a locally
// administered address no interface has: the fabric floods it to every
// node, and the node of the endpoint delivers it).
var ServiceMAC = net.HardwareAddr{0x0a, 0x74, 0x66, 0x00, 0x00, 0x01}

// HairpinIPv4 and HairpinIPv6 are the source addresses a pod sees on a
// connection it made to itself through a Service (hairpin): its own
// address as source would be dropped by its kernel as a martian.
var (
	HairpinIPv4 = netip.MustParseAddr("169.254.0.253")
	HairpinIPv6 = netip.MustParseAddr("fd74:6966::fd")
)

// HairpinZone is the conntrack zone of hairpin source NAT: a zone of its
// own, apart from the node's zone (the connection's destination NAT and
// its policy state), derived from it so that nodes sharing a datapath get
// different ones.
func HairpinZone(zone uint16) uint16 { return zone ^ 0x8000 }

// reg0 bit fields.
const (
	// Bits 0-1: where the packet came from.
	flagSrcShift = 0
	SrcLocalPod  = 1
	SrcUplink    = 2
	// SrcTunnel: another node's pod or host, through the tunnel port. It
	// shares the uplink's value: a bridge has one or the other, and both
	// carry other nodes' traffic, whose egress policy ran at its source.
	SrcTunnel = SrcUplink
	// SrcGateway: the node's gateway port (the host: its own traffic, and
	// everything the host routes to the pods, such as remote nodes' pods).
	SrcGateway = 3
	// Bits 2-3: where Forwarding sends it.
	flagDstShift = 2
	DstLocalPod  = 1
	DstUplink    = 2
	// DstTunnel: another node's pod, through the tunnel port (the
	// uplink's value, as SrcTunnel).
	DstTunnel  = DstUplink
	DstGateway = 3
	// Bit 4: the packet skips the policy tables (replies and related packets
	// of tracked connections, ARP, IPv6 neighbour discovery).
	flagBypassBit = 4
	// Bit 5: a policy table denied the packet; ConntrackCommit drops it (and
	// marks an established connection blocked).
	flagDenyBit = 5
)

// MatchSrc matches reg0's source kind.
func MatchSrc(kind uint32) openflow.Masked {
	return openflow.Masked{Value: kind << flagSrcShift, Mask: 3 << flagSrcShift}
}

// MatchDst matches reg0's destination kind.
func MatchDst(kind uint32) openflow.Masked {
	return openflow.Masked{Value: kind << flagDstShift, Mask: 3 << flagDstShift}
}

// MatchBypass matches packets flagged to skip the policy tables.
func MatchBypass() openflow.Masked {
	return openflow.Masked{Value: 1 << flagBypassBit, Mask: 1 << flagBypassBit}
}

// MatchDeny matches packets a policy table denied.
func MatchDeny() openflow.Masked {
	return openflow.Masked{Value: 1 << flagDenyBit, Mask: 1 << flagDenyBit}
}

// LoadSrc records the packet's source kind.
func LoadSrc(kind uint32) openflow.LoadReg {
	return openflow.LoadReg{Reg: RegFlags, Start: flagSrcShift, End: flagSrcShift + 1, Value: kind}
}

// LoadDst records the packet's destination kind.
func LoadDst(kind uint32) openflow.LoadReg {
	return openflow.LoadReg{Reg: RegFlags, Start: flagDstShift, End: flagDstShift + 1, Value: kind}
}

// LoadBypass flags the packet to skip the policy tables.
func LoadBypass() openflow.LoadReg {
	return openflow.LoadReg{Reg: RegFlags, Start: flagBypassBit, End: flagBypassBit, Value: 1}
}

// LoadDeny flags the packet as denied.
func LoadDeny() openflow.LoadReg {
	return openflow.LoadReg{Reg: RegFlags, Start: flagDenyBit, End: flagDenyBit, Value: 1}
}

// Conntrack mark and label.
const (
	// CtMarkBlocked is set on a connection a policy stopped allowing: its
	// replies are dropped until an original-direction packet is allowed again.
	CtMarkBlocked uint32 = 0x1
	// CtMarkFromGateway is set on a connection that entered the bridge
	// through the gateway (routed mode): its replies go back through the
	// gateway even when their destination is a local pod, because the host
	// may have translated the connection (a Service's DNAT to a pod of
	// this node) and must see the replies to undo it.
	CtMarkFromGateway uint32 = 0x2
	// The egress rule ID is in ct_label bits 0-31, the ingress rule ID in
	// bits 32-63 (0: no rule decided, i.e. a default allow or no policy).
	CtLabelEgressShift  = 0
	CtLabelIngressShift = 32
)

// Cookie layout (64 bits):
//
//	bits 56-63  round: bumped on every agent start, so a restarted agent can
//	            tell its flows from a previous run's and delete the stale ones
//	bits 48-55  role: what the flow is for (see Role)
//	bits 32-47  zero
//	bits  0-31  rule ID (0 for pipeline flows)
const (
	cookieRoundShift = 56
	cookieRoleShift  = 48
	// CookieRoundMask selects the round bits.
	CookieRoundMask uint64 = 0xff << cookieRoundShift
	// CookieRuleMask selects the rule ID and role.
	CookieRuleMask uint64 = 0xffffffff
)

// Role says what a flow is for; it is encoded in the cookie.
type Role uint8

const (
	// RolePipeline flows are the static pipeline (classifier, spoof guard, ...).
	RolePipeline Role = 0
	// RoleSentinel is the one flow whose presence proves the agent's flows are
	// installed; a missing sentinel means OVS lost them.
	RoleSentinel Role = 1
	// RoleClause flows are conjunction clauses of a rule (no statistics).
	RoleClause Role = 2
	// RoleAction flows carry a rule's action (conj_id flows and single-clause
	// shortcuts): their statistics count the packets the rule decided.
	RoleAction Role = 3
	// RoleMetric flows count packets a rule allowed, in the metric tables.
	RoleMetric Role = 4
	// RoleIsolation flows drop packets of isolated pods nothing allowed.
	RoleIsolation Role = 5
	// RoleDefault flows are a table's fall-through.
	RoleDefault Role = 6
	// RoleOverflow flows deny, at OverflowPriority in an Admin or
	// Baseline table, what reaches them from the applied-to pods of the
	// policies left out of that table because its rule priorities ran
	// out (fail closed; see policyflows).
	RoleOverflow Role = 7
	// RoleService flows are a Service's frontends, node addresses and
	// responders (package proxy); the ID is the frontend's.
	RoleService Role = 8
	// RoleEndpoint flows translate a new connection to one endpoint of a
	// Service (ServiceDNAT); the ID is the endpoint's.
	RoleEndpoint Role = 9
	// RoleAffinity flows are learned from connections to frontends with
	// session affinity (ServiceAffinity); the ID is the endpoint's.
	RoleAffinity Role = 10
)

func (r Role) String() string {
	switch r {
	case RolePipeline:
		return "pipeline"
	case RoleSentinel:
		return "sentinel"
	case RoleClause:
		return "clause"
	case RoleAction:
		return "action"
	case RoleMetric:
		return "metric"
	case RoleIsolation:
		return "isolation"
	case RoleDefault:
		return "default"
	case RoleOverflow:
		return "overflow"
	case RoleService:
		return "service"
	case RoleEndpoint:
		return "endpoint"
	case RoleAffinity:
		return "affinity"
	}
	return fmt.Sprintf("role%d", uint8(r))
}

// Cookie builds a cookie.
func Cookie(round uint8, role Role, ruleID uint32) uint64 {
	return uint64(round)<<cookieRoundShift | uint64(role)<<cookieRoleShift | uint64(ruleID)
}

// DecodeCookie splits a cookie into its fields.
func DecodeCookie(c uint64) (round uint8, role Role, ruleID uint32) {
	return uint8(c >> cookieRoundShift), Role(c >> cookieRoleShift), uint32(c)
}

// Priorities of the static flows. Rule flows of the policy tables use
// [RulePriorityMin, RulePriorityMax]; see policyflows.
const (
	PriorityBypass  uint16 = 65000
	PriorityHigh    uint16 = 300
	PriorityNormal  uint16 = 200
	PriorityLow     uint16 = 100
	PriorityDefault uint16 = 0
	// RulePriorityMin and RulePriorityMax bound the rule flows of the Admin
	// and Baseline tables: 63001 distinct priorities, so at most
	// RuleCapacity rules per table on one node.
	RulePriorityMin uint16 = 1000
	RulePriorityMax uint16 = 64000
	RuleCapacity           = int(RulePriorityMax-RulePriorityMin) + 1
	// OverflowPriority is below every rule of an Admin or Baseline table:
	// the RoleOverflow denies of policies left out of a full table sit
	// under the rules of every policy that precedes them.
	OverflowPriority uint16 = RulePriorityMin - 1
	// NetworkPolicyRulePriority is shared by every NetworkPolicy rule: they
	// are all allows, so their order does not matter, and sharing one
	// priority lets rules share clause flows.
	NetworkPolicyRulePriority uint16 = 10000
)
