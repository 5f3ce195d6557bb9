package policyflows

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// fixture builds inputs for one node "n1".
type fixture struct {
	in   Input
	pods []pipeline.LocalPod
}

func newFixture(localPods int) *fixture {
	f := &fixture{in: Input{Node: "n1", AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}}
	for i := 1; i <= localPods; i++ {
		f.pods = append(f.pods, pipeline.LocalPod{Pod: model.PodRef{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}, OFPort: uint32(i),
			MAC: net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})}})
	}
	f.in.Pods = f.pods
	return f
}

func (f *fixture) atg(id string, ports map[int][]model.NamedPort, idx ...int) string {
	g := &model.AppliedToGroup{Meta: model.Meta{ID: id}, MembersByNode: model.MembersByNode{}}
	for _, i := range idx {
		p := f.pods[i-1]
		ref := p.Pod
		g.MembersByNode.Append("n1", model.GroupMember{Pod: &ref, Node: "n1", IPs: p.IPs, Ports: ports[i]})
	}
	f.in.AppliedToGroups[id] = g
	return id
}

func (f *fixture) ag(id string, n int, ports []model.NamedPort) string {
	g := &model.AddressGroup{Meta: model.Meta{ID: id}}
	for i := 0; i < n; i++ {
		ref := model.PodRef{Namespace: "remote", Name: fmt.Sprintf("%s-%d", id, i)}
		g.Members = append(g.Members, model.GroupMember{Pod: &ref, Node: "n2", IPs: []netip.Addr{netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})}, Ports: ports})
	}
	f.in.AddressGroups[id] = g
	return id
}

func count(flows []openflow.Flow, table pipeline.Table, role pipeline.Role) int {
	n := 0
	for _, fl := range flows {
		if _, r, _ := pipeline.DecodeCookie(fl.Cookie); fl.Table == table.ID() && r == role {
			n++
		}
	}
	return n
}

func allIdx(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestFlowCountIsSumOfClauseSizes(t *testing.T) {
	f := newFixture(50)
	atg := f.atg("atg", nil, allIdx(50)...)
	ag := f.ag("ag", 100, nil)
	var ports []model.Port
	for i := int32(0); i < 10; i++ {
		ports = append(ports, model.Port{Protocol: model.ProtocolTCP, Port: 1000 + 7*i})
	}
	f.in.Policies = []*model.Policy{{Meta: model.Meta{ID: "p"}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "p"}, Tier: model.TierAdmin,
		AppliedToGroups: []string{atg}, Rules: []model.Rule{{Direction: model.DirectionIn, Action: model.ActionDeny, Peer: model.Peer{AddressGroups: []string{ag}}, Ports: ports}}}}
	res, err := NewCompiler(1).Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	// 50 applied-to + 100 peer + 10 ports × 2 families clause flows, one
	// conj_id flow: 171, where the product would be 50 000.
	if got := count(res.Flows, pipeline.IngressAdmin, pipeline.RoleClause); got != 170 {
		t.Errorf("clause flows: %d, want 170", got)
	}
	if got := count(res.Flows, pipeline.IngressAdmin, pipeline.RoleAction); got != 1 {
		t.Errorf("action flows: %d, want 1", got)
	}
}

func TestSharedClauseFlowCarriesSeveralConjunctions(t *testing.T) {
	f := newFixture(3)
	ag := f.ag("ag", 5, nil)
	mk := func(name string, port int32) *model.Policy {
		return &model.Policy{Meta: model.Meta{ID: name}, Source: model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "ns", Name: name}, Tier: model.TierNetworkPolicy,
			AppliedToGroups: []string{f.atg("atg-"+name, nil, 1, 2)}, Isolates: []model.Direction{model.DirectionIn},
			Rules: []model.Rule{{Direction: model.DirectionIn, Action: model.ActionAllow, Peer: model.Peer{AddressGroups: []string{ag}}, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: port}}}}}
	}
	f.in.Policies = []*model.Policy{mk("a", 80), mk("b", 443)}
	res, err := NewCompiler(1).Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, fl := range res.Flows {
		if fl.Table == pipeline.IngressNetworkPolicy.ID() && fl.Match.IPSrc.IsValid() {
			if len(fl.Actions) != 2 {
				t.Errorf("peer clause flow %v has %d actions, want 2 conjunctions", fl.Match.IPSrc, len(fl.Actions))
			}
			shared++
		}
	}
	if shared != 5 {
		t.Errorf("%d peer clause flows, want 5 shared by both rules", shared)
	}
}

