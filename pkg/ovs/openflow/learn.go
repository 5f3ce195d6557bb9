package openflow

import (
	"errors"
	"fmt"
	"strconv"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// Learn adds (or refreshes) a flow from the packet at hand (Nicira learn):
// tierflow learns a client's chosen endpoint for session affinity. The
// learned flow lives in Table at Priority with Cookie, expires after
// IdleTimeout seconds without a packet (HardTimeout: after that many
// seconds whatever; 0: never), and
//
//   - matches EthType and IPProto (values) and, copied from the packet,
//     its IP source (MatchIPSrc), IP destination (MatchIPDst) and L4
//     destination port (MatchL4Dst, tcp/udp/sctp by IPProto);
//   - copies the packet's registers CopyRegs (whole) into the same
//     registers, then loads LoadRegs (values).
//
// The flow holding the learn action must match EthType and IPProto too
// (OVS reads the copied fields from the packet).
type Learn struct {
	Table       uint8
	Priority    uint16
	IdleTimeout uint16
	HardTimeout uint16
	Cookie      uint64

	EthType                            uint16
	IPProto                            uint8
	MatchIPSrc, MatchIPDst, MatchL4Dst bool

	CopyRegs []int
	LoadRegs []LoadReg
}

func (Learn) isAction() {}

// learnFields are the NXM names and headers of the fields a learned flow
// copies from the packet.
type learnField struct {
	name  string
	class uint16
	id    uint8
	bytes uint8
}

func (a Learn) matchFields() ([]learnField, error) {
	var out []learnField
	v4 := a.EthType == ethTypeIPv4
	if a.EthType != ethTypeIPv4 && a.EthType != ethTypeIPv6 {
		return nil, fmt.Errorf("Learn: EthType %#04x: want IPv4 or IPv6", a.EthType)
	}
	if a.MatchIPSrc {
		if v4 {
			out = append(out, learnField{"NXM_OF_IP_SRC", of13.OXM_CLASS_NXM_0, 7, 4})
		} else {
			out = append(out, learnField{"NXM_NX_IPV6_SRC", of13.OXM_CLASS_NXM_1, of13.NXM_NX_IPV6_SRC, 16})
		}
	}
	if a.MatchIPDst {
		if v4 {
			out = append(out, learnField{"NXM_OF_IP_DST", of13.OXM_CLASS_NXM_0, 8, 4})
		} else {
			out = append(out, learnField{"NXM_NX_IPV6_DST", of13.OXM_CLASS_NXM_1, of13.NXM_NX_IPV6_DST, 16})
		}
	}
	if a.MatchL4Dst {
		switch a.IPProto {
		case protoTCP:
			out = append(out, learnField{"NXM_OF_TCP_DST", of13.OXM_CLASS_NXM_0, 10, 2})
		case protoUDP:
			out = append(out, learnField{"NXM_OF_UDP_DST", of13.OXM_CLASS_NXM_0, 12, 2})
		case protoSCTP:
			out = append(out, learnField{"OXM_OF_SCTP_DST", of13.OXM_CLASS_OPENFLOW_BASIC, of13.OXM_FIELD_SCTP_DST, 2})
		default:
			return nil, fmt.Errorf("Learn: MatchL4Dst needs IPProto TCP, UDP or SCTP, have %d", a.IPProto)
		}
	}
	return out, nil
}

// checkLearn validates a against the flow holding it.
func (f *Flow) checkLearn(a Learn) error {
	if a.Table > maxTable {
		return fmt.Errorf("Learn: table %d out of range", a.Table)
	}
	if f.Match.EthType != a.EthType || (a.IPProto != 0 && f.Match.IPProto != a.IPProto) {
		return errors.New("Learn: the flow must match the learned EthType and IPProto (the copied fields come from the packet)")
	}
	for _, r := range a.CopyRegs {
		if err := checkReg(r, 0, 31); err != nil {
			return fmt.Errorf("Learn: %w", err)
		}
	}
	for _, l := range a.LoadRegs {
		if err := checkReg(l.Reg, l.Start, l.End); err != nil {
			return fmt.Errorf("Learn: %w", err)
		}
		if n := l.End - l.Start + 1; n < 32 && l.Value>>n != 0 {
			return fmt.Errorf("Learn: value %#x does not fit in reg%d[%d..%d]", l.Value, l.Reg, l.Start, l.End)
		}
	}
	_, err := a.matchFields()
	return err
}

func encodeLearn(a Learn) (*of13.NXActionLearn, error) {
	match, err := a.matchFields()
	if err != nil {
		return nil, err
	}
	l := of13.NewNXActionLearn()
	l.TableID = a.Table
	l.Priority = a.Priority
	l.IdleTimeout = a.IdleTimeout
	l.HardTimeout = a.HardTimeout
	l.Cookie = a.Cookie
	immediate := func(class uint16, id uint8, bytes uint8, nbits uint16, value []byte) *of13.NXLearnSpec {
		return &of13.NXLearnSpec{Header: of13.NewLearnHeaderMatchFromValue(nbits), SrcValue: value,
			DstField: &of13.NXLearnSpecField{Field: fieldHeader(class, id, bytes)}}
	}
	// eth_type and nw_proto as immediate matches, as ovs-ofctl writes
	// "eth_type=0x800,nw_proto=6".
	l.LearnSpecs = append(l.LearnSpecs, immediate(of13.OXM_CLASS_NXM_0, 3, 2, 16, be16(a.EthType)))
	if a.IPProto != 0 {
		l.LearnSpecs = append(l.LearnSpecs, immediate(of13.OXM_CLASS_NXM_0, 6, 1, 8, []byte{0, a.IPProto}))
	}
	for _, m := range match {
		fh := fieldHeader(m.class, m.id, m.bytes)
		l.LearnSpecs = append(l.LearnSpecs, &of13.NXLearnSpec{Header: of13.NewLearnHeaderMatchFromField(uint16(8 * m.bytes)),
			SrcField: &of13.NXLearnSpecField{Field: fh}, DstField: &of13.NXLearnSpecField{Field: fh}})
	}
	for _, r := range a.CopyRegs {
		fh := fieldHeader(of13.OXM_CLASS_NXM_1, uint8(of13.NXM_NX_REG0+r), 4)
		l.LearnSpecs = append(l.LearnSpecs, &of13.NXLearnSpec{Header: of13.NewLearnHeaderLoadFromField(32),
			SrcField: &of13.NXLearnSpecField{Field: fh}, DstField: &of13.NXLearnSpecField{Field: fh}})
	}
	for _, ld := range a.LoadRegs {
		nbits := uint16(ld.End - ld.Start + 1)
		// The value is right-aligned in whole 16-bit units.
		width := 2 * ((nbits + 15) / 16)
		value := make([]byte, width)
		v := uint64(ld.Value)
		for i := int(width) - 1; i >= 0; i-- {
			value[i] = byte(v)
			v >>= 8
		}
		fh := fieldHeader(of13.OXM_CLASS_NXM_1, uint8(of13.NXM_NX_REG0+ld.Reg), 4)
		l.LearnSpecs = append(l.LearnSpecs, &of13.NXLearnSpec{Header: of13.NewLearnHeaderLoadFromValue(nbits), SrcValue: value,
			DstField: &of13.NXLearnSpecField{Field: fh, Ofs: uint16(ld.Start)}})
	}
	return l, nil
}

// appendLearnText renders learn(...) as ovs-ofctl reads it.
func appendLearnText(b []byte, a Learn) []byte {
	b = append(b, "learn(table="...)
	b = strconv.AppendUint(b, uint64(a.Table), 10)
	if a.IdleTimeout != 0 {
		b = append(b, ",idle_timeout="...)
		b = strconv.AppendUint(b, uint64(a.IdleTimeout), 10)
	}
	if a.HardTimeout != 0 {
		b = append(b, ",hard_timeout="...)
		b = strconv.AppendUint(b, uint64(a.HardTimeout), 10)
	}
	b = append(b, ",priority="...)
	b = strconv.AppendUint(b, uint64(a.Priority), 10)
	if a.Cookie != 0 {
		b = append(b, ",cookie="...)
		b = appendHex(b, a.Cookie)
	}
	b = append(b, ",eth_type="...)
	b = appendHex(b, uint64(a.EthType))
	if a.IPProto != 0 {
		b = append(b, ",nw_proto="...)
		b = strconv.AppendUint(b, uint64(a.IPProto), 10)
	}
	match, _ := a.matchFields()
	for _, m := range match {
		b = append(b, ',')
		b = append(b, m.name...)
		b = append(b, "[]"...)
	}
	for _, r := range a.CopyRegs {
		b = append(b, ",load:NXM_NX_REG"...)
		b = strconv.AppendInt(b, int64(r), 10)
		b = append(b, "[]->NXM_NX_REG"...)
		b = strconv.AppendInt(b, int64(r), 10)
		b = append(b, "[]"...)
	}
	for _, l := range a.LoadRegs {
		b = append(b, ",load:"...)
		b = appendHex(b, uint64(l.Value))
		b = append(b, "->NXM_NX_REG"...)
		b = strconv.AppendInt(b, int64(l.Reg), 10)
		b = appendBits(b, l.Start, l.End)
	}
	return append(b, ')')
}
