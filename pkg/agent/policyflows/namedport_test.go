package policyflows

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// egressNamedConjunctions renders each conjunction of an egress rule as
// "PEER,PEER...|PORT,PORT" (clause 2: destinations, clause 3: ports).
func egressNamedConjunctions(flows []openflow.Flow) []string {
	peers, ports := map[uint32][]string{}, map[uint32][]string{}
	for _, fl := range flows {
		for _, a := range fl.Actions {
			c, ok := a.(openflow.Conjunction)
			if !ok {
				continue
			}
			switch {
			case c.Clause == 2 && fl.Match.IPDst.IsValid():
				peers[c.ID] = append(peers[c.ID], fl.Match.IPDst.String())
			case c.Clause == 3 && fl.Match.L4Dst != nil && fl.Match.EthType == 0x0800:
				ports[c.ID] = append(ports[c.ID], fmt.Sprintf("%d/%d", fl.Match.IPProto, fl.Match.L4Dst.Value))
			}
		}
	}
	var out []string
	for id, ps := range peers {
		sort.Strings(ps)
		out = append(out, strings.Join(ps, ",")+"|"+strings.Join(ports[id], ","))
	}
	sort.Strings(out)
	return out
}

// An egress named port towards ipBlocks resolves on the members of the
// rule's NamedPortGroups inside the blocks — local or remote — and on
// nothing else: not on pods outside the blocks, not on pods of other
// address groups the agent holds, and with no NamedPortGroups not at all.
func TestEgressNamedPortResolvesThroughNamedPortGroups(t *testing.T) {
	f := newFixture(2) // p1 10.0.0.1 (applied-to), p2 10.0.0.2 (local destination)
	http := func(p int32) []model.NamedPort {
		return []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: p}}
	}
	member := func(ns, name, node, ip string, ports []model.NamedPort) model.GroupMember {
		return model.GroupMember{Pod: &model.PodRef{Namespace: ns, Name: name}, Node: node, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Ports: ports}
	}
	f.in.AddressGroups["npg"] = &model.AddressGroup{Meta: model.Meta{ID: "npg"}, Members: []model.GroupMember{
		member("ns", "p2", "n1", "10.0.0.2", http(80)),
		member("remote", "r1", "n2", "172.16.0.1", http(80)),
		member("remote", "r2", "n2", "172.16.0.2", http(8080)),
		member("remote", "outside", "n2", "192.168.5.5", http(80)),
	}}
	// Another group the agent holds: never used for this rule's names.
	f.in.AddressGroups["other"] = &model.AddressGroup{Meta: model.Meta{ID: "other"}, Members: []model.GroupMember{
		member("remote", "r9", "n2", "172.16.0.9", http(80)),
	}}
	atg := f.atg("atg", nil, 1)
	rule := model.Rule{Direction: model.DirectionOut, Action: model.ActionAllow,
		Peer:            model.Peer{IPBlocks: []model.IPBlock{{CIDR: netip.MustParsePrefix("10.0.0.0/24")}, {CIDR: netip.MustParsePrefix("172.16.0.0/24")}}},
		Ports:           []model.Port{{Protocol: model.ProtocolTCP, Name: "http"}},
		NamedPortGroups: []string{"npg"}}
	pol := &model.Policy{Meta: model.Meta{ID: "p"}, Source: model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "ns", Name: "p"},
		Tier: model.TierNetworkPolicy, AppliedToGroups: []string{atg}, Isolates: []model.Direction{model.DirectionOut}, Rules: []model.Rule{rule}}
	f.in.Policies = []*model.Policy{pol}
	c := NewCompiler(1)
	res, err := c.Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	got := egressNamedConjunctions(res.Flows)
	want := []string{"10.0.0.2/32,172.16.0.1/32|6/80", "172.16.0.2/32|6/8080"}
	if strings.Join(got, " ; ") != strings.Join(want, " ; ") {
		t.Errorf("conjunctions\n got  %v\n want %v", got, want)
	}

	// The group's members change: the cached rule is recompiled.
	f.in.AddressGroups["npg"].Members[1].Ports = http(81)
	res, err = c.Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	got = egressNamedConjunctions(res.Flows)
	want = []string{"10.0.0.2/32|6/80", "172.16.0.1/32|6/81", "172.16.0.2/32|6/8080"}
	if strings.Join(got, " ; ") != strings.Join(want, " ; ") {
		t.Errorf("after a member change\n got  %v\n want %v", got, want)
	}

	// Without NamedPortGroups (or before the group arrives) the name
	// resolves nowhere: fail closed.
	for _, groups := range [][]string{nil, {"missing"}} {
		pol.Rules[0].NamedPortGroups = groups
		res, err = NewCompiler(1).Compile(f.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := egressNamedConjunctions(res.Flows); len(got) != 0 {
			t.Errorf("NamedPortGroups %v: conjunctions %v, want none", groups, got)
		}
	}
}
