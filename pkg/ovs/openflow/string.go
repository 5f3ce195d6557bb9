package openflow

import (
	"fmt"
	"net/netip"
	"strings"
)

// String renders the flow in ovs-ofctl flow syntax, e.g.
//
//	cookie=0x1, table=10, priority=200,eth_type=0x0800,ip_proto=6,nw_src=10.0.0.0/24,tcp_dst=80 actions=conjunction(7,1/2)
//
// `ovs-ofctl -O OpenFlow13 add-flow BR "$(flow)"` and `--bundle add-flows`
// install exactly the flow the client installs for the same value. Fields
// are written in their generic form (eth_type=, ip_proto=) rather than
// shorthands, so the text says what is matched without ovs-ofctl's implied
// prerequisites.
func (f Flow) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cookie=%#x, table=%d, priority=%d", f.Cookie, f.Table, f.Priority)
	if m := f.Match.String(); m != "" {
		b.WriteString(",")
		b.WriteString(m)
	}
	b.WriteString(" actions=")
	b.WriteString(ActionsString(f.Actions))
	return b.String()
}

// MatchString renders only the match part (no table/priority/cookie), in
// the order of encodeMatch.
func (m Match) String() string {
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	if m.InPort != 0 {
		add("in_port=%s", portString(m.InPort))
	}
	if m.EthDst != nil {
		add("dl_dst=%s", m.EthDst)
	}
	if m.EthSrc != nil {
		add("dl_src=%s", m.EthSrc)
	}
	if m.EthType != 0 {
		add("eth_type=%#06x", m.EthType)
	}
	if m.IPSrc.IsValid() {
		add("%s=%s", ipFieldName("src", m.IPSrc), prefixString(m.IPSrc))
	}
	if m.IPDst.IsValid() {
		add("%s=%s", ipFieldName("dst", m.IPDst), prefixString(m.IPDst))
	}
	if m.IPProto != 0 {
		add("ip_proto=%d", m.IPProto)
	}
	if m.L4Dst != nil {
		name := map[uint8]string{protoTCP: "tcp_dst", protoUDP: "udp_dst", protoSCTP: "sctp_dst"}[m.IPProto]
		if name == "" {
			name = "tp_dst"
		}
		if m.L4Dst.Mask == 0 || m.L4Dst.Mask == 0xffff {
			add("%s=%d", name, m.L4Dst.Value)
		} else {
			add("%s=%#x/%#x", name, m.L4Dst.Value&m.L4Dst.Mask, m.L4Dst.Mask)
		}
	}
	icmp := "icmp"
	if m.IPProto == protoICMPv6 {
		icmp = "icmpv6"
	}
	if m.ICMPType != nil {
		add("%s_type=%d", icmp, *m.ICMPType)
	}
	if m.ICMPCode != nil {
		add("%s_code=%d", icmp, *m.ICMPCode)
	}
	if m.NDTarget.IsValid() {
		add("nd_target=%s", prefixString(m.NDTarget))
	}
	if m.NDSll != nil {
		add("nd_sll=%s", m.NDSll)
	}
	if m.NDTll != nil {
		add("nd_tll=%s", m.NDTll)
	}
	if m.ArpOp != 0 {
		add("arp_op=%d", m.ArpOp)
	}
	if m.ArpSpa.IsValid() {
		add("arp_spa=%s", m.ArpSpa)
	}
	if m.ArpTpa.IsValid() {
		add("arp_tpa=%s", m.ArpTpa)
	}
	if m.ArpSha != nil {
		add("arp_sha=%s", m.ArpSha)
	}
	if m.CtState != nil {
		add("ct_state=%s", ctStateString(*m.CtState))
	}
	if m.CtZone != nil {
		add("ct_zone=%d", *m.CtZone)
	}
	if m.CtMark != nil {
		add("ct_mark=%s", maskedString(*m.CtMark))
	}
	for reg := 0; reg < 16; reg++ {
		if r, ok := m.Regs[reg]; ok {
			add("reg%d=%s", reg, maskedString(r))
		}
	}
	if m.ConjID != nil {
		add("conj_id=%d", *m.ConjID)
	}
	return strings.Join(parts, ",")
}

func ipFieldName(dir string, p netip.Prefix) string {
	if p.Addr().Is4() {
		return "nw_" + dir
	}
	return "ipv6_" + dir
}

