package openflow

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
)

// This file is tierflow's one rendering of flows in ovs-ofctl syntax. The
// agent keys every desired flow on every update (Flow.Key), so rendering
// appends to a byte slice with strconv and netip's AppendTo rather than
// going through fmt; String, Key and the ovs-ofctl text all share it.

// String renders the flow in ovs-ofctl flow syntax, e.g.
//
//	cookie=0x1, table=10, priority=200,eth_type=0x0800,nw_src=10.0.0.0/24,ip_proto=6,tcp_dst=80 actions=conjunction(7,1/2)
//
// `ovs-ofctl -O OpenFlow13 add-flow BR "$(flow)"` and `--bundle add-flows`
// install exactly the flow the client installs for the same value. Fields
// are written in their generic form (eth_type=, ip_proto=) rather than
// shorthands, so the text says what is matched without ovs-ofctl's implied
// prerequisites. The text between "cookie=..., " and " actions=" is Key.
func (f Flow) String() string {
	return string(f.AppendText(make([]byte, 0, 256)))
}

// AppendText appends String's text to b.
func (f Flow) AppendText(b []byte) []byte {
	b = append(b, "cookie="...)
	b = appendHex(b, f.Cookie)
	b = append(b, ", "...)
	b = f.appendKey(b)
	b = append(b, " actions="...)
	return AppendActions(b, f.Actions)
}

// Key identifies the flow the way OpenFlow does for strict modify and
// delete: table, priority and match, e.g.
//
//	table=10, priority=200,eth_type=0x0800,nw_src=10.0.0.0/24
//
// Two flows have the same Key exactly when they have the same table and
// priority and their matches encode to the same OXM/NXM fields, i.e. when
// the switch holds them as one flow (a zero Mask and an all-ones Mask, or a
// prefix with host bits set and its masked form, are the same match).
func (f Flow) Key() string {
	// A stack buffer large enough for the usual flow leaves string(...) as
	// the only allocation.
	var buf [192]byte
	return string(f.appendKey(buf[:0]))
}

func (f Flow) appendKey(b []byte) []byte {
	b = append(b, "table="...)
	b = strconv.AppendUint(b, uint64(f.Table), 10)
	b = append(b, ", priority="...)
	b = strconv.AppendUint(b, uint64(f.Priority), 10)
	b = append(b, ',')
	n := len(b)
	if b = f.Match.AppendText(b); len(b) == n {
		b = b[:n-1] // no match field: no comma
	}
	return b
}

// String renders only the match part (no table/priority/cookie).
func (m Match) String() string { return string(m.AppendText(nil)) }

