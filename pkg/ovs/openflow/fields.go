package openflow

import (
	"fmt"
	"net"
	"net/netip"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// Field names a packet header field that SetField writes and Move copies:
// the few the agent rewrites to answer ARP and neighbour solicitations
// itself (a responder turns the request into its reply in place), and the
// tunnel destination a flow-based tunnel port (options:remote_ip=flow)
// encapsulates to.
type Field uint8

const (
	FieldEthSrc Field = iota + 1
	FieldEthDst
	FieldArpOp
	FieldArpSpa
	FieldArpTpa
	FieldArpSha
	FieldArpTha
	FieldIPv6Src
	FieldIPv6Dst
	FieldICMPv6Type
	FieldNDSll
	FieldNDTll
	// FieldNDReserved is the 32 bits after an ND message's type, code and
	// checksum: a neighbour advertisement's R, S and O flags.
	FieldNDReserved
	// FieldNDOptionsType is the type of an ND message's link-layer
	// address option (1 source, 2 target).
	FieldNDOptionsType
	// FieldTunDst and FieldTunIPv6Dst are the outer destination address
	// of a packet output to a tunnel port with options:remote_ip=flow.
	FieldTunDst
	FieldTunIPv6Dst
	// FieldTCPSrc, FieldUDPSrc and FieldSCTPSrc are a packet's L4 source
	// port: moving one onto itself changes nothing but makes the
	// datapath flow match it (see package proxy's affinity frontends).
	FieldTCPSrc
	FieldUDPSrc
	FieldSCTPSrc
)

// fieldKind says how a field's value is given.
type fieldKind uint8

const (
	kindMAC fieldKind = iota + 1
	kindIPv4
	kindIPv6
	kindUint
)

// fieldInfo describes a Field: its ovs-ofctl name, its OXM encoding for
// set_field, and its NXM name and header for move.
type fieldInfo struct {
	name     string // ovs-ofctl (set_field:...->name)
	kind     fieldKind
	bytes    int
	oxmClass uint16
	oxmID    uint8
	nxm      string // move:NXM_...[]; empty: cannot be moved
	nxmClass uint16
	nxmID    uint8
	// eth, proto and icmp6 are the prerequisites OVS checks against the
	// flow's match: the field exists only in such packets.
	eth   uint16
	proto uint8
	nd    bool
	// host: the value must be a host's address (not unspecified, no
	// zone), as a tunnel's remote endpoint is.
	host bool
}

// ericOXMClass is the OXM class of the ND extension fields OVS took from
// Ericsson (nd_reserved, nd_options_type; ovs-fields(7)).
const ericOXMClass = 0x1000

var fields = map[Field]fieldInfo{
	FieldEthSrc:        {name: "eth_src", kind: kindMAC, bytes: 6, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ETH_SRC, nxm: "NXM_OF_ETH_SRC", nxmClass: of13.OXM_CLASS_NXM_0, nxmID: 2},
	FieldEthDst:        {name: "eth_dst", kind: kindMAC, bytes: 6, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ETH_DST, nxm: "NXM_OF_ETH_DST", nxmClass: of13.OXM_CLASS_NXM_0, nxmID: 1},
	FieldArpOp:         {name: "arp_op", kind: kindUint, bytes: 2, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ARP_OP, eth: ethTypeARP},
	FieldArpSpa:        {name: "arp_spa", kind: kindIPv4, bytes: 4, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ARP_SPA, nxm: "NXM_OF_ARP_SPA", nxmClass: of13.OXM_CLASS_NXM_0, nxmID: 16, eth: ethTypeARP},
	FieldArpTpa:        {name: "arp_tpa", kind: kindIPv4, bytes: 4, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ARP_TPA, nxm: "NXM_OF_ARP_TPA", nxmClass: of13.OXM_CLASS_NXM_0, nxmID: 17, eth: ethTypeARP},
	FieldArpSha:        {name: "arp_sha", kind: kindMAC, bytes: 6, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ARP_SHA, nxm: "NXM_NX_ARP_SHA", nxmClass: of13.OXM_CLASS_NXM_1, nxmID: of13.NXM_NX_ARP_SHA, eth: ethTypeARP},
	FieldArpTha:        {name: "arp_tha", kind: kindMAC, bytes: 6, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ARP_THA, nxm: "NXM_NX_ARP_THA", nxmClass: of13.OXM_CLASS_NXM_1, nxmID: of13.NXM_NX_ARP_THA, eth: ethTypeARP},
	FieldIPv6Src:       {name: "ipv6_src", kind: kindIPv6, bytes: 16, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_IPV6_SRC, nxm: "NXM_NX_IPV6_SRC", nxmClass: of13.OXM_CLASS_NXM_1, nxmID: of13.NXM_NX_IPV6_SRC, eth: ethTypeIPv6},
	FieldIPv6Dst:       {name: "ipv6_dst", kind: kindIPv6, bytes: 16, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_IPV6_DST, nxm: "NXM_NX_IPV6_DST", nxmClass: of13.OXM_CLASS_NXM_1, nxmID: of13.NXM_NX_IPV6_DST, eth: ethTypeIPv6},
	FieldICMPv6Type:    {name: "icmpv6_type", kind: kindUint, bytes: 1, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_ICMPV6_TYPE, eth: ethTypeIPv6, proto: protoICMPv6},
	FieldNDSll:         {name: "nd_sll", kind: kindMAC, bytes: 6, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_IPV6_ND_SLL, eth: ethTypeIPv6, proto: protoICMPv6, nd: true},
	FieldNDTll:         {name: "nd_tll", kind: kindMAC, bytes: 6, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_IPV6_ND_TLL, eth: ethTypeIPv6, proto: protoICMPv6, nd: true},
	FieldNDReserved:    {name: "nd_reserved", kind: kindUint, bytes: 4, oxmClass: ericOXMClass, oxmID: 1, eth: ethTypeIPv6, proto: protoICMPv6, nd: true},
	FieldNDOptionsType: {name: "nd_options_type", kind: kindUint, bytes: 1, oxmClass: ericOXMClass, oxmID: 2, eth: ethTypeIPv6, proto: protoICMPv6, nd: true},
	FieldTunDst:        {name: "tun_dst", kind: kindIPv4, bytes: 4, oxmClass: of13.OXM_CLASS_NXM_1, oxmID: of13.NXM_NX_TUN_IPV4_DST, host: true},
	FieldTunIPv6Dst:    {name: "tun_ipv6_dst", kind: kindIPv6, bytes: 16, oxmClass: of13.OXM_CLASS_NXM_1, oxmID: of13.NXM_NX_TUN_IPV6_DST, host: true},
	FieldTCPSrc:        {name: "tcp_src", kind: kindUint, bytes: 2, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_TCP_SRC, nxm: "NXM_OF_TCP_SRC", nxmClass: of13.OXM_CLASS_NXM_0, nxmID: of13.NXM_OF_TCP_SRC, proto: protoTCP},
	FieldUDPSrc:        {name: "udp_src", kind: kindUint, bytes: 2, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_UDP_SRC, nxm: "NXM_OF_UDP_SRC", nxmClass: of13.OXM_CLASS_NXM_0, nxmID: of13.NXM_OF_UDP_SRC, proto: protoUDP},
	FieldSCTPSrc:       {name: "sctp_src", kind: kindUint, bytes: 2, oxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, oxmID: of13.OXM_FIELD_SCTP_SRC, nxm: "OXM_OF_SCTP_SRC", nxmClass: of13.OXM_CLASS_OPENFLOW_BASIC, nxmID: of13.OXM_FIELD_SCTP_SRC, proto: protoSCTP},
}

func (f Field) String() string {
	if fi, ok := fields[f]; ok {
		return fi.name
	}
	return fmt.Sprintf("field(%d)", uint8(f))
}

// SetField writes a value into a packet field (OpenFlow 1.3 set_field).
// The value is MAC for Ethernet address fields, Addr for IP address
// fields and Value for the others, by the field.
type SetField struct {
	Field Field
	MAC   net.HardwareAddr
	Addr  netip.Addr
	Value uint32
}

// Move copies a whole field into another field of the same width (Nicira
// move), e.g. a request's source address into its reply's destination.
type Move struct{ Src, Dst Field }

func (SetField) isAction() {}
func (Move) isAction()     {}

// checkPrereqs reports whether the flow's match guarantees the packet
// has the field; OVS rejects set_field and move of fields the match does
// not guarantee (OFPBAC_MATCH_INCONSISTENT).
func (fi fieldInfo) checkPrereqs(m *Match) error {
	if fi.eth != 0 && m.EthType != fi.eth {
		return fmt.Errorf("%s needs EthType %#04x, have %#04x", fi.name, fi.eth, m.EthType)
	}
	if fi.proto != 0 && m.IPProto != fi.proto {
		return fmt.Errorf("%s needs IPProto %d, have %d", fi.name, fi.proto, m.IPProto)
	}
	if fi.nd && (m.ICMPType == nil || (*m.ICMPType != 135 && *m.ICMPType != 136) || m.ICMPCode == nil || *m.ICMPCode != 0) {
		return fmt.Errorf("%s needs a neighbour discovery match (ICMPType 135 or 136, ICMPCode 0)", fi.name)
	}
	if fi.name == "nd_sll" && *m.ICMPType != 135 || fi.name == "nd_tll" && *m.ICMPType != 136 {
		return fmt.Errorf("%s does not exist in ICMPv6 type %d", fi.name, *m.ICMPType)
	}
	return nil
}

// encodeSetField builds the set_field action, checking the value against
// the field.
func (f *Flow) encodeSetField(a SetField) (of13.Action, error) {
	fi, ok := fields[a.Field]
	if !ok {
		return nil, fmt.Errorf("SetField: unknown field %d", a.Field)
	}
	if err := fi.checkPrereqs(&f.Match); err != nil {
		return nil, fmt.Errorf("SetField: %w", err)
	}
	var value []byte
	switch fi.kind {
	case kindMAC:
		if len(a.MAC) != 6 {
			return nil, fmt.Errorf("SetField %s: invalid MAC %v", fi.name, a.MAC)
		}
		value = []byte(a.MAC)
	case kindIPv4:
		if !a.Addr.Is4() || fi.host && a.Addr.IsUnspecified() {
			return nil, fmt.Errorf("SetField %s: %v is not an IPv4 address", fi.name, a.Addr)
		}
		value = a.Addr.AsSlice()
	case kindIPv6:
		if !a.Addr.Is6() || a.Addr.Is4In6() || fi.host && (a.Addr.IsUnspecified() || a.Addr.Zone() != "") {
			return nil, fmt.Errorf("SetField %s: %v is not an IPv6 address", fi.name, a.Addr)
		}
		value = a.Addr.AsSlice()
	case kindUint:
		if fi.bytes < 4 && a.Value>>(8*fi.bytes) != 0 {
			return nil, fmt.Errorf("SetField %s: value %d does not fit in %d bytes", fi.name, a.Value, fi.bytes)
		}
		value = be32(a.Value)[4-fi.bytes:]
	}
	mf := field(fi.oxmClass, fi.oxmID, value, nil)
	return of13.NewActionSetField(mf), nil
}

// encodeMove builds the Nicira move of a whole field.
func (f *Flow) encodeMove(a Move) (of13.Action, error) {
	src, ok1 := fields[a.Src]
	dst, ok2 := fields[a.Dst]
	if !ok1 || !ok2 || src.nxm == "" || dst.nxm == "" {
		return nil, fmt.Errorf("Move %v -> %v: unsupported field", a.Src, a.Dst)
	}
	if src.bytes != dst.bytes {
		return nil, fmt.Errorf("Move %s -> %s: fields of different widths", src.name, dst.name)
	}
	for _, fi := range []fieldInfo{src, dst} {
		if err := fi.checkPrereqs(&f.Match); err != nil {
			return nil, fmt.Errorf("Move: %w", err)
		}
	}
	return of13.NewNXActionRegMove(uint16(8*src.bytes), 0, 0,
		fieldHeader(src.nxmClass, src.nxmID, uint8(src.bytes)),
		fieldHeader(dst.nxmClass, dst.nxmID, uint8(dst.bytes))), nil
}

// appendSetFieldText renders set_field:VALUE->name as ovs-ofctl reads it.
func appendSetFieldText(b []byte, a SetField) []byte {
	fi, ok := fields[a.Field]
	if !ok {
		return fmt.Appendf(b, "<unknown field %d>", a.Field)
	}
	b = append(b, "set_field:"...)
	switch fi.kind {
	case kindMAC:
		b = appendMAC(b, a.MAC)
	case kindIPv4, kindIPv6:
		b = a.Addr.AppendTo(b)
	default:
		b = fmt.Appendf(b, "%d", a.Value)
	}
	b = append(b, "->"...)
	return append(b, fi.name...)
}

func appendMoveText(b []byte, a Move) []byte {
	src, dst := fields[a.Src], fields[a.Dst]
	b = append(b, "move:"...)
	b = append(b, src.nxm...)
	b = append(b, "[]->"...)
	b = append(b, dst.nxm...)
	return append(b, "[]"...)
}
