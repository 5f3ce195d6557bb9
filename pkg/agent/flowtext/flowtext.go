package flowtext

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// Key identifies a flow the way OpenFlow does for strict modify/delete:
// table, priority and match.
func Key(f openflow.Flow) string {
	b := make([]byte, 0, 96)
	b = append(b, "table="...)
	b = strconv.AppendUint(b, uint64(f.Table), 10)
	b = append(b, ",priority="...)
	b = strconv.AppendUint(b, uint64(f.Priority), 10)
	b = append(b, ',')
	return string(appendMatch(b, f.Match))
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
func Match(m openflow.Match) string { return string(appendMatch(nil, m)) }

// appendMatch appends the match fields, comma separated, in a fixed order.
// It is on the agent's hot path (every desired flow is keyed on every
// update), hence strconv rather than fmt.
func appendMatch(b []byte, m openflow.Match) []byte {
	start := len(b)
	field := func(name string) {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, name...)
		b = append(b, '=')
	}
	hex := func(v uint64) {
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, v, 16)
	}
	dec := func(v uint64) { b = strconv.AppendUint(b, v, 10) }
	maskedField := func(name string, v openflow.Masked, full uint32) {
		field(name)
		if v.Mask == 0 || v.Mask == full {
			hex(uint64(v.Value))
			return
		}
		hex(uint64(v.Value & v.Mask))
		b = append(b, '/')
		hex(uint64(v.Mask))
	}
	if m.ConjID != nil {
		field("conj_id")
		dec(uint64(*m.ConjID))
	}
	if m.InPort != 0 {
		field("in_port")
		dec(uint64(m.InPort))
	}
	if len(m.Regs) > 0 {
		regs := make([]int, 0, len(m.Regs))
		for r := range m.Regs {
			regs = append(regs, r)
		}
		sort.Ints(regs)
		for _, r := range regs {
			maskedField("reg"+strconv.Itoa(r), m.Regs[r], 0xffffffff)
		}
	}
	if m.CtState != nil {
		field("ct_state")
		b = append(b, ctState(*m.CtState)...)
	}
	if m.CtMark != nil {
		maskedField("ct_mark", *m.CtMark, 0xffffffff)
	}
	if m.CtZone != nil {
		field("ct_zone")
		dec(uint64(*m.CtZone))
	}
	if m.EthSrc != nil {
		field("dl_src")
		b = append(b, m.EthSrc.String()...)
	}
	if m.EthDst != nil {
		field("dl_dst")
		b = append(b, m.EthDst.String()...)
	}
	if m.EthType != 0 {
		field("dl_type")
		b = append(b, fmt.Sprintf("0x%04x", m.EthType)...)
	}
	v6 := m.EthType == 0x86dd
	if m.IPSrc.IsValid() {
		field(ipField(v6, "src"))
		b = append(b, prefix(m.IPSrc)...)
	}
	if m.IPDst.IsValid() {
		field(ipField(v6, "dst"))
		b = append(b, prefix(m.IPDst)...)
	}
	if m.IPProto != 0 {
		field("nw_proto")
		dec(uint64(m.IPProto))
	}
	if m.L4Dst != nil {
		name := map[uint8]string{6: "tcp_dst", 17: "udp_dst", 132: "sctp_dst"}[m.IPProto]
		if name == "" {
			name = "tp_dst"
		}
		maskedField(name, *m.L4Dst, 0xffff)
	}
	icmp := "icmp"
	if v6 {
		icmp = "icmpv6"
	}
	if m.ICMPType != nil {
		field(icmp + "_type")
		dec(uint64(*m.ICMPType))
	}
	if m.ICMPCode != nil {
		field(icmp + "_code")
		dec(uint64(*m.ICMPCode))
	}
	if m.NDTarget.IsValid() {
		field("nd_target")
		b = append(b, prefix(m.NDTarget)...)
	}
	if m.NDSll != nil {
		field("nd_sll")
		b = append(b, m.NDSll.String()...)
	}
	if m.NDTll != nil {
		field("nd_tll")
		b = append(b, m.NDTll.String()...)
	}
	if m.ArpOp != 0 {
		field("arp_op")
		dec(uint64(m.ArpOp))
	}
	if m.ArpSpa.IsValid() {
		field("arp_spa")
		b = append(b, m.ArpSpa.String()...)
	}
	if m.ArpTpa.IsValid() {
		field("arp_tpa")
		b = append(b, m.ArpTpa.String()...)
	}
	if m.ArpSha != nil {
		field("arp_sha")
		b = append(b, m.ArpSha.String()...)
	}
	return b
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
