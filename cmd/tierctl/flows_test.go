package main

import (
	"net/netip"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// TestMatchesNothing: `tierctl flows --check` reports a rule without action
// flows as "noMatch" (not "missing") exactly when the agent's compiler
// emits none for it: no peer address, or named ports resolving nowhere.
func TestMatchesNothing(t *testing.T) {
	web := model.NamedPort{Name: "web", Protocol: model.ProtocolTCP, Port: 8080}
	local := model.PodRef{Namespace: "ns", Name: "local"}
	remote := model.PodRef{Namespace: "ns", Name: "remote"}
	snap := &model.Snapshot{
		AppliedToGroups: map[string]*model.AppliedToGroup{
			"at-web":   {MembersByNode: map[string][]model.GroupMember{"n1": {{Pod: &local, Node: "n1", Ports: []model.NamedPort{web}}}}},
			"at-plain": {MembersByNode: map[string][]model.GroupMember{"n1": {{Pod: &local, Node: "n1"}}}},
		},
		AddressGroups: map[string]*model.AddressGroup{
			"empty":     {},
			"web-pods":  {Members: []model.GroupMember{{Pod: &remote, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.5")}, Ports: []model.NamedPort{web}}}},
			"plain":     {Members: []model.GroupMember{{Pod: &remote, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.6")}}}},
			"np-inside": {Members: []model.GroupMember{{Pod: &remote, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.5")}, Ports: []model.NamedPort{web}}}},
		},
	}
	localPods := map[model.PodRef]bool{local: true}
	block := func(cidr string, except ...string) model.IPBlock {
		b := model.IPBlock{CIDR: netip.MustParsePrefix(cidr)}
		for _, x := range except {
			b.Except = append(b.Except, netip.MustParsePrefix(x))
		}
		return b
	}
	named := []model.Port{{Name: "web"}}
	cases := []struct {
		name      string
		appliedTo string
		rule      model.Rule
		nothing   bool
	}{
		{"no peer address", "at-web", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{"empty"}}}, true},
		{"ipBlock peer", "at-web", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{IPBlocks: []model.IPBlock{block("0.0.0.0/0")}}}, false},
		{"numeric port", "at-plain", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{"plain"}}, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: 80}}}, false},
		{"ingress named port on a local applied-to pod", "at-web", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{"plain"}}, Ports: named}, false},
		{"ingress named port on no local pod", "at-plain", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{"plain"}}, Ports: named}, true},
		{"ingress named port, other protocol", "at-web", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{"plain"}}, Ports: []model.Port{{Name: "web", Protocol: model.ProtocolUDP}}}, true},
		{"egress named port on a destination pod", "at-plain", model.Rule{Direction: model.DirectionOut, Peer: model.Peer{AddressGroups: []string{"web-pods"}}, Ports: named}, false},
		{"egress named port on no destination pod", "at-web", model.Rule{Direction: model.DirectionOut, Peer: model.Peer{AddressGroups: []string{"plain"}}, Ports: named}, true},
		{"egress named port through an ipBlock", "at-plain", model.Rule{Direction: model.DirectionOut, Peer: model.Peer{IPBlocks: []model.IPBlock{block("10.0.0.0/16")}}, Ports: named, NamedPortGroups: []string{"np-inside"}}, false},
		{"egress named port, pod in the except", "at-plain", model.Rule{Direction: model.DirectionOut, Peer: model.Peer{IPBlocks: []model.IPBlock{block("10.0.0.0/16", "10.0.2.0/24")}}, Ports: named, NamedPortGroups: []string{"np-inside"}}, true},
		{"egress named port, ipBlock without named-port groups", "at-plain", model.Rule{Direction: model.DirectionOut, Peer: model.Peer{IPBlocks: []model.IPBlock{block("10.0.0.0/16")}}, Ports: named}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &model.Policy{AppliedToGroups: []string{tc.appliedTo}, Rules: []model.Rule{tc.rule}}
			why := matchesNothing(snap, p, tc.rule, "n1", localPods)
			if (why != "") != tc.nothing {
				t.Errorf("matchesNothing = %q, want nothing=%v", why, tc.nothing)
			}
		})
	}
}
