package flowtext

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// Key identifies a flow the way OpenFlow does for strict modify/delete:
// table, priority and match.
func Key(f openflow.Flow) string {
	return fmt.Sprintf("table=%d,priority=%d,%s", f.Table, f.Priority, Match(f.Match))
}

// Flow renders a flow for `ovs-ofctl add-flow` (cookie, table, priority,
// match, actions).
func Flow(f openflow.Flow) string {
	m := Match(f.Match)
	s := fmt.Sprintf("cookie=%#x,table=%d,priority=%d", f.Cookie, f.Table, f.Priority)
	if m != "" {
		s += "," + m
	}
	return s + ",actions=" + Actions(f.Actions)
}

// Match renders the match fields in a fixed order.
func Match(m openflow.Match) string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if m.ConjID != nil {
		add("conj_id=%d", *m.ConjID)
	}
	if m.InPort != 0 {
		add("in_port=%d", m.InPort)
	}
	regs := make([]int, 0, len(m.Regs))
	for r := range m.Regs {
		regs = append(regs, r)
	}
	sort.Ints(regs)
	for _, r := range regs {
		add("reg%d=%s", r, masked(m.Regs[r], 0xffffffff))
	}
	if m.CtState != nil {
		add("ct_state=%s", ctState(*m.CtState))
	}
	if m.CtMark != nil {
		add("ct_mark=%s", masked(*m.CtMark, 0xffffffff))
	}
	if m.CtZone != nil {
		add("ct_zone=%d", *m.CtZone)
	}
	if m.EthSrc != nil {
		add("dl_src=%s", m.EthSrc)
	}
	if m.EthDst != nil {
		add("dl_dst=%s", m.EthDst)
	}
	if m.EthType != 0 {
		add("dl_type=%#06x", m.EthType)
	}
	v6 := m.EthType == 0x86dd
	if m.IPSrc.IsValid() {
		add("%s=%s", ipField(v6, "src"), prefix(m.IPSrc))
	}
	if m.IPDst.IsValid() {
		add("%s=%s", ipField(v6, "dst"), prefix(m.IPDst))
	}
	if m.IPProto != 0 {
		add("nw_proto=%d", m.IPProto)
	}
	if m.L4Dst != nil {
		name := map[uint8]string{6: "tcp_dst", 17: "udp_dst", 132: "sctp_dst"}[m.IPProto]
		if name == "" {
			name = "tp_dst"
		}
		add("%s=%s", name, masked(*m.L4Dst, 0xffff))
	}
	icmp := "icmp"
	if v6 {
		icmp = "icmpv6"
	}
	if m.ICMPType != nil {
		add("%s_type=%d", icmp, *m.ICMPType)
	}
	if m.ICMPCode != nil {
		add("%s_code=%d", icmp, *m.ICMPCode)
	}
	if m.NDTarget.IsValid() {
		add("nd_target=%s", prefix(m.NDTarget))
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
	return strings.Join(p, ",")
}

func ipField(v6 bool, dir string) string {
	if v6 {
		return "ipv6_" + dir
	}
	return "nw_" + dir
}

func prefix(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.Masked().String()
}

// masked renders value/mask; a zero mask is an exact match.
func masked(m openflow.Masked, full uint32) string {
	if m.Mask == 0 || m.Mask == full {
		return fmt.Sprintf("%#x", m.Value)
	}
	return fmt.Sprintf("%#x/%#x", m.Value&m.Mask, m.Mask)
}

var ctFlags = []struct {
	bit  uint32
	name string
}{{0x01, "new"}, {0x02, "est"}, {0x04, "rel"}, {0x08, "rpl"}, {0x10, "inv"}, {0x20, "trk"}}

func ctState(m openflow.Masked) string {
	mask := m.Mask
	if mask == 0 {
		mask = 0x3f
	}
	var s string
	for _, f := range ctFlags {
		if mask&f.bit == 0 {
			continue
		}
		if m.Value&f.bit != 0 {
			s += "+" + f.name
		} else {
			s += "-" + f.name
		}
	}
	return s
}

// Actions renders an action list; an empty list is "drop".
func Actions(as []openflow.Action) string {
	if len(as) == 0 {
		return "drop"
	}
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, action(a))
	}
	return strings.Join(out, ",")
}

func action(a openflow.Action) string {
	switch a := a.(type) {
	case openflow.Output:
		return fmt.Sprintf("output:%d", a.Port)
	case openflow.GotoTable:
		return fmt.Sprintf("goto_table:%d", a.Table)
	case openflow.Resubmit:
		return fmt.Sprintf("resubmit(,%d)", a.Table)
	case openflow.Conjunction:
		return fmt.Sprintf("conjunction(%d,%d/%d)", a.ID, a.Clause, a.NClauses)
	case openflow.LoadReg:
		return fmt.Sprintf("load:%#x->NXM_NX_REG%d[%d..%d]", a.Value, a.Reg, a.Start, a.End)
	case openflow.Normal:
		return "normal"
	case openflow.CT:
		var p []string
		if a.Commit {
			p = append(p, "commit")
		}
		p = append(p, fmt.Sprintf("zone=%d", a.Zone))
		if a.Table != nil {
			p = append(p, fmt.Sprintf("table=%d", *a.Table))
		}
		var exec []string
		if a.SetMark != nil {
			mask := a.SetMark.Mask
			if mask == 0 {
				mask = 0xffffffff
			}
			exec = append(exec, fmt.Sprintf("set_field:%#x/%#x->ct_mark", a.SetMark.Value&mask, mask))
		}
		if a.SetLabel != nil {
			mask := a.SetLabel.Mask
			if mask == 0 {
				mask = ^uint64(0)
			}
			exec = append(exec, fmt.Sprintf("set_field:%#x/%#x->ct_label", a.SetLabel.Value&mask, mask))
		}
		for _, m := range a.LabelFromRegs {
			exec = append(exec, fmt.Sprintf("move:NXM_NX_REG%d[]->NXM_NX_CT_LABEL[%d..%d]", m.Reg, m.LabelStart, m.LabelStart+31))
		}
		if len(exec) > 0 {
			p = append(p, "exec("+strings.Join(exec, ",")+")")
		}
		return "ct(" + strings.Join(p, ",") + ")"
	}
	return fmt.Sprintf("note:%T", a)
}