// AppendText appends the match fields to b, comma separated, in the order
// of encodeMatch (so the text and the flow-mod list the same fields in the
// same order). Nothing is appended for an empty match.
func (m Match) AppendText(b []byte) []byte {
	start := len(b)
	field := func(name string) {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, name...)
		b = append(b, '=')
	}
	if m.InPort != 0 {
		field("in_port")
		b = appendPort(b, m.InPort)
	}
	if m.EthDst != nil {
		field("dl_dst")
		b = appendMAC(b, m.EthDst)
	}
	if m.EthSrc != nil {
		field("dl_src")
		b = appendMAC(b, m.EthSrc)
	}
	if m.EthType != 0 {
		field("eth_type")
		b = appendHex16(b, m.EthType)
	}
	if m.IPSrc.IsValid() {
		if m.IPSrc.Addr().Is4() {
			field("nw_src")
		} else {
			field("ipv6_src")
		}
		b = appendPrefix(b, m.IPSrc)
	}
	if m.IPDst.IsValid() {
		if m.IPDst.Addr().Is4() {
			field("nw_dst")
		} else {
			field("ipv6_dst")
		}
		b = appendPrefix(b, m.IPDst)
	}
	if m.IPProto != 0 {
		field("ip_proto")
		b = strconv.AppendUint(b, uint64(m.IPProto), 10)
	}
	if m.L4Dst != nil {
		switch m.IPProto {
		case protoTCP:
			field("tcp_dst")
		case protoUDP:
			field("udp_dst")
		case protoSCTP:
			field("sctp_dst")
		default:
			field("tp_dst")
		}
		if m.L4Dst.Mask == 0 || m.L4Dst.Mask == 0xffff {
			b = strconv.AppendUint(b, uint64(m.L4Dst.Value), 10)
		} else {
			b = appendHex(b, uint64(m.L4Dst.Value&m.L4Dst.Mask))
			b = append(b, '/')
			b = appendHex(b, uint64(m.L4Dst.Mask))
		}
	}
	icmp6 := m.IPProto == protoICMPv6
	if m.ICMPType != nil {
		if icmp6 {
			field("icmpv6_type")
		} else {
			field("icmp_type")
		}
		b = strconv.AppendUint(b, uint64(*m.ICMPType), 10)
	}
	if m.ICMPCode != nil {
		if icmp6 {
			field("icmpv6_code")
		} else {
			field("icmp_code")
		}
		b = strconv.AppendUint(b, uint64(*m.ICMPCode), 10)
	}
	if m.NDTarget.IsValid() {
		field("nd_target")
		b = appendPrefix(b, m.NDTarget)
	}
	if m.NDSll != nil {
		field("nd_sll")
		b = appendMAC(b, m.NDSll)
	}
	if m.NDTll != nil {
		field("nd_tll")
		b = appendMAC(b, m.NDTll)
	}
	if m.ArpOp != 0 {
		field("arp_op")
		b = strconv.AppendUint(b, uint64(m.ArpOp), 10)
	}
	if m.ArpSpa.IsValid() {
		field("arp_spa")
		b = m.ArpSpa.AppendTo(b)
	}
	if m.ArpTpa.IsValid() {
		field("arp_tpa")
		b = m.ArpTpa.AppendTo(b)
	}
	if m.ArpSha != nil {
		field("arp_sha")
		b = appendMAC(b, m.ArpSha)
	}
	if m.CtState != nil {
		field("ct_state")
		b = appendCtState(b, *m.CtState)
	}
	if m.CtZone != nil {
		field("ct_zone")
		b = strconv.AppendUint(b, uint64(*m.CtZone), 10)
	}
	if m.CtMark != nil {
		field("ct_mark")
		b = appendMasked32(b, *m.CtMark)
	}
	if m.TunSrc.IsValid() {
		if m.TunSrc.Is4() {
			field("tun_src")
		} else {
			field("tun_ipv6_src")
		}
		b = m.TunSrc.AppendTo(b)
	}
	if len(m.Regs) > 0 {
		// Ascending register order, as encodeMatch. Registers outside
		// reg0-reg15 (which Validate rejects) are rendered too, so that
		// ovs-ofctl rejects the text as well and Key stays an identity.
		var small [16]int
		regs := small[:0]
		for r := range m.Regs {
			regs = append(regs, r)
		}
		slices.Sort(regs)
		for _, r := range regs {
			if len(b) > start {
				b = append(b, ',')
			}
			b = append(b, "reg"...)
			b = strconv.AppendInt(b, int64(r), 10)
			b = append(b, '=')
			b = appendMasked32(b, m.Regs[r])
		}
	}
	if m.ConjID != nil {
		field("conj_id")
		b = strconv.AppendUint(b, uint64(*m.ConjID), 10)
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendHex appends v as %#x does (0x0, 0x1f90).
func appendHex(b []byte, v uint64) []byte {
	b = append(b, "0x"...)
	return strconv.AppendUint(b, v, 16)
}

// appendHex16 appends v as 0x and four hex digits (0x0800, as OVS prints
// an Ethernet type).
func appendHex16(b []byte, v uint16) []byte {
	return append(b, '0', 'x', hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf])
}

