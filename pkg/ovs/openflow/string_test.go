package openflow

import (
	"bytes"
	"math/rand"
	"net"
	"net/netip"
	"strconv"
	"testing"
)

// The real-OVS round trip of this syntax (ovs-ofctl --bundle add-flows of
// String against the client's flow-mods, and a golden dump) is
// TestRoundTripEveryFieldAndAction; these tests pin the text itself and
// Key's identity without a switch.

func TestStringKeyAndActionsText(t *testing.T) {
	tbl := uint8(3)
	f := Flow{Table: 15, Priority: 200, Cookie: 0x0103000000000007,
		Match: Match{EthType: 0x86dd, IPSrc: netip.MustParsePrefix("fd00::1/64"), IPProto: 6, L4Dst: &Masked{Value: 8080, Mask: 0xfff0},
			Regs: map[int]Masked{1: {Value: 2, Mask: 0xffffffff}, 0: {Value: 0x20, Mask: 0x20}}, CtState: &Masked{Value: 0x21, Mask: 0x31}},
		Actions: []Action{
			CT{Commit: true, Zone: 7, Table: &tbl, SetMark: &Masked{Value: 0, Mask: 1}, LabelFromRegs: []RegToLabel{{Reg: 2, LabelStart: 32}}},
			LoadReg{Reg: 3, Start: 0, End: 31, Value: 9}, GotoTable{Table: 16},
		}}
	wantKey := "table=15, priority=200,eth_type=0x86dd,ipv6_src=fd00::/64,ip_proto=6,tcp_dst=0x1f90/0xfff0,ct_state=+new-inv+trk,reg0=0x20/0x20,reg1=0x2"
	if got := f.Key(); got != wantKey {
		t.Errorf("Key:\n got %s\nwant %s", got, wantKey)
	}
	wantActions := "ct(commit,zone=7,table=3,exec(load:0x0->NXM_NX_CT_MARK[0..0],move:NXM_NX_REG2[]->NXM_NX_CT_LABEL[32..63])),load:0x9->NXM_NX_REG3[0..31],goto_table:16"
	if got := ActionsString(f.Actions); got != wantActions {
		t.Errorf("ActionsString:\n got %s\nwant %s", got, wantActions)
	}
	if got, want := f.String(), "cookie=0x103000000000007, "+wantKey+" actions="+wantActions; got != want {
		t.Errorf("String:\n got %s\nwant %s", got, want)
	}
	if got, want := f.Match.String(), wantKey[len("table=15, priority=200,"):]; got != want {
		t.Errorf("Match.String:\n got %s\nwant %s", got, want)
	}
	empty := Flow{Table: 20}
	if got, want := empty.String(), "cookie=0x0, table=20, priority=0 actions=drop"; got != want {
		t.Errorf("empty flow: got %q, want %q", got, want)
	}
	if got, want := empty.Key(), "table=20, priority=0"; got != want {
		t.Errorf("empty flow key: got %q, want %q", got, want)
	}
	if got := (Match{}).String(); got != "" {
		t.Errorf("empty match renders as %q", got)
	}
	other := Flow{Match: Match{InPort: PortLocal, EthType: 0x0806, ArpOp: 2, ArpSha: net.HardwareAddr{0x0a, 0, 0, 0, 0xab, 0x1}},
		Actions: []Action{Output{Port: PortController}, Output{Port: 7}, Normal{}, Resubmit{Table: 4}, Conjunction{ID: 9, Clause: 2, NClauses: 3}, nil}}
	if got, want := other.String(), "cookie=0x0, table=0, priority=0,in_port=LOCAL,eth_type=0x0806,arp_op=2,arp_sha=0a:00:00:00:ab:01 actions=controller,output:7,NORMAL,resubmit(,4),conjunction(9,2/3),<nil action>"; got != want {
		t.Errorf("String:\n got %s\nwant %s", got, want)
	}
}

