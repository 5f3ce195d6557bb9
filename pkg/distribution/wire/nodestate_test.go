package wire

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

func member(name, node, ip string) model.GroupMember {
	return model.GroupMember{Pod: &model.PodRef{Namespace: "ns", Name: name}, Node: node, IPs: []netip.Addr{netip.MustParseAddr(ip)}}
}

func TestDiffAndPatchMembers(t *testing.T) {
	old := []model.GroupMember{member("a", "n1", "10.0.0.1"), member("b", "n2", "10.0.0.2"), member("c", "n3", "10.0.0.3")}
	// b changes IP, c goes, d comes.
	new := []model.GroupMember{member("d", "n1", "10.0.0.4"), member("b", "n2", "10.0.0.22"), member("a", "n1", "10.0.0.1")}
	up, rm := DiffMembers(old, new)
	if len(up) != 2 || len(rm) != 1 || rm[0] != "pod/ns/c" {
		t.Fatalf("diff: upserted %v removed %v", up, rm)
	}
	st := NewNodeState("n1")
	g := &model.AddressGroup{Meta: model.Meta{ID: "g", Generation: 1}, Members: old}
	if _, err := st.Apply(&Update{Version: 1, Full: true, AddressGroups: []*model.AddressGroup{AddressGroupForNode(g)}}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Apply(&Update{Version: 2, AddressGroupPatches: []AddressGroupPatch{{ID: "g", Upserted: up, Removed: rm}}})
	if err != nil {
		t.Fatal(err)
	}
	want := AddressGroupForNode(&model.AddressGroup{Meta: model.Meta{ID: "g", Generation: 2}, Members: new})
	if !MembersEqual(st.AddressGroups["g"].Members, want.Members) {
		t.Fatalf("patched group %+v, want %+v", st.AddressGroups["g"], want)
	}
	if len(d.AddressGroups) != 1 || d.AddressGroups[0] != st.AddressGroups["g"] {
		t.Fatalf("delta does not carry the patched group: %+v", d)
	}
}

func TestApplyRejectsPatchOfUnknownGroupWithoutChanging(t *testing.T) {
	st := NewNodeState("n1")
	p := &model.Policy{Meta: model.Meta{ID: "p", Generation: 1}}
	_, err := st.Apply(&Update{Version: 1, Policies: []*model.Policy{p}, AddressGroupPatches: []AddressGroupPatch{{ID: "nope"}}})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err = %v", err)
	}
	if len(st.Policies) != 0 {
		t.Fatal("a rejected update changed the state")
	}
	if _, err := st.Apply(&Update{Version: 1, Full: true, DeletedPolicies: []string{"x"}}); err == nil {
		t.Fatal("full update with deletes accepted")
	}
}

func TestForNodeFiltersSpanAndMembers(t *testing.T) {
	snap := &model.Snapshot{
		Policies: []*model.Policy{
			{Meta: model.Meta{ID: "p1", Generation: 1, Span: []string{"n1", "n2"}}, AppliedToGroups: []string{"g1"},
				Rules: []model.Rule{{Peer: model.Peer{AddressGroups: []string{"ag1"}}}}},
			{Meta: model.Meta{ID: "p2", Generation: 1, Span: []string{"n2"}}, AppliedToGroups: []string{"g2"},
				Rules: []model.Rule{{Peer: model.Peer{AddressGroups: []string{"ag2"}}}}},
		},
		AppliedToGroups: map[string]*model.AppliedToGroup{
			"g1": {Meta: model.Meta{ID: "g1", Generation: 7, Span: []string{"n1", "n2"}}, MembersByNode: model.MembersByNodeOf(map[string][]model.GroupMember{
				"n1": {member("a", "n1", "10.0.0.1")}, "n2": {member("b", "n2", "10.0.0.2")}})},
			"g2": {Meta: model.Meta{ID: "g2", Span: []string{"n2"}}, MembersByNode: model.MembersByNode{{Node: "n2", Members: []model.GroupMember{member("c", "n2", "10.0.0.3")}}}},
		},
		AddressGroups: map[string]*model.AddressGroup{
			"ag1": {Meta: model.Meta{ID: "ag1", Span: []string{"n1", "n2"}}, Members: []model.GroupMember{member("z", "n9", "10.9.0.1")}},
			"ag2": {Meta: model.Meta{ID: "ag2", Span: []string{"n2"}}},
		},
	}
	st := ForNode(snap, "n1")
	if len(st.Policies) != 1 || st.Policies["p1"] == nil || st.Policies["p1"].Span != nil {
		t.Fatalf("policies %v", st.Policies)
	}
	g := st.AppliedToGroups["g1"]
	if len(st.AppliedToGroups) != 1 || len(g.MembersByNode) != 1 || g.MembersByNode.Get("n1")[0].Pod.Name != "a" || g.Generation != 0 {
		t.Fatalf("applied-to groups %+v", st.AppliedToGroups)
	}
	if len(st.AddressGroups) != 1 || len(st.AddressGroups["ag1"].Members) != 1 {
		t.Fatalf("address groups %+v", st.AddressGroups)
	}
	// The snapshot's objects are untouched.
	if snap.Policies[0].Span == nil || len(snap.AppliedToGroups["g1"].MembersByNode) != 2 {
		t.Fatal("ForNode modified the snapshot")
	}
}

// TestApplyDeltaNamesOnlyRealChanges: the delta of an update deletes only
// what is there after its upserts, each object once, and a full update
// holds an object listed twice as the last one listed; the state is the
// delta applied.
func TestApplyDeltaNamesOnlyRealChanges(t *testing.T) {
	pol := func(id string, gen int64) *model.Policy {
		return &model.Policy{Meta: model.Meta{ID: id, Generation: gen}}
	}
	st := NewNodeState("n1")
	d, err := st.Apply(&Update{Version: 1, Full: true, Policies: []*model.Policy{pol("p1", 1), pol("p1", 2), pol("p9", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Policies) != 2 || st.Policies["p1"].Generation != 2 {
		t.Fatalf("full delta %+v, state p1 %+v", d.Policies, st.Policies["p1"])
	}
	d, err = st.Apply(&Update{Version: 2, Policies: []*model.Policy{pol("p2", 1)}, DeletedPolicies: []string{"p1", "p2", "p3", "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.DeletedPolicies, ",") != "p1,p2" {
		t.Fatalf("deleted %v, want p1,p2", d.DeletedPolicies)
	}
	if len(st.Policies) != 1 || st.Policies["p9"] == nil {
		t.Fatalf("state %v, want p9 only", st.Policies)
	}
	replayed := NewNodeState("n1")
	replayed.ApplyDelta(&Delta{Full: true, Policies: []*model.Policy{pol("p1", 2), pol("p9", 1)}})
	replayed.ApplyDelta(d)
	if diff := Diff(st, replayed); len(diff) > 0 {
		t.Fatalf("state and its deltas differ: %v", diff)
	}
}
