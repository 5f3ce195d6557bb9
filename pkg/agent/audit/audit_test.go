package audit

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// TestMatchesNothing: the audit reports a rule without action flows as
// "noMatch" (not "missing") exactly when the agent's compiler emits none
// for it: no local applied-to pod, no peer address, or named ports
// resolving nowhere.
func TestMatchesNothing(t *testing.T) {
	web := model.NamedPort{Name: "web", Protocol: model.ProtocolTCP, Port: 8080}
	local := model.PodRef{Namespace: "ns", Name: "local"}
	remote := model.PodRef{Namespace: "ns", Name: "remote"}
	snap := &model.Snapshot{
		AppliedToGroups: map[string]*model.AppliedToGroup{
			"at-web":       {MembersByNode: model.MembersByNode{{Node: "n1", Members: []model.GroupMember{{Pod: &local, Node: "n1", Ports: []model.NamedPort{web}}}}}},
			"at-plain":     {MembersByNode: model.MembersByNode{{Node: "n1", Members: []model.GroupMember{{Pod: &local, Node: "n1"}}}}},
			"at-elsewhere": {MembersByNode: model.MembersByNode{{Node: "n2", Members: []model.GroupMember{{Pod: &remote, Node: "n2"}}}}},
		},
		AddressGroups: map[string]*model.AddressGroup{
			"empty":     {},
			"web-pods":  {Members: []model.GroupMember{{Pod: &remote, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.5")}, Ports: []model.NamedPort{web}}}},
			"plain":     {Members: []model.GroupMember{{Pod: &remote, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.6")}}}},
			"np-inside": {Members: []model.GroupMember{{Pod: &remote, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.5")}, Ports: []model.NamedPort{web}}}},
		},
	}
	localPods := []pipeline.LocalPod{{Pod: local, OFPort: 3, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3}, IPs: []netip.Addr{netip.MustParseAddr("10.0.1.3")}}}
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
		{"no local applied-to pod", "at-elsewhere", model.Rule{Direction: model.DirectionIn, Peer: model.Peer{IPBlocks: []model.IPBlock{block("0.0.0.0/0")}}}, true},
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
			r := tc.rule
			r.Action = model.ActionAllow
			p := &model.Policy{Meta: model.Meta{ID: "p"}, Tier: model.TierAdmin, AppliedToGroups: []string{tc.appliedTo}, Rules: []model.Rule{r}}
			why := MatchesNothing(snap, p, "n1", localPods)[ruleKey(r.Direction, r.Index)]
			if (why != "") != tc.nothing {
				t.Errorf("MatchesNothing = %q, want nothing=%v", why, tc.nothing)
			}
		})
	}
}

// TestCheck: flows the agent installed but the bridge lacks, flows the
// bridge holds that the agent did not install, a rule without action flows
// that needs some, and a policy the agent does not hold are problems; the
// OpenFlow client's sentinel is expected once, and flows the bridge
// learned (Service session affinity) are counted apart.
func TestCheck(t *testing.T) {
	pod := model.PodRef{Namespace: "ns", Name: "a"}
	deny := model.Rule{Direction: model.DirectionOut, Index: 0, Action: model.ActionDeny, Peer: model.Peer{IPBlocks: []model.IPBlock{{CIDR: netip.MustParsePrefix("10.9.0.0/16")}}}}
	p := &model.Policy{Meta: model.Meta{ID: "p1", Generation: 4, Span: []string{"n1"}}, Tier: model.TierAdmin,
		Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "deny"}, AppliedToGroups: []string{"g"}, Rules: []model.Rule{deny}}
	gone := &model.Policy{Meta: model.Meta{ID: "p2", Generation: 1, Span: []string{"n1"}}, Tier: model.TierAdmin,
		Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "gone"}, AppliedToGroups: []string{"g"}}
	snap := &model.Snapshot{Policies: []*model.Policy{p, gone},
		AppliedToGroups: map[string]*model.AppliedToGroup{"g": {MembersByNode: model.MembersByNode{{Node: "n1", Members: []model.GroupMember{{Pod: &pod, Node: "n1"}}}}}}}
	action := pipeline.Cookie(3, pipeline.RoleAction, 1)
	static := pipeline.Cookie(3, pipeline.RolePipeline, 0)
	in := Input{Node: "n1", Bridge: "br", Snapshot: snap,
		Realization: &agentquery.Realization{Policies: []agentquery.PolicyRealization{{ID: "p1", Source: p.Source, Generation: 4, Wanted: 4}}},
		Rules: &agentquery.Rules{Round: 3, Rules: []agentquery.Rule{{RuleInfo: agentquery.RuleInfo{ID: 1, Policy: p.Source, PolicyID: "p1",
			Direction: model.DirectionOut, Action: model.ActionDeny}}}},
		Installed: &agentquery.Flows{Round: 3, Flows: []agentquery.Flow{
			{TableID: 0, Priority: 0, Cookie: fmt.Sprintf("%#x", static)},
			{TableID: pipeline.EgressAdmin.ID(), Priority: 32500, Cookie: fmt.Sprintf("%#x", action)},
		}},
		Pods: &agentquery.Pods{Pods: []agentquery.Pod{{Namespace: "ns", Name: "a", OFPort: 3, MAC: "02:00:00:00:00:03", IPs: []netip.Addr{netip.MustParseAddr("10.0.1.3")}}}},
		BridgeFlows: []ovsctl.DumpedFlow{
			{Cookie: static, Table: 0, Priority: 0},
			{Cookie: static, Table: pipeline.Forwarding.ID(), Priority: 0},
			{Cookie: openflow.SentinelCookie, Table: 253},
			// Learned by the bridge (Service session affinity).
			{Cookie: pipeline.Cookie(3, pipeline.RoleAffinity, 7), Table: pipeline.ServiceAffinity.ID(), Priority: 100},
		},
	}
	rep, err := Check(in)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || !rep.Sentinel || rep.FlowsInstalled != 2 || rep.FlowsInBridge != 2 || rep.LearnedFlows != 1 {
		t.Errorf("report %+v", rep)
	}
	if len(rep.MissingFlows) != 1 || rep.MissingFlows[0].Rule != "AdminNetworkPolicy/deny egress[0]" || len(rep.ExtraFlows) != 1 || rep.ExtraFlows[0].Table != "Forwarding" {
		t.Errorf("missing %+v, extra %+v", rep.MissingFlows, rep.ExtraFlows)
	}
	statuses := map[string]string{}
	for _, pc := range rep.Policies {
		statuses[pc.ID] = pc.Status
	}
	if statuses["p1"] != "rulesMissing" || statuses["p2"] != "notReceived" || rep.Policies[0].Rules[0].Status != "missing" {
		t.Errorf("policies %+v", rep.Policies)
	}
	if n := rep.Problems(); n != 4 {
		t.Errorf("%d problems, want 4 (a missing flow, an extra flow, two policies)", n)
	}
}