// TestKeyIsMatchIdentity: over many random flows drawn from small value
// sets (so that equal and equivalent matches are frequent), two valid flows
// have the same Key exactly when they have the same table and priority and
// their matches encode to the same OXM/NXM fields — the identity the switch
// uses for strict modify and delete.
func TestKeyIsMatchIdentity(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	byKey := map[string]string{}
	byWire := map[string]string{}
	valid, sameKey := 0, 0
	for i := 0; i < 60000; i++ {
		f := randomFlow(rng)
		fields, err := f.encodeMatch()
		if err != nil {
			continue
		}
		valid++
		var wire bytes.Buffer
		wire.WriteString(strconv.Itoa(int(f.Table)) + "/" + strconv.Itoa(int(f.Priority)) + "/")
		for _, mf := range fields {
			data, err := mf.MarshalBinary()
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			wire.Write(data)
		}
		k, w := f.Key(), wire.String()
		if prev, ok := byKey[k]; ok {
			sameKey++
			if prev != w {
				t.Fatalf("two flows with different matches share the key %s", k)
			}
		}
		if prev, ok := byWire[w]; ok && prev != k {
			t.Fatalf("one match has two keys: %s and %s", prev, k)
		}
		byKey[k], byWire[w] = w, k
	}
	// The generator must exercise both directions.
	if valid < 20000 || sameKey < 1000 || len(byKey) < 5000 {
		t.Fatalf("weak sample: %d valid flows, %d repeated keys, %d distinct keys", valid, sameKey, len(byKey))
	}
	t.Logf("%d valid flows, %d distinct keys, %d repeated", valid, len(byKey), sameKey)
}

