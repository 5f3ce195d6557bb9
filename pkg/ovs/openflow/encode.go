package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// Command is a flow-mod command.
type Command uint8

const (
	// Add installs the flow, replacing an identical-match one (counters reset).
	Add Command = Command(of13.FC_ADD)
	// ModifyStrict replaces the actions of the flow with the same match and
	// priority (counters kept); in OpenFlow 1.3 a missing flow is not added.
	ModifyStrict Command = Command(of13.FC_MODIFY_STRICT)
	// DeleteStrict removes the flow with the same match and priority.
	DeleteStrict Command = Command(of13.FC_DELETE_STRICT)
)

func (c Command) String() string {
	switch c {
	case Add:
		return "add"
	case ModifyStrict:
		return "modify-strict"
	case DeleteStrict:
		return "delete-strict"
	}
	return fmt.Sprintf("command(%d)", uint8(c))
}

// Highest OpenFlow table a flow may live in (OFPTT_MAX); 255 means "all".
const maxTable = 254

// Conntrack state bits of CtState (ovs-fields(7)).
const (
	CtNew uint32 = 1 << iota
	CtEst
	CtRel
	CtRpl
	CtInv
	CtTrk
	CtSNAT
	CtDNAT

	ctStateBits = CtNew | CtEst | CtRel | CtRpl | CtInv | CtTrk | CtSNAT | CtDNAT
)

const (
	ethTypeIPv4 = 0x0800
	ethTypeIPv6 = 0x86dd
	ethTypeARP  = 0x0806
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
	protoSCTP   = 132
)

// Validate checks a flow for what OVS would reject or silently ignore
// (missing prerequisites, out-of-range values, misplaced goto_table), so a
// bad flow fails with an error naming it instead of installing something
// other than what was asked.
func (f *Flow) Validate() error {
	_, err := f.encodeMatch()
	if err != nil {
		return err
	}
	_, err = f.encodeInstructions()
	return err
}

// flowMod builds the libOpenflow FlowMod for cmd with transaction id xid.
func (f *Flow) flowMod(cmd Command, xid uint32) (*of13.FlowMod, error) {
	if f.Table > maxTable {
		return nil, fmt.Errorf("table %d out of range 0-%d", f.Table, maxTable)
	}
	fm := of13.NewFlowMod()
	fm.Xid = xid
	fm.Command = uint8(cmd)
	fm.TableId = f.Table
	fm.Priority = f.Priority
	fm.Cookie = f.Cookie
	if cmd == DeleteStrict {
		// Strict deletion matches the cookie too only under a mask; the
		// match and priority identify the flow.
		fm.CookieMask = 0
	}
	match, err := f.encodeMatch()
	if err != nil {
		return nil, err
	}
	for _, mf := range match {
		fm.Match.AddField(mf)
	}
	if cmd != DeleteStrict {
		instrs, err := f.encodeInstructions()
		if err != nil {
			return nil, err
		}
		for _, in := range instrs {
			fm.AddInstruction(in)
		}
	}
	return fm, nil
}

