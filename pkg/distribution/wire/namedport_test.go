package wire

import (
	"slices"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// A rule's NamedPortGroups reach the nodes of its policy's span, like its
// peer groups.
func TestForNodeSendsNamedPortGroups(t *testing.T) {
	p := &model.Policy{Meta: model.Meta{ID: "p", Span: []string{"n1"}}, Rules: []model.Rule{{
		Direction: model.DirectionOut, Action: model.ActionAllow,
		Peer:            model.Peer{AddressGroups: []string{"peer"}},
		NamedPortGroups: []string{"named", "peer"},
	}}}
	snap := &model.Snapshot{
		Policies:        []*model.Policy{p},
		AppliedToGroups: map[string]*model.AppliedToGroup{},
		AddressGroups: map[string]*model.AddressGroup{
			"peer":  {Meta: model.Meta{ID: "peer", Span: []string{"n1"}}, Members: []model.GroupMember{member("a", "n2", "10.0.0.1")}},
			"named": {Meta: model.Meta{ID: "named", Span: []string{"n1"}}, Members: []model.GroupMember{member("b", "n2", "10.0.0.2")}},
		},
	}
	if got := AddressGroupRefs(p); !slices.Equal(got, []string{"peer", "named"}) {
		t.Errorf("AddressGroupRefs = %v", got)
	}
	st := ForNode(snap, "n1")
	if st.AddressGroups["named"] == nil || st.AddressGroups["peer"] == nil {
		t.Errorf("n1 lacks a group: %v", st.AddressGroups)
	}
	if st := ForNode(snap, "n2"); len(st.AddressGroups) != 0 {
		t.Errorf("n2 is outside the span but got %v", st.AddressGroups)
	}
}