// TestKeyChangesWithEveryField: changing the table, the priority or any
// single match field of a flow changes its key.
func TestKeyChangesWithEveryField(t *testing.T) {
	base := func() Flow {
		return Flow{Table: 10, Priority: 100, Match: Match{InPort: 1, EthType: 0x0800, IPSrc: netip.MustParsePrefix("10.0.0.0/24"),
			IPDst: netip.MustParsePrefix("10.0.1.1/32"), IPProto: 6, L4Dst: &Masked{Value: 80},
			CtState: &Masked{Value: CtTrk | CtNew, Mask: CtTrk | CtNew}, CtZone: ptr(uint16(1)), CtMark: &Masked{Value: 1},
			Regs: map[int]Masked{0: {Value: 1}, 3: {Value: 0x10, Mask: 0xf0}}, ConjID: ptr(uint32(5))}}
	}
	mac := net.HardwareAddr{0x0a, 0, 0, 0, 0, 1}
	changes := map[string]func(f *Flow){
		"table":           func(f *Flow) { f.Table = 11 },
		"priority":        func(f *Flow) { f.Priority = 101 },
		"in_port":         func(f *Flow) { f.Match.InPort = 2 },
		"in_port absent":  func(f *Flow) { f.Match.InPort = 0 },
		"dl_src":          func(f *Flow) { f.Match.EthSrc = mac },
		"dl_dst":          func(f *Flow) { f.Match.EthDst = mac },
		"eth_type":        func(f *Flow) { f.Match.EthType = 0x86dd },
		"nw_src":          func(f *Flow) { f.Match.IPSrc = netip.MustParsePrefix("10.0.0.0/25") },
		"nw_src absent":   func(f *Flow) { f.Match.IPSrc = netip.Prefix{} },
		"nw_dst":          func(f *Flow) { f.Match.IPDst = netip.MustParsePrefix("10.0.1.2/32") },
		"ip_proto":        func(f *Flow) { f.Match.IPProto = 17 },
		"tcp_dst":         func(f *Flow) { f.Match.L4Dst = &Masked{Value: 81} },
		"tcp_dst mask":    func(f *Flow) { f.Match.L4Dst = &Masked{Value: 80, Mask: 0xfff0} },
		"tcp_dst absent":  func(f *Flow) { f.Match.L4Dst = nil },
		"icmp_type":       func(f *Flow) { f.Match.ICMPType = ptr(uint8(8)) },
		"icmp_code":       func(f *Flow) { f.Match.ICMPCode = ptr(uint8(0)) },
		"nd_target":       func(f *Flow) { f.Match.NDTarget = netip.MustParsePrefix("fd00::1/128") },
		"nd_sll":          func(f *Flow) { f.Match.NDSll = mac },
		"nd_tll":          func(f *Flow) { f.Match.NDTll = mac },
		"arp_op":          func(f *Flow) { f.Match.ArpOp = 1 },
		"arp_spa":         func(f *Flow) { f.Match.ArpSpa = netip.MustParseAddr("10.0.0.1") },
		"arp_tpa":         func(f *Flow) { f.Match.ArpTpa = netip.MustParseAddr("10.0.0.1") },
		"arp_sha":         func(f *Flow) { f.Match.ArpSha = mac },
		"ct_state":        func(f *Flow) { f.Match.CtState = &Masked{Value: CtTrk, Mask: CtTrk | CtNew} },
		"ct_state mask":   func(f *Flow) { f.Match.CtState = &Masked{Value: CtTrk | CtNew} },
		"ct_zone":         func(f *Flow) { f.Match.CtZone = ptr(uint16(2)) },
		"ct_mark":         func(f *Flow) { f.Match.CtMark = &Masked{Value: 1, Mask: 1} },
		"reg0":            func(f *Flow) { f.Match.Regs[0] = Masked{Value: 2} },
		"reg3 mask":       func(f *Flow) { f.Match.Regs[3] = Masked{Value: 0x10, Mask: 0x1f0} },
		"reg added":       func(f *Flow) { f.Match.Regs[15] = Masked{Value: 0} },
		"reg removed":     func(f *Flow) { delete(f.Match.Regs, 3) },
		"reg renumbered":  func(f *Flow) { f.Match.Regs[1] = f.Match.Regs[0]; delete(f.Match.Regs, 0) },
		"conj_id":         func(f *Flow) { f.Match.ConjID = ptr(uint32(6)) },
		"conj_id absent":  func(f *Flow) { f.Match.ConjID = nil },
		"ct_zone absent":  func(f *Flow) { f.Match.CtZone = nil },
		"ct_mark absent":  func(f *Flow) { f.Match.CtMark = nil },
		"ct_state absent": func(f *Flow) { f.Match.CtState = nil },
	}
	b := base()
	want := b.Key()
	for name, change := range changes {
		f := base()
		change(&f)
		if got := f.Key(); got == want {
			t.Errorf("%s: the key did not change: %s", name, got)
		}
	}
	// Cookie and actions are not part of the identity.
	f := base()
	f.Cookie, f.Actions = 0x99, []Action{GotoTable{Table: 12}}
	if f.Key() != want {
		t.Errorf("cookie or actions changed the key: %s vs %s", f.Key(), want)
	}
}

func ptr[T any](v T) *T { return &v }