// field builds an OXM/NXM match field from raw big-endian bytes.
func field(class uint16, id uint8, value, mask []byte) of13.MatchField {
	mf := of13.MatchField{
		Class:  class,
		Field:  id,
		Length: uint8(len(value)),
		Value:  &of13.ByteArrayField{Data: value, Length: uint8(len(value))},
	}
	if mask != nil {
		mf.HasMask = true
		mf.Length = uint8(2 * len(value))
		mf.Mask = &of13.ByteArrayField{Data: mask, Length: uint8(len(mask))}
	}
	return mf
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func basic(id uint8, value, mask []byte) of13.MatchField {
	return field(of13.OXM_CLASS_OPENFLOW_BASIC, id, value, mask)
}

func nxm1(id uint8, value, mask []byte) of13.MatchField {
	return field(of13.OXM_CLASS_NXM_1, id, value, mask)
}

// masked32 returns value and mask bytes; a zero or all-ones mask is exact.
func masked32(m Masked) ([]byte, []byte) {
	if m.Mask == 0 || m.Mask == 0xffffffff {
		return be32(m.Value), nil
	}
	return be32(m.Value & m.Mask), be32(m.Mask)
}

func prefixField(p netip.Prefix) (value, mask []byte) {
	p = p.Masked()
	value = p.Addr().AsSlice()
	if p.Bits() == p.Addr().BitLen() {
		return value, nil
	}
	ones := net.CIDRMask(p.Bits(), p.Addr().BitLen())
	return value, []byte(ones)
}

func macField(name string, hw net.HardwareAddr) ([]byte, error) {
	if len(hw) != 6 {
		return nil, fmt.Errorf("%s %q is not a 48-bit MAC address", name, hw.String())
	}
	return []byte(hw), nil
}

// encodeMatch turns Match into OXM/NXM fields in prerequisite order, and
// checks the prerequisites OVS enforces (ovs-fields(7)).
func (f *Flow) encodeMatch() ([]of13.MatchField, error) {
	m := &f.Match
	var out []of13.MatchField
	if m.InPort != 0 {
		out = append(out, basic(of13.OXM_FIELD_IN_PORT, be32(m.InPort), nil))
	}
	if m.EthDst != nil {
		v, err := macField("EthDst", m.EthDst)
		if err != nil {
			return nil, err
		}
		out = append(out, basic(of13.OXM_FIELD_ETH_DST, v, nil))
	}
	if m.EthSrc != nil {
		v, err := macField("EthSrc", m.EthSrc)
		if err != nil {
			return nil, err
		}
		out = append(out, basic(of13.OXM_FIELD_ETH_SRC, v, nil))
	}
	if m.EthType != 0 {
		out = append(out, basic(of13.OXM_FIELD_ETH_TYPE, be16(m.EthType), nil))
	}
	isIP := m.EthType == ethTypeIPv4 || m.EthType == ethTypeIPv6
	for _, p := range []struct {
		name   string
		prefix netip.Prefix
		v4, v6 uint8
	}{
		{"IPSrc", m.IPSrc, of13.OXM_FIELD_IPV4_SRC, of13.OXM_FIELD_IPV6_SRC},
		{"IPDst", m.IPDst, of13.OXM_FIELD_IPV4_DST, of13.OXM_FIELD_IPV6_DST},
	} {
		if !p.prefix.IsValid() {
			continue
		}
		if p.prefix.Addr().Is4In6() {
			return nil, fmt.Errorf("%s %s: IPv4-mapped IPv6 prefixes are ambiguous; use the IPv4 form", p.name, p.prefix)
		}
		v, mask := prefixField(p.prefix)
		switch {
		case p.prefix.Addr().Is4() && m.EthType == ethTypeIPv4:
			out = append(out, basic(p.v4, v, mask))
		case p.prefix.Addr().Is6() && m.EthType == ethTypeIPv6:
			out = append(out, basic(p.v6, v, mask))
		default:
			return nil, fmt.Errorf("%s %s needs EthType %#04x, have %#04x", p.name, p.prefix, map[bool]uint16{true: ethTypeIPv4, false: ethTypeIPv6}[p.prefix.Addr().Is4()], m.EthType)
		}
	}
	if m.IPProto != 0 {
		if !isIP {
			return nil, fmt.Errorf("IPProto %d needs EthType IPv4 or IPv6, have %#04x", m.IPProto, m.EthType)
		}
		out = append(out, basic(of13.OXM_FIELD_IP_PROTO, []byte{m.IPProto}, nil))
	}
	if m.L4Dst != nil {
		if m.L4Dst.Value > 0xffff || m.L4Dst.Mask > 0xffff {
			return nil, fmt.Errorf("L4Dst %#x/%#x exceeds 16 bits", m.L4Dst.Value, m.L4Dst.Mask)
		}
		var id uint8
		switch m.IPProto {
		case protoTCP:
			id = of13.OXM_FIELD_TCP_DST
		case protoUDP:
			id = of13.OXM_FIELD_UDP_DST
		case protoSCTP:
			id = of13.OXM_FIELD_SCTP_DST
		default:
			return nil, fmt.Errorf("L4Dst needs IPProto TCP, UDP or SCTP, have %d", m.IPProto)
		}
		v := be16(uint16(m.L4Dst.Value))
		var mask []byte
		if m.L4Dst.Mask != 0 && m.L4Dst.Mask != 0xffff {
			v = be16(uint16(m.L4Dst.Value & m.L4Dst.Mask))
			mask = be16(uint16(m.L4Dst.Mask))
		}
		out = append(out, basic(id, v, mask))
	}
	if m.ICMPType != nil || m.ICMPCode != nil {
		var typ, code uint8
		switch {
		case m.IPProto == protoICMP && m.EthType == ethTypeIPv4:
			typ, code = of13.OXM_FIELD_ICMPV4_TYPE, of13.OXM_FIELD_ICMPV4_CODE
		case m.IPProto == protoICMPv6 && m.EthType == ethTypeIPv6:
			typ, code = of13.OXM_FIELD_ICMPV6_TYPE, of13.OXM_FIELD_ICMPV6_CODE
		default:
			return nil, fmt.Errorf("ICMPType/ICMPCode need IPv4 with IPProto 1 or IPv6 with IPProto 58")
		}
		if m.ICMPType != nil {
			out = append(out, basic(typ, []byte{*m.ICMPType}, nil))
		}
		if m.ICMPCode != nil {
			out = append(out, basic(code, []byte{*m.ICMPCode}, nil))
		}
	}
	if m.NDTarget.IsValid() || m.NDSll != nil || m.NDTll != nil {
		if m.EthType != ethTypeIPv6 || m.IPProto != protoICMPv6 || m.ICMPType == nil || (*m.ICMPType != 135 && *m.ICMPType != 136) {
			return nil, errors.New("NDTarget/NDSll/NDTll need IPv6, IPProto 58 and ICMPType 135 or 136")
		}
		if m.ICMPCode == nil || *m.ICMPCode != 0 {
			// OVS only parses ND options of code-0 messages.
			return nil, errors.New("NDTarget/NDSll/NDTll need ICMPCode 0")
		}
		if m.NDTarget.IsValid() {
			if !m.NDTarget.Addr().Is6() || m.NDTarget.Addr().Is4In6() {
				return nil, fmt.Errorf("NDTarget %s is not an IPv6 prefix", m.NDTarget)
			}
			v, mask := prefixField(m.NDTarget)
			out = append(out, basic(of13.OXM_FIELD_IPV6_ND_TARGET, v, mask))
		}
		if m.NDSll != nil {
			if *m.ICMPType != 135 {
				return nil, errors.New("NDSll needs ICMPType 135 (neighbor solicitation)")
			}
			v, err := macField("NDSll", m.NDSll)
			if err != nil {
				return nil, err
			}
			out = append(out, basic(of13.OXM_FIELD_IPV6_ND_SLL, v, nil))
		}
		if m.NDTll != nil {
			if *m.ICMPType != 136 {
				return nil, errors.New("NDTll needs ICMPType 136 (neighbor advertisement)")
			}
			v, err := macField("NDTll", m.NDTll)
			if err != nil {
				return nil, err
			}
			out = append(out, basic(of13.OXM_FIELD_IPV6_ND_TLL, v, nil))
		}
	}
	if m.ArpOp != 0 || m.ArpSpa.IsValid() || m.ArpTpa.IsValid() || m.ArpSha != nil {
		if m.EthType != ethTypeARP {
			return nil, fmt.Errorf("ARP fields need EthType 0x0806, have %#04x", m.EthType)
		}
		if m.ArpOp != 0 {
			out = append(out, basic(of13.OXM_FIELD_ARP_OP, be16(m.ArpOp), nil))
		}
		for _, a := range []struct {
			name string
			addr netip.Addr
			id   uint8
		}{{"ArpSpa", m.ArpSpa, of13.OXM_FIELD_ARP_SPA}, {"ArpTpa", m.ArpTpa, of13.OXM_FIELD_ARP_TPA}} {
			if !a.addr.IsValid() {
				continue
			}
			if !a.addr.Is4() {
				return nil, fmt.Errorf("%s %s is not an IPv4 address", a.name, a.addr)
			}
			out = append(out, basic(a.id, a.addr.AsSlice(), nil))
		}
		if m.ArpSha != nil {
			v, err := macField("ArpSha", m.ArpSha)
			if err != nil {
				return nil, err
			}
			out = append(out, basic(of13.OXM_FIELD_ARP_SHA, v, nil))
		}
	}
	if m.CtState != nil {
		// A zero mask is an exact match (as for every Masked): all defined
		// state bits are compared.
		mask := m.CtState.Mask
		if mask == 0 {
			mask = ctStateBits
		}
		if mask&^ctStateBits != 0 || m.CtState.Value&^ctStateBits != 0 {
			return nil, fmt.Errorf("CtState %#x/%#x has undefined bits (defined: %#x)", m.CtState.Value, m.CtState.Mask, ctStateBits)
		}
		if m.CtState.Value&^mask != 0 {
			return nil, fmt.Errorf("CtState value %#x has bits outside mask %#x", m.CtState.Value, mask)
		}
		out = append(out, nxm1(of13.NXM_NX_CT_STATE, be32(m.CtState.Value), be32(mask)))
	}
	if m.CtZone != nil {
		out = append(out, nxm1(of13.NXM_NX_CT_ZONE, be16(*m.CtZone), nil))
	}
	if m.CtMark != nil {
		v, mask := masked32(*m.CtMark)
		out = append(out, nxm1(of13.NXM_NX_CT_MARK, v, mask))
	}
	if m.TunSrc.IsValid() {
		switch {
		case m.TunSrc.Is4():
			out = append(out, nxm1(of13.NXM_NX_TUN_IPV4_SRC, m.TunSrc.AsSlice(), nil))
		case m.TunSrc.Is4In6() || m.TunSrc.Zone() != "":
			return nil, fmt.Errorf("TunSrc %s: use the plain IPv4 or IPv6 form", m.TunSrc)
		default:
			out = append(out, nxm1(of13.NXM_NX_TUN_IPV6_SRC, m.TunSrc.AsSlice(), nil))
		}
	}
	for reg := 0; reg < 16; reg++ {
		r, ok := m.Regs[reg]
		if !ok {
			continue
		}
		v, mask := masked32(r)
		out = append(out, nxm1(uint8(of13.NXM_NX_REG0+reg), v, mask))
	}
	for reg := range m.Regs {
		if reg < 0 || reg > 15 {
			return nil, fmt.Errorf("register reg%d does not exist (reg0-reg15)", reg)
		}
	}
	if m.ConjID != nil {
		out = append(out, nxm1(of13.NXM_NX_CONJ_ID, be32(*m.ConjID), nil))
	}
	return out, nil
}

// fieldHeader is an NXM/OXM header (class, field, length) for actions that
// name a field.
func fieldHeader(class uint16, id uint8, length uint8) *of13.MatchField {
	return &of13.MatchField{Class: class, Field: id, Length: length}
}

// encodeInstructions turns Actions into an apply-actions instruction and a
// trailing goto-table instruction.
func (f *Flow) encodeInstructions() ([]of13.Instruction, error) {
	acts, gotoTable, err := f.encodeActionList()
	if err != nil {
		return nil, err
	}
	var out []of13.Instruction
	if len(acts) > 0 {
		apply := of13.NewInstrApplyActions()
		for _, a := range acts {
			_ = apply.AddAction(a, false)
		}
		out = append(out, apply)
	}
	if gotoTable != nil {
		out = append(out, gotoTable)
	}
	return out, nil
}

// encodeActions encodes Actions without GotoTable (a group bucket's).
func (f *Flow) encodeActions() ([]of13.Action, error) {
	acts, gotoTable, err := f.encodeActionList()
	if err == nil && gotoTable != nil {
		err = errors.New("GotoTable outside a flow")
	}
	return acts, err
}

// encodeActionList encodes Actions, all but a final GotoTable, which it
// returns as an instruction.
func (f *Flow) encodeActionList() ([]of13.Action, *of13.InstrGotoTable, error) {
	var acts []of13.Action
	add := func(a of13.Action) { acts = append(acts, a) }
	var gotoTable *of13.InstrGotoTable
	hasConj, hasOther := false, false
	for i, a := range f.Actions {
		if gotoTable != nil {
			return nil, nil, fmt.Errorf("action %d (%T) follows GotoTable; GotoTable must be last", i, a)
		}
		if _, ok := a.(Conjunction); ok {
			hasConj = true
		} else {
			hasOther = true
		}
		switch a := a.(type) {
		case Output:
			if a.Port == 0 || (a.Port > 0xffffff00 && a.Port != PortLocal && a.Port != PortInPort && a.Port != PortController) {
				return nil, nil, fmt.Errorf("Output to invalid port %d", a.Port)
			}
			out := of13.NewActionOutput(a.Port)
			if a.Port == PortController {
				out.MaxLen = 0xffff
			}
			add(out)
		case Controller:
			out := of13.NewActionOutput(PortController)
			out.MaxLen = a.MaxLen
			if a.MaxLen == 0 {
				out.MaxLen = 0xffff
			}
			add(out)
		case Normal:
			add(of13.NewActionOutput(PortNormal))
		case SetEthDst:
			if len(a.MAC) != 6 {
				return nil, nil, fmt.Errorf("SetEthDst: invalid MAC %v", a.MAC)
			}
			add(of13.NewActionSetField(*of13.NewEthDstField(a.MAC, nil)))
		case SetField:
			sf, err := f.encodeSetField(a)
			if err != nil {
				return nil, nil, err
			}
			add(sf)
		case Move:
			mv, err := f.encodeMove(a)
			if err != nil {
				return nil, nil, err
			}
			add(mv)
		case GroupAction:
			if a.ID == 0 || a.ID > maxGroupID {
				return nil, nil, fmt.Errorf("GroupAction: group ID %d out of range", a.ID)
			}
			add(of13.NewActionGroup(a.ID))
		case Learn:
			if err := f.checkLearn(a); err != nil {
				return nil, nil, err
			}
			l, err := encodeLearn(a)
			if err != nil {
				return nil, nil, err
			}
			add(l)
		case GotoTable:
			if a.Table <= f.Table {
				return nil, nil, fmt.Errorf("GotoTable %d from table %d: the pipeline only moves forward", a.Table, f.Table)
			}
			if a.Table > maxTable {
				return nil, nil, fmt.Errorf("GotoTable %d out of range", a.Table)
			}
			gotoTable = of13.NewInstrGotoTable(a.Table)
		case Resubmit:
			if a.Table > maxTable {
				return nil, nil, fmt.Errorf("Resubmit to table %d out of range", a.Table)
			}
			add(of13.NewNXActionResubmitTableAction(of13.OFPP_IN_PORT, a.Table))
		case Conjunction:
			if a.NClauses < 2 || a.NClauses > 64 || a.Clause < 1 || a.Clause > a.NClauses {
				return nil, nil, fmt.Errorf("Conjunction(%d, %d/%d): need 1 <= clause <= n_clauses, 2 <= n_clauses <= 64", a.ID, a.Clause, a.NClauses)
			}
			// On the wire the clause is 0-based.
			add(of13.NewNXActionConjunction(a.Clause-1, a.NClauses, a.ID))
		case LoadReg:
			if err := checkReg(a.Reg, a.Start, a.End); err != nil {
				return nil, nil, fmt.Errorf("LoadReg: %w", err)
			}
			nbits := a.End - a.Start + 1
			if nbits < 32 && a.Value>>nbits != 0 {
				return nil, nil, fmt.Errorf("LoadReg: value %#x does not fit in reg%d[%d..%d]", a.Value, a.Reg, a.Start, a.End)
			}
			rng := of13.NewNXRange(a.Start, a.End)
			add(of13.NewNXActionRegLoad(rng.ToOfsBits(), fieldHeader(of13.OXM_CLASS_NXM_1, uint8(of13.NXM_NX_REG0+a.Reg), 4), uint64(a.Value)))
		case CT:
			if f.Match.EthType != ethTypeIPv4 && f.Match.EthType != ethTypeIPv6 {
				// OVS: OFPBAC_MATCH_INCONSISTENT.
				return nil, nil, errors.New("CT needs the flow to match EthType IPv4 or IPv6")
			}
			ct, err := encodeCT(a, f.Match.EthType)
			if err != nil {
				return nil, nil, err
			}
			add(ct)
		case nil:
			return nil, nil, fmt.Errorf("action %d is nil", i)
		default:
			return nil, nil, fmt.Errorf("action %d: unsupported type %T", i, a)
		}
	}
	if hasConj && hasOther {
		// OVS rejects a flow that mixes conjunction with other actions.
		return nil, nil, errors.New("Conjunction actions cannot be combined with other actions")
	}
	return acts, gotoTable, nil
}

func checkReg(reg, start, end int) error {
	if reg < 0 || reg > 15 {
		return fmt.Errorf("register reg%d does not exist (reg0-reg15)", reg)
	}
	if start < 0 || end > 31 || start > end {
		return fmt.Errorf("bit range [%d..%d] invalid for a 32-bit register", start, end)
	}
	return nil
}

func encodeCT(a CT, ethType uint16) (*of13.NXActionConnTrack, error) {
	ct := of13.NewNXActionConnTrack().ZoneImm(a.Zone)
	if a.Commit {
		ct.Commit()
	}
	if a.Table != nil {
		if *a.Table > maxTable {
			return nil, fmt.Errorf("CT table %d out of range", *a.Table)
		}
		ct.Table(*a.Table)
	}
	if !a.Commit && (a.SetMark != nil || a.SetLabel != nil || len(a.LabelFromRegs) > 0) {
		return nil, errors.New("CT SetMark/SetLabel/LabelFromRegs need Commit")
	}
	if a.NAT != nil {
		nat, err := encodeNAT(*a.NAT, a.Commit, ethType)
		if err != nil {
			return nil, err
		}
		ct.AddAction(nat)
	}
	if a.SetMark != nil {
		mask := uint64(a.SetMark.Mask)
		if mask == 0 {
			mask = 0xffffffff
		}
		ct.AddAction(setFieldActions(of13.NXM_NX_CT_MARK, 4, uint64(a.SetMark.Value), mask)...)
	}
	if a.SetLabel != nil {
		mask := a.SetLabel.Mask
		if mask == 0 {
			mask = ^uint64(0)
		}
		ct.AddAction(setFieldActions(of13.NXM_NX_CT_LABEL, 16, a.SetLabel.Value, mask)...)
	}
	for _, m := range a.LabelFromRegs {
		if m.Reg < 0 || m.Reg > 15 {
			return nil, fmt.Errorf("CT LabelFromRegs: register reg%d does not exist", m.Reg)
		}
		if m.LabelStart < 0 || m.LabelStart+31 > 127 {
			return nil, fmt.Errorf("CT LabelFromRegs: ct_label bits [%d..%d] out of range", m.LabelStart, m.LabelStart+31)
		}
		ct.AddAction(of13.NewNXActionRegMove(32, 0, uint16(m.LabelStart),
			fieldHeader(of13.OXM_CLASS_NXM_1, uint8(of13.NXM_NX_REG0+m.Reg), 4),
			fieldHeader(of13.OXM_CLASS_NXM_1, of13.NXM_NX_CT_LABEL, 16)))
	}
	return ct, nil
}

// Reserved port numbers usable in Output.
const (
	PortInPort     uint32 = 0xfffffff8
	PortNormal     uint32 = 0xfffffffa
	PortController uint32 = 0xfffffffd
	PortLocal      uint32 = 0xfffffffe
)

// bitRuns splits a mask into its runs of contiguous set bits, low first.
func bitRuns(mask uint64) [][2]int {
	var runs [][2]int
	for mask != 0 {
		start := bits.TrailingZeros64(mask)
		width := bits.TrailingZeros64(^(mask >> start))
		runs = append(runs, [2]int{start, start + width - 1})
		if start+width >= 64 {
			break
		}
		mask &^= (uint64(1)<<width - 1) << start
	}
	return runs
}

// setFieldActions write value under mask into the low 64 bits of an NXM_1
// field of size bytes, as one Nicira reg_load per contiguous run of mask
// bits — the encoding ovs-ofctl chooses for OpenFlow 1.3, so String's
// "load:" text installs identical flows.
func setFieldActions(id uint8, size int, value, mask uint64) []of13.Action {
	var out []of13.Action
	for _, r := range bitRuns(mask) {
		width := r[1] - r[0] + 1
		v := value >> r[0]
		if width < 64 {
			v &= uint64(1)<<width - 1
		}
		out = append(out, of13.NewNXActionRegLoad(of13.NewNXRange(r[0], r[1]).ToOfsBits(),
			fieldHeader(of13.OXM_CLASS_NXM_1, id, uint8(size)), v))
	}
	return out
}
