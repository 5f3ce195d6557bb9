package openflow_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/test/ovsenv"
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func u8(v uint8) *uint8    { return &v }
func u16(v uint16) *uint16 { return &v }
func u32(v uint32) *uint32 { return &v }

// allFeatureFlows uses every Match field and every Action at least once.
func allFeatureFlows() []openflow.Flow {
	return []openflow.Flow{
		{Table: 0, Priority: 100, Cookie: 0x1, Match: openflow.Match{
			InPort: 1, EthSrc: mac("0a:00:00:00:00:01"), EthDst: mac("0a:00:00:00:00:02"), EthType: 0x0800,
			IPSrc: netip.MustParsePrefix("10.0.0.0/24"), IPDst: netip.MustParsePrefix("10.0.1.5/32"),
			IPProto: 6, L4Dst: &openflow.Masked{Value: 80}},
			Actions: []openflow.Action{openflow.LoadReg{Reg: 1, Start: 0, End: 15, Value: 5}, openflow.GotoTable{Table: 10}}},
		{Table: 0, Priority: 101, Cookie: 0x2, Match: openflow.Match{
			EthType: 0x86dd, IPSrc: netip.MustParsePrefix("fd00::/64"), IPDst: netip.MustParsePrefix("fd00:1::7/128"),
			IPProto: 17, L4Dst: &openflow.Masked{Value: 0x1000, Mask: 0xf000}},
			Actions: []openflow.Action{openflow.Resubmit{Table: 20}, openflow.Output{Port: 2}}},
		{Table: 0, Priority: 102, Cookie: 0x3, Match: openflow.Match{
			EthType: 0x0806, ArpOp: 1, ArpSpa: netip.MustParseAddr("10.0.0.1"), ArpTpa: netip.MustParseAddr("10.0.0.2"),
			ArpSha: mac("0a:00:00:00:00:01")},
			Actions: []openflow.Action{openflow.Normal{}}},
		{Table: 0, Priority: 103, Cookie: 0x4, Match: openflow.Match{
			EthType: 0x0800, IPProto: 1, ICMPType: u8(8), ICMPCode: u8(0)},
			Actions: []openflow.Action{openflow.Output{Port: openflow.PortLocal}}},
		{Table: 0, Priority: 104, Cookie: 0x5, Match: openflow.Match{
			EthType: 0x86dd, IPProto: 58, ICMPType: u8(135), ICMPCode: u8(0),
			NDTarget: netip.MustParsePrefix("fd00::1/128"), NDSll: mac("0a:00:00:00:00:03")}},
		{Table: 0, Priority: 105, Cookie: 0x6, Match: openflow.Match{
			EthType: 0x86dd, IPProto: 58, ICMPType: u8(136), ICMPCode: u8(0),
			NDTarget: netip.MustParsePrefix("fd00:2::/64"), NDTll: mac("0a:00:00:00:00:04")},
			Actions: []openflow.Action{openflow.Output{Port: openflow.PortInPort}}},
		{Table: 0, Priority: 106, Cookie: 0x7, Match: openflow.Match{
			EthType: 0x0800,
			IPProto: 132, L4Dst: &openflow.Masked{Value: 9000}},
			Actions: []openflow.Action{openflow.Output{Port: openflow.PortController}}},
		{Table: 10, Priority: 200, Cookie: 0x8, Match: openflow.Match{
			EthType: 0x0800,
			CtState: &openflow.Masked{Value: openflow.CtTrk | openflow.CtNew, Mask: openflow.CtTrk | openflow.CtNew | openflow.CtEst},
			CtZone:  u16(5), CtMark: &openflow.Masked{Value: 0x10, Mask: 0xf0},
			Regs: map[int]openflow.Masked{0: {Value: 7}, 3: {Value: 0x100, Mask: 0xff00}}},
			Actions: []openflow.Action{openflow.CT{Commit: true, Zone: 5, Table: u8(30),
				SetMark:       &openflow.Masked{Value: 0x1, Mask: 0xff},
				SetLabel:      &openflow.LabelSet{Value: 0xabc, Mask: 0xffff},
				LabelFromRegs: []openflow.RegToLabel{{Reg: 2, LabelStart: 64}}}}},
		{Table: 10, Priority: 201, Cookie: 0x9, Match: openflow.Match{EthType: 0x0800, IPSrc: netip.MustParsePrefix("10.1.0.0/16")},
			Actions: []openflow.Action{openflow.Conjunction{ID: 11, Clause: 1, NClauses: 2}, openflow.Conjunction{ID: 12, Clause: 1, NClauses: 3}}},
		{Table: 10, Priority: 201, Cookie: 0xa, Match: openflow.Match{InPort: 3},
			Actions: []openflow.Action{openflow.Conjunction{ID: 11, Clause: 2, NClauses: 2}}},
		{Table: 10, Priority: 202, Cookie: 0xb, Match: openflow.Match{EthType: 0x0800, ConjID: u32(11)},
			Actions: []openflow.Action{openflow.CT{Zone: 1, Table: u8(20)}, openflow.GotoTable{Table: 20}}},
		{Table: 20, Priority: 0, Cookie: 0xc},
		{Table: 30, Priority: 5, Cookie: 0xd, Match: openflow.Match{EthType: 0x86dd, CtState: &openflow.Masked{Value: openflow.CtTrk}},
			Actions: []openflow.Action{openflow.LoadReg{Reg: 15, Start: 0, End: 31, Value: 0xdeadbeef},
				openflow.CT{Commit: true, Zone: 65000, SetMark: &openflow.Masked{Value: 0x0101, Mask: 0x0f0f},
					SetLabel: &openflow.LabelSet{Value: 0x5}}}},
	}
}

func dialBridge(t *testing.T, br *ovsenv.Bridge, opts openflow.Options) *openflow.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := openflow.Dial(ctx, br.MgmtEndpoint(), opts)
	if err != nil {
		t.Fatalf("dial %s: %v", br.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func withoutSentinel(flows []string) []string {
	var out []string
	for _, f := range flows {
		if strings.Contains(f, fmt.Sprintf("cookie=%#x,", openflow.SentinelCookie)) {
			continue
		}
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// TestRoundTripEveryFieldAndAction installs flows using every Match field
// and Action with the client on one bridge and their String() text with
// `ovs-ofctl --bundle add-flows` on another; OVS must hold exactly the same
// flows on both.
func TestRoundTripEveryFieldAndAction(t *testing.T) {
	env := ovsenv.Start(t)
	brA := env.AddBridge("a")
	brB := env.AddBridge("b")
	c := dialBridge(t, brA, openflow.Options{})
	flows := allFeatureFlows()
	ctx := context.Background()
	if err := c.AddFlows(ctx, flows...); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range flows {
		text.WriteString(f.String())
		text.WriteString("\n")
	}
	file := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Ofctl("--bundle", "add-flows", brB.Name, file); err != nil {
		t.Fatalf("ovs-ofctl rejected Flow.String() output: %v\n%s", err, text.String())
	}
	dumpA, err := brA.DumpFlows(-1)
	if err != nil {
		t.Fatal(err)
	}
	dumpB, err := brB.DumpFlows(-1)
	if err != nil {
		t.Fatal(err)
	}
	a, b := withoutSentinel(dumpA), withoutSentinel(dumpB)
	if len(a) != len(flows) {
		t.Errorf("client installed %d flows, want %d:\n%s", len(a), len(flows), strings.Join(a, "\n"))
	}
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("client and ovs-ofctl installed different flows\nclient:\n%s\novs-ofctl:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	t.Logf("installed:\n%s", strings.Join(a, "\n"))
}