func prefixString(p netip.Prefix) string {
	p = p.Masked()
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

func maskedString(m Masked) string {
	if m.Mask == 0 || m.Mask == 0xffffffff {
		return fmt.Sprintf("%#x", m.Value)
	}
	return fmt.Sprintf("%#x/%#x", m.Value&m.Mask, m.Mask)
}

var ctStateNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

// ctStateString renders ct_state as flags (+trk+new-est): bits in the mask
// are '+' when set in the value, '-' otherwise; a zero mask compares every
// defined bit.
func ctStateString(m Masked) string {
	mask := m.Mask
	if mask == 0 {
		mask = ctStateBits
	}
	var b strings.Builder
	for i, name := range ctStateNames {
		bit := uint32(1) << i
		if mask&bit == 0 {
			continue
		}
		if m.Value&bit != 0 {
			b.WriteString("+")
		} else {
			b.WriteString("-")
		}
		b.WriteString(name)
	}
	return b.String()
}

// ActionsString renders an action list in ovs-ofctl syntax ("drop" when
// empty).
func ActionsString(actions []Action) string {
	if len(actions) == 0 {
		return "drop"
	}
	parts := make([]string, 0, len(actions))
	for _, a := range actions {
		parts = append(parts, actionString(a))
	}
	return strings.Join(parts, ",")
}

func portString(p uint32) string {
	switch p {
	case PortInPort:
		return "IN_PORT"
	case PortNormal:
		return "NORMAL"
	case PortController:
		return "CONTROLLER"
	case PortLocal:
		return "LOCAL"
	}
	return fmt.Sprintf("%d", p)
}

func actionString(a Action) string {
	switch a := a.(type) {
	case Output:
		if a.Port == PortController {
			return "controller"
		}
		return "output:" + portString(a.Port)
	case Normal:
		return "NORMAL"
	case GotoTable:
		return fmt.Sprintf("goto_table:%d", a.Table)
	case Resubmit:
		return fmt.Sprintf("resubmit(,%d)", a.Table)
	case Conjunction:
		return fmt.Sprintf("conjunction(%d,%d/%d)", a.ID, a.Clause, a.NClauses)
	case LoadReg:
		return fmt.Sprintf("load:%#x->NXM_NX_REG%d[%d..%d]", a.Value, a.Reg, a.Start, a.End)
	case CT:
		var args []string
		if a.Commit {
			args = append(args, "commit")
		}
		args = append(args, fmt.Sprintf("zone=%d", a.Zone))
		if a.Table != nil {
			args = append(args, fmt.Sprintf("table=%d", *a.Table))
		}
		var exec []string
		if a.SetMark != nil {
			mask := uint64(a.SetMark.Mask)
			if mask == 0 {
				mask = 0xffffffff
			}
			exec = append(exec, setFieldString("NXM_NX_CT_MARK", uint64(a.SetMark.Value), mask))
		}
		if a.SetLabel != nil {
			mask := a.SetLabel.Mask
			if mask == 0 {
				mask = ^uint64(0)
			}
			exec = append(exec, setFieldString("NXM_NX_CT_LABEL", a.SetLabel.Value, mask))
		}
		for _, m := range a.LabelFromRegs {
			exec = append(exec, fmt.Sprintf("move:NXM_NX_REG%d[]->NXM_NX_CT_LABEL[%d..%d]", m.Reg, m.LabelStart, m.LabelStart+31))
		}
		if len(exec) > 0 {
			args = append(args, "exec("+strings.Join(exec, ",")+")")
		}
		return "ct(" + strings.Join(args, ",") + ")"
	case nil:
		return "<nil action>"
	}
	return fmt.Sprintf("<unsupported action %T>", a)
}

// setFieldString mirrors setFieldActions.
func setFieldString(nxm string, value, mask uint64) string {
	var parts []string
	for _, r := range bitRuns(mask) {
		width := r[1] - r[0] + 1
		v := value >> r[0]
		if width < 64 {
			v &= uint64(1)<<width - 1
		}
		parts = append(parts, fmt.Sprintf("load:%#x->%s[%d..%d]", v, nxm, r[0], r[1]))
	}
	return strings.Join(parts, ",")
}