func TestSingleClauseShortcut(t *testing.T) {
	f := newFixture(4)
	f.in.Policies = []*model.Policy{{Meta: model.Meta{ID: "p"}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "p"}, Tier: model.TierAdmin,
		AppliedToGroups: []string{f.atg("atg", nil, 1, 2, 3)},
		Rules: []model.Rule{{Direction: model.DirectionOut, Action: model.ActionDeny, Peer: model.Peer{IPBlocks: []model.IPBlock{
			{CIDR: netip.MustParsePrefix("0.0.0.0/0")}, {CIDR: netip.MustParsePrefix("::/0")}}}}}}}
	res, err := NewCompiler(1).Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(res.Flows, pipeline.EgressAdmin, pipeline.RoleClause); n != 0 {
		t.Errorf("%d clause flows for a rule with any peer and any port", n)
	}
	if n := count(res.Flows, pipeline.EgressAdmin, pipeline.RoleAction); n != 3 {
		t.Errorf("%d action flows, want one per applied-to port (3)", n)
	}
}

func TestNamedPortsSplitPerResolvedNumber(t *testing.T) {
	f := newFixture(3)
	http := func(p int32) []model.NamedPort {
		return []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: p}}
	}
	atg := f.atg("atg", map[int][]model.NamedPort{1: http(80), 2: http(8080), 3: http(8080)}, 1, 2, 3)
	f.in.Policies = []*model.Policy{{Meta: model.Meta{ID: "p"}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "p"}, Tier: model.TierAdmin,
		AppliedToGroups: []string{atg},
		Rules: []model.Rule{{Direction: model.DirectionIn, Action: model.ActionAllow, Peer: model.Peer{AddressGroups: []string{f.ag("ag", 2, nil)}},
			Ports: []model.Port{{Name: "http"}, {Name: "nowhere"}}}}}}
	res, err := NewCompiler(1).Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	conj := map[uint32][]string{}
	for _, fl := range res.Flows {
		for _, a := range fl.Actions {
			if c, ok := a.(openflow.Conjunction); ok && c.Clause == 1 {
				conj[c.ID] = append(conj[c.ID], fmt.Sprint(fl.Match.Regs[pipeline.RegOutPort].Value))
			}
			if c, ok := a.(openflow.Conjunction); ok && c.Clause == 3 && fl.Match.L4Dst != nil {
				conj[c.ID] = append(conj[c.ID], fmt.Sprintf("tcp/%d", fl.Match.L4Dst.Value))
			}
		}
	}
	var got []string
	for _, v := range conj {
		got = append(got, strings.Join(v, ","))
	}
	if len(conj) != 2 {
		t.Fatalf("conjunctions %v, want two (port 80 on pod 1, port 8080 on pods 2 and 3)", conj)
	}
	joined := strings.Join(got, " | ")
	for _, want := range []string{"1,tcp/80,tcp/80", "2,3,tcp/8080,tcp/8080"} {
		if !strings.Contains(joined, want) {
			t.Errorf("conjunctions %q lack %q", joined, want)
		}
	}
}