// randomFlow draws a flow from small value sets, including encodings of the
// same match (zero and all-ones masks, prefixes with host bits). Fields are
// mostly drawn to fit the flow's EthType and IPProto, so that most flows are
// valid; the rest are skipped by the caller.
func randomFlow(rng *rand.Rand) Flow {
	pick := func(n int) int { return rng.Intn(n) }
	maybe := func() bool { return rng.Intn(3) == 0 }
	var f Flow
	f.Table = uint8(pick(2))
	f.Priority = uint16(pick(2))
	m := &f.Match
	if maybe() {
		m.InPort = []uint32{1, PortLocal}[pick(2)]
	}
	macs := []net.HardwareAddr{{0x0a, 0, 0, 0, 0, 1}, {0x0a, 0, 0, 0, 0, 2}}
	if maybe() {
		m.EthSrc = macs[pick(2)]
	}
	if maybe() {
		m.EthDst = macs[pick(2)]
	}
	m.EthType = []uint16{0, 0x0800, 0x86dd, 0x0806}[pick(4)]
	v4 := []string{"10.0.0.1/24", "10.0.0.0/24", "10.0.0.1/32", "0.0.0.0/0"}
	v6 := []string{"fd00::1/64", "fd00::/64", "fd00::1/128"}
	prefix := func() netip.Prefix {
		if m.EthType == 0x86dd {
			return netip.MustParsePrefix(v6[pick(len(v6))])
		}
		return netip.MustParsePrefix(v4[pick(len(v4))])
	}
	switch m.EthType {
	case 0x0800, 0x86dd:
		if maybe() {
			m.IPSrc = prefix()
		}
		if maybe() {
			m.IPDst = prefix()
		}
		if rng.Intn(2) == 0 {
			m.IPProto = []uint8{1, 6, 17, 58, 132}[pick(5)]
		}
		switch m.IPProto {
		case 6, 17, 132:
			if rng.Intn(2) == 0 {
				m.L4Dst = &[]Masked{{Value: 80}, {Value: 80, Mask: 0xffff}, {Value: 80, Mask: 0xfff0}, {Value: 0x5f, Mask: 0xfff0}}[pick(4)]
			}
		case 1, 58:
			if maybe() {
				m.ICMPType = ptr([]uint8{8, 135, 136}[pick(3)])
			}
			if maybe() {
				m.ICMPCode = ptr(uint8(pick(2)))
			}
			if m.ICMPType != nil && m.ICMPCode != nil && rng.Intn(2) == 0 {
				m.NDTarget = netip.MustParsePrefix(v6[pick(len(v6))])
				if maybe() {
					m.NDSll = macs[pick(2)]
				}
				if maybe() {
					m.NDTll = macs[pick(2)]
				}
			}
		}
	case 0x0806:
		if maybe() {
			m.ArpOp = uint16(1 + pick(2))
		}
		if maybe() {
			m.ArpSpa = netip.MustParseAddr([]string{"10.0.0.1", "10.0.0.2"}[pick(2)])
		}
		if maybe() {
			m.ArpTpa = netip.MustParseAddr([]string{"10.0.0.1", "10.0.0.2"}[pick(2)])
		}
		if maybe() {
			m.ArpSha = macs[pick(2)]
		}
	}
	if maybe() {
		m.CtState = &[]Masked{{Value: CtTrk | CtNew}, {Value: CtTrk | CtNew, Mask: ctStateBits}, {Value: CtTrk, Mask: CtTrk | CtNew},
			{Value: CtTrk, Mask: CtTrk}}[pick(4)]
	}
	if maybe() {
		m.CtZone = ptr(uint16(pick(2)))
	}
	masked := []Masked{{Value: 1}, {Value: 1, Mask: 0xffffffff}, {Value: 0x11, Mask: 0xf0}, {Value: 0x10, Mask: 0xf0}, {Value: 0x10, Mask: 0x1f0}}
	if maybe() {
		m.CtMark = &masked[pick(len(masked))]
	}
	for _, r := range []int{0, 15} {
		if maybe() {
			if m.Regs == nil {
				m.Regs = map[int]Masked{}
			}
			m.Regs[r] = masked[pick(len(masked))]
		}
	}
	if maybe() {
		m.ConjID = ptr(uint32(pick(2)))
	}
	return f
}

// BenchmarkKey: keying a typical policy flow (the agent keys every desired
// flow on every update).
func BenchmarkKey(b *testing.B) {
	f := Flow{Table: 15, Priority: 200, Match: Match{EthType: 0x0800, IPSrc: netip.MustParsePrefix("10.1.2.0/24"), IPProto: 6,
		L4Dst: &Masked{Value: 8080}, Regs: map[int]Masked{1: {Value: 7}}, CtState: &Masked{Value: CtTrk | CtNew, Mask: CtTrk | CtNew}},
		Actions: []Action{Conjunction{ID: 7, Clause: 1, NClauses: 2}}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = f.Key()
	}
}
