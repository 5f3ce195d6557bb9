package main

import (
	"net/netip"
	"strings"
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

// TestConfineToBridge: a cross-node trace whose allowed packet a fabric
// floods into every node bridge is judged on the source bridge alone (the
// last pass belongs to a flooded copy dropped elsewhere).
func TestConfineToBridge(t *testing.T) {
	out := `Flow: tcp,in_port=3,nw_src=10.244.1.3,nw_dst=10.244.2.3,tp_dst=80

bridge("n1")
------------
 0. in_port=3, priority 200, cookie 0x100000000000000
    goto_table:1
 9. ip, priority 10, cookie 0x100000000000000
    output:1

bridge("fabric")
----------------
 0. priority 0
    NORMAL

bridge("n3")
------------
 0. in_port=1, priority 200, cookie 0x100000000000000
    goto_table:1
 9. ip, priority 5, cookie 0x100000000000000
    drop

Final flow: unchanged
Datapath actions: ct(zone=101),recirc(0x2)

===============================================================================
recirc(0x2) - resume conntrack with ct_state=new|trk
===============================================================================

 15. priority 0, cookie 0x100000000000000
    drop

Final flow: unchanged
Datapath actions: drop
`
	tr := readTrace(out, map[string]*agentView{})
	if tr.Verdict != "Dropped" {
		t.Fatalf("raw verdict %q: the test input no longer shows the flooded-copy problem", tr.Verdict)
	}
	confineToBridge(tr, "n1")
	if tr.Verdict != "Allow" {
		t.Errorf("verdict %q, want Allow (the packet left n1 by its uplink)", tr.Verdict)
	}
	for _, s := range tr.Steps {
		if s.Bridge != "n1" {
			t.Errorf("step on %s kept", s.Bridge)
		}
	}

	local := readTrace(out[:strings.Index(out, `bridge("fabric")`)]+"Datapath actions: drop\n", map[string]*agentView{})
	confineToBridge(local, "n1")
	if local.Verdict != "Dropped" {
		t.Errorf("a trace that never left n1 keeps its verdict, got %q", local.Verdict)
	}
}