func TestInvalidRulesFailClosed(t *testing.T) {
	f := newFixture(2)
	atg := f.atg("atg", nil, 1)
	f.in.Policies = []*model.Policy{{Meta: model.Meta{ID: "p"}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "p"}, Tier: model.TierAdmin,
		AppliedToGroups: []string{atg},
		Rules: []model.Rule{
			{Direction: model.DirectionIn, Index: 0, Action: model.ActionAllow, Peer: model.Peer{IPBlocks: []model.IPBlock{{}}}, Ports: []model.Port{{Protocol: "FOO", Port: 80}}},
			{Direction: model.DirectionIn, Index: 1, Action: model.ActionDeny, Peer: model.Peer{AddressGroups: []string{f.ag("ag", 1, nil)}}, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: 99999}}},
		}}}
	res, err := NewCompiler(1).Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 2 {
		t.Errorf("warnings %q, want one per invalid rule", res.Warnings)
	}
	// The invalid allow matches nothing; the invalid deny denies all
	// traffic of the applied-to pod: one direct flow on its port.
	var deny, allow int
	for _, fl := range res.Flows {
		_, role, id := pipeline.DecodeCookie(fl.Cookie)
		if fl.Table != pipeline.IngressAdmin.ID() || role == pipeline.RolePipeline {
			continue
		}
		switch res.Rules[id].Action {
		case model.ActionDeny:
			deny++
			if fl.Match.Regs[pipeline.RegOutPort].Value != 1 || fl.Match.IPSrc.IsValid() || fl.Match.L4Dst != nil {
				t.Errorf("fail-closed deny flow %+v, want all traffic to port 1", fl.Match)
			}
		case model.ActionAllow:
			allow++
		}
	}
	if deny != 1 || allow != 0 {
		t.Errorf("deny flows %d (want 1), allow flows %d (want 0)", deny, allow)
	}
	// A pod with a bad port number is an error: nothing is installed.
	f.in.Pods = append(f.in.Pods, pipeline.LocalPod{Pod: model.PodRef{Name: "bad"}, OFPort: 0})
	if _, err := NewCompiler(1).Compile(f.in); err == nil {
		t.Error("want an error for a pod with ofport 0")
	}
}

func TestRuleIDsAndPrioritiesStable(t *testing.T) {
	f := newFixture(2)
	atg := f.atg("atg", nil, 1)
	mk := func(name string, prio int32) *model.Policy {
		return &model.Policy{Meta: model.Meta{ID: name}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: name}, Tier: model.TierAdmin, Priority: prio,
			AppliedToGroups: []string{atg}, Rules: []model.Rule{{Direction: model.DirectionIn, Action: model.ActionDeny, Peer: model.Peer{AddressGroups: []string{f.ag("ag", 1, nil)}}}}}
	}
	c := NewCompiler(1)
	f.in.Policies = []*model.Policy{mk("a", 10), mk("c", 30)}
	r1, err := c.Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	f.in.Policies = []*model.Policy{mk("a", 10), mk("b", 20), mk("c", 30)}
	r2, err := c.Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	byName := func(r Result) map[string]agentquery.RuleInfo {
		m := map[string]agentquery.RuleInfo{}
		for _, ri := range r.Rules {
			m[ri.Policy.Name] = ri
		}
		return m
	}
	b1, b2 := byName(r1), byName(r2)
	for _, n := range []string{"a", "c"} {
		if b1[n].ID != b2[n].ID || b1[n].Priority != b2[n].Priority {
			t.Errorf("policy %s: id/priority %d/%d became %d/%d after an insertion", n, b1[n].ID, b1[n].Priority, b2[n].ID, b2[n].Priority)
		}
	}
	if !(b2["a"].Priority > b2["b"].Priority && b2["b"].Priority > b2["c"].Priority) {
		t.Errorf("priorities not in evaluation order: a=%d b=%d c=%d", b2["a"].Priority, b2["b"].Priority, b2["c"].Priority)
	}
}