// appendMAC appends hw as net.HardwareAddr.String does.
func appendMAC(b []byte, hw net.HardwareAddr) []byte {
	for i, c := range hw {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

// appendPrefix appends p masked, as an address when it has all bits (the
// way OVS prints it).
func appendPrefix(b []byte, p netip.Prefix) []byte {
	p = p.Masked()
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().AppendTo(b)
	}
	return p.AppendTo(b)
}

// appendMasked32 appends value/mask, or only the value for an exact match
// (a zero or all-ones mask).
func appendMasked32(b []byte, m Masked) []byte {
	if m.Mask == 0 || m.Mask == 0xffffffff {
		return appendHex(b, uint64(m.Value))
	}
	b = appendHex(b, uint64(m.Value&m.Mask))
	b = append(b, '/')
	return appendHex(b, uint64(m.Mask))
}

var ctStateNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

// appendCtState appends ct_state as flags (+trk+new-est): bits in the mask
// are '+' when set in the value, '-' otherwise; a zero mask compares every
// defined bit. A state Validate rejects (undefined bits, value bits outside
// the mask) is appended as raw value/mask in hex instead, which ovs-ofctl
// rejects too, and which keeps Key an identity.
func appendCtState(b []byte, m Masked) []byte {
	mask := m.Mask
	if mask == 0 {
		mask = ctStateBits
	}
	if (mask|m.Value)&^ctStateBits != 0 || m.Value&^mask != 0 {
		b = appendHex(b, uint64(m.Value))
		b = append(b, '/')
		return appendHex(b, uint64(m.Mask))
	}
	for i, name := range ctStateNames {
		bit := uint32(1) << i
		if mask&bit == 0 {
			continue
		}
		if m.Value&bit != 0 {
			b = append(b, '+')
		} else {
			b = append(b, '-')
		}
		b = append(b, name...)
	}
	return b
}

// ActionsString renders an action list in ovs-ofctl syntax ("drop" when
// empty).
func ActionsString(actions []Action) string {
	return string(AppendActions(make([]byte, 0, 64), actions))
}

// AppendActions appends ActionsString's text to b.
func AppendActions(b []byte, actions []Action) []byte {
	if len(actions) == 0 {
		return append(b, "drop"...)
	}
	for i, a := range actions {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAction(b, a)
	}
	return b
}

// appendPort appends a port number, or the name of a reserved port.
func appendPort(b []byte, p uint32) []byte {
	switch p {
	case PortInPort:
		return append(b, "IN_PORT"...)
	case PortNormal:
		return append(b, "NORMAL"...)
	case PortController:
		return append(b, "CONTROLLER"...)
	case PortLocal:
		return append(b, "LOCAL"...)
	}
	return strconv.AppendUint(b, uint64(p), 10)
}

func appendAction(b []byte, a Action) []byte {
	switch a := a.(type) {
	case Output:
		if a.Port == PortController {
			return append(b, "controller"...)
		}
		b = append(b, "output:"...)
		return appendPort(b, a.Port)
	case Controller:
		b = append(b, "CONTROLLER:"...)
		ml := a.MaxLen
		if ml == 0 {
			ml = 0xffff
		}
		return strconv.AppendUint(b, uint64(ml), 10)
	case SetField:
		return appendSetFieldText(b, a)
	case Move:
		return appendMoveText(b, a)
	case GroupAction:
		b = append(b, "group:"...)
		return strconv.AppendUint(b, uint64(a.ID), 10)
	case Learn:
		return appendLearnText(b, a)
	case Normal:
		return append(b, "NORMAL"...)
	case SetEthDst:
		b = append(b, "set_field:"...)
		b = append(b, a.MAC.String()...)
		return append(b, "->eth_dst"...)
	case GotoTable:
		b = append(b, "goto_table:"...)
		return strconv.AppendUint(b, uint64(a.Table), 10)
	case Resubmit:
		b = append(b, "resubmit(,"...)
		b = strconv.AppendUint(b, uint64(a.Table), 10)
		return append(b, ')')
	case Conjunction:
		b = append(b, "conjunction("...)
		b = strconv.AppendUint(b, uint64(a.ID), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(a.Clause), 10)
		b = append(b, '/')
		b = strconv.AppendUint(b, uint64(a.NClauses), 10)
		return append(b, ')')
	case LoadReg:
		b = append(b, "load:"...)
		b = appendHex(b, uint64(a.Value))
		b = append(b, "->NXM_NX_REG"...)
		b = strconv.AppendInt(b, int64(a.Reg), 10)
		return appendBits(b, a.Start, a.End)
	case CT:
		b = append(b, "ct("...)
		if a.Commit {
			b = append(b, "commit,"...)
		}
		b = append(b, "zone="...)
		b = strconv.AppendUint(b, uint64(a.Zone), 10)
		if a.Table != nil {
			b = append(b, ",table="...)
			b = strconv.AppendUint(b, uint64(*a.Table), 10)
		}
		if a.NAT != nil {
			b = append(b, ',')
			b = appendNATText(b, *a.NAT)
		}
		if a.SetMark == nil && a.SetLabel == nil && len(a.LabelFromRegs) == 0 {
			return append(b, ')')
		}
		b = append(b, ",exec("...)
		sep := false
		if a.SetMark != nil {
			mask := uint64(a.SetMark.Mask)
			if mask == 0 {
				mask = 0xffffffff
			}
			b = appendSetField(b, "NXM_NX_CT_MARK", uint64(a.SetMark.Value), mask)
			sep = true
		}
		if a.SetLabel != nil {
			mask := a.SetLabel.Mask
			if mask == 0 {
				mask = ^uint64(0)
			}
			if sep {
				b = append(b, ',')
			}
			b = appendSetField(b, "NXM_NX_CT_LABEL", a.SetLabel.Value, mask)
			sep = true
		}
		for _, m := range a.LabelFromRegs {
			if sep {
				b = append(b, ',')
			}
			b = append(b, "move:NXM_NX_REG"...)
			b = strconv.AppendInt(b, int64(m.Reg), 10)
			b = append(b, "[]->NXM_NX_CT_LABEL"...)
			b = appendBits(b, m.LabelStart, m.LabelStart+31)
			sep = true
		}
		return append(b, "))"...)
	case nil:
		return append(b, "<nil action>"...)
	}
	return fmt.Appendf(b, "<unsupported action %T>", a)
}

// appendBits appends a bit range, [start..end].
func appendBits(b []byte, start, end int) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(start), 10)
	b = append(b, ".."...)
	b = strconv.AppendInt(b, int64(end), 10)
	return append(b, ']')
}

// appendSetField mirrors setFieldActions: one load per run of set bits in
// mask.
func appendSetField(b []byte, nxm string, value, mask uint64) []byte {
	for i, r := range bitRuns(mask) {
		if i > 0 {
			b = append(b, ',')
		}
		width := r[1] - r[0] + 1
		v := value >> r[0]
		if width < 64 {
			v &= uint64(1)<<width - 1
		}
		b = append(b, "load:"...)
		b = appendHex(b, v)
		b = append(b, "->"...)
		b = append(b, nxm...)
		b = appendBits(b, r[0], r[1])
	}
	return b
}
