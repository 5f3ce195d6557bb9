package flowtext

import (
	"net/netip"
	"testing"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

func TestRender(t *testing.T) {
	tbl := uint8(3)
	f := openflow.Flow{Table: 15, Priority: 200, Cookie: 0x0103000000000007,
		Match: openflow.Match{EthType: 0x86dd, IPSrc: netip.MustParsePrefix("fd00::/64"), IPProto: 6, L4Dst: &openflow.Masked{Value: 8080, Mask: 0xfff0},
			Regs: map[int]openflow.Masked{1: {Value: 2, Mask: 0xffffffff}, 0: {Value: 0x20, Mask: 0x20}}, CtState: &openflow.Masked{Value: 0x21, Mask: 0x31}},
		Actions: []openflow.Action{
			openflow.CT{Commit: true, Zone: 7, Table: &tbl, SetMark: &openflow.Masked{Value: 0, Mask: 1}, LabelFromRegs: []openflow.RegToLabel{{Reg: 2, LabelStart: 32}}},
			openflow.LoadReg{Reg: 3, Start: 0, End: 31, Value: 9}, openflow.GotoTable{Table: 16},
		}}
	wantKey := "table=15,priority=200,reg0=0x20/0x20,reg1=0x2,ct_state=+new-inv+trk,dl_type=0x86dd,ipv6_src=fd00::/64,nw_proto=6,tcp_dst=0x1f90/0xfff0"
	if got := Key(f); got != wantKey {
		t.Errorf("Key:\n got %s\nwant %s", got, wantKey)
	}
	wantActions := "ct(commit,zone=7,table=3,exec(set_field:0x0/0x1->ct_mark,move:NXM_NX_REG2[]->NXM_NX_CT_LABEL[32..63])),load:0x9->NXM_NX_REG3[0..31],goto_table:16"
	if got := Actions(f.Actions); got != wantActions {
		t.Errorf("Actions:\n got %s\nwant %s", got, wantActions)
	}
	if got := Actions(nil); got != "drop" {
		t.Errorf("no actions render as %q", got)
	}
}