// benchInput: 50 Admin policies × 10 rules over 100 local pods and address
// groups of 500 remote pods (about 260k flows).
func benchInput() *fixture {
	f := newFixture(100)
	for i := 0; i < 50; i++ {
		atg := f.atg(fmt.Sprintf("atg%d", i), nil, 1+i%100, 1+(i*7)%100)
		var rules []model.Rule
		for j := 0; j < 10; j++ {
			rules = append(rules, model.Rule{Direction: model.DirectionIn, Index: j, Action: model.ActionDeny,
				Peer:  model.Peer{AddressGroups: []string{f.ag(fmt.Sprintf("ag%d", j), 500, nil)}},
				Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(1000 + j), EndPort: int32(2000 + j)}}})
		}
		f.in.Policies = append(f.in.Policies, &model.Policy{Meta: model.Meta{ID: fmt.Sprint(i)}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: fmt.Sprint(i)},
			Tier: model.TierAdmin, Priority: int32(i % 1000), AppliedToGroups: []string{atg}, Rules: rules})
	}
	return f
}

// BenchmarkCompile: a full compilation of benchInput from scratch.
func BenchmarkCompile(b *testing.B) {
	f := benchInput()
	var flows int
	for i := 0; i < b.N; i++ {
		res, err := NewCompiler(1).Compile(f.in)
		if err != nil {
			b.Fatal(err)
		}
		flows = len(res.Flows)
	}
	b.ReportMetric(float64(flows), "flows")
}

// TestCacheFollowsContent: recompiling reuses a rule's flows only while
// everything they depend on is unchanged; a changed address-group member,
// named port or priority shows up in the flows even with the same group
// IDs and generations.
func TestCacheFollowsContent(t *testing.T) {
	f := newFixture(3)
	http := map[int][]model.NamedPort{1: {{Name: "http", Protocol: model.ProtocolTCP, Port: 80}}}
	atg := f.atg("atg", http, 1, 2)
	ag := f.ag("ag", 3, nil)
	f.in.Policies = []*model.Policy{{Meta: model.Meta{ID: "p"}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "p"}, Tier: model.TierAdmin,
		AppliedToGroups: []string{atg},
		Rules:           []model.Rule{{Direction: model.DirectionIn, Action: model.ActionAllow, Peer: model.Peer{AddressGroups: []string{ag}}, Ports: []model.Port{{Name: "http"}}}}}}
	c := NewCompiler(1)
	render := func() string {
		res, err := c.Compile(f.in)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := NewCompiler(1).Compile(f.in)
		if err != nil {
			t.Fatal(err)
		}
		var a, b []string
		for _, fl := range res.Flows {
			a = append(a, flowKeyActions(fl))
		}
		for _, fl := range fresh.Flows {
			b = append(b, flowKeyActions(fl))
		}
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Fatalf("cached compile differs from a fresh one:\n%s\n--- fresh:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
		return strings.Join(a, "\n")
	}
	first := render()
	if again := render(); again != first {
		t.Fatal("unchanged input compiled differently")
	}
	f.in.AddressGroups[ag].Members[0].IPs = []netip.Addr{netip.MustParseAddr("192.168.9.9")}
	if changed := render(); !strings.Contains(changed, "192.168.9.9") {
		t.Fatalf("new address-group member not in the flows:\n%s", changed)
	}
	f.in.AppliedToGroups[atg].MembersByNode.Get("n1")[0].Ports[0].Port = 8081
	if changed := render(); !strings.Contains(changed, "tcp_dst=8081") {
		t.Fatalf("changed named port not in the flows:\n%s", changed)
	}
}

// flowKeyActions renders a flow with conjunction IDs blanked: they depend
// on allocation history, not on the input.
func flowKeyActions(f openflow.Flow) string {
	s := fmt.Sprintf("%#x %s %s", f.Cookie, f.Key(), openflow.ActionsString(f.Actions))
	return conjIDs.ReplaceAllString(s, "${1}N")
}

var conjIDs = regexp.MustCompile(`(conjunction\(|conj_id=)[0-9]+`)

// BenchmarkRecompileOneChange: the 260k-flow input of BenchmarkCompile
// recompiled after one address-group member changed (the steady state of
// an agent: most rules come from the cache).
func BenchmarkRecompileOneChange(b *testing.B) {
	f := benchInput()
	c := NewCompiler(1)
	if _, err := c.Compile(f.in); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.in.AddressGroups["ag3"].Members[0].IPs[0] = netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})
		if _, err := c.Compile(f.in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMalformedInputNeverPanics feeds odd but possible inputs: errors or
// warnings, never a panic, and never an allow widened by what could not be
// read.
func TestMalformedInputNeverPanics(t *testing.T) {
	f := newFixture(2)
	atg := f.atg("atg", nil, 1)
	f.in.AppliedToGroups["empty"] = &model.AppliedToGroup{}
	f.in.AddressGroups["nilmember"] = &model.AddressGroup{Members: []model.GroupMember{{}, {IPs: []netip.Addr{{}}}}}
	inputs := []Input{
		{Policies: []*model.Policy{nil}},
		{Node: "n1", Pods: f.pods, AppliedToGroups: f.in.AppliedToGroups, AddressGroups: f.in.AddressGroups, Policies: []*model.Policy{
			{Tier: model.TierAdmin, AppliedToGroups: []string{atg, "missing", "empty"}, Rules: []model.Rule{
				{Direction: model.DirectionIn, Action: model.ActionAllow, Peer: model.Peer{AddressGroups: []string{"nilmember", "missing"},
					IPBlocks: []model.IPBlock{{CIDR: netip.MustParsePrefix("10.0.0.0/8"), Except: []netip.Prefix{{}}}}}},
				{Direction: model.DirectionOut, Action: "Bogus", Peer: model.Peer{}},
				{Direction: model.DirectionOut, Index: 1, Action: model.ActionPass, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: 90, EndPort: 80}, {Name: "x", Protocol: "FOO"}}},
			}},
			{Tier: model.TierNetworkPolicy, AppliedToGroups: []string{atg}, Isolates: []model.Direction{"Sideways", model.DirectionIn},
				Rules: []model.Rule{{Direction: model.DirectionIn, Action: model.ActionDeny}}},
		}},
		{Node: "n1", Pods: f.pods, Policies: []*model.Policy{{Tier: 7}}},
		{Node: "n1", Pods: f.pods, Policies: []*model.Policy{{Tier: model.TierAdmin, Rules: []model.Rule{{Direction: "Up"}}}}},
		{Node: "n1", Pods: f.pods, Policies: []*model.Policy{{Tier: model.TierAdmin, Rules: []model.Rule{{Direction: model.DirectionIn}, {Direction: model.DirectionIn}}}}},
	}
	for i, in := range inputs {
		res, err := NewCompiler(1).Compile(in)
		t.Logf("input %d: err=%v warnings=%q", i, err, res.Warnings)
		for _, fl := range res.Flows {
			// The only allow present must not come from the 10/8 block with
			// an unreadable except.
			if fl.Match.IPSrc.IsValid() && fl.Match.IPSrc.Bits() < 32 {
				t.Errorf("input %d: a block with an invalid except was installed: %s", i, fl.Key())
			}
		}
	}
}

func TestConflictingPodsAreErrors(t *testing.T) {
	f := newFixture(2)
	for name, mutate := range map[string]func(ps []pipeline.LocalPod){
		"same port": func(ps []pipeline.LocalPod) { ps[1].OFPort = ps[0].OFPort },
		"same IP":   func(ps []pipeline.LocalPod) { ps[1].IPs = ps[0].IPs },
		"same pod":  func(ps []pipeline.LocalPod) { ps[1].Pod = ps[0].Pod },
	} {
		in := f.in
		in.Pods = append([]pipeline.LocalPod(nil), f.pods...)
		mutate(in.Pods)
		if _, err := NewCompiler(1).Compile(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
