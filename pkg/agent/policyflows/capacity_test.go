package policyflows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// overCapacity is n Admin policies (priorities 0..n-1) of 100 ingress
// Deny rules each, on local pod 1 (policy i also on pod 2+i%3), plus one
// egress Allow rule each.
func overCapacity(f *fixture, n int) {
	f.in.Policies = nil
	for i := 0; i < n; i++ {
		p := &model.Policy{Meta: model.Meta{ID: fmt.Sprintf("anp-%04d", i)}, Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: fmt.Sprintf("anp-%04d", i)},
			Tier: model.TierAdmin, Priority: int32(i), AppliedToGroups: []string{f.atg(fmt.Sprintf("atg-%d", i), nil, 1, 2+i%3)}}
		for r := 0; r < 100; r++ {
			p.Rules = append(p.Rules, model.Rule{Direction: model.DirectionIn, Index: r, Action: model.ActionDeny,
				Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(1 + r)}}})
		}
		p.Rules = append(p.Rules, model.Rule{Direction: model.DirectionOut, Index: 0, Action: model.ActionAllow,
			Ports: []model.Port{{Protocol: model.ProtocolUDP, Port: 53}}})
		f.in.Policies = append(f.in.Policies, p)
	}
}

// TestTableOverCapacityLeavesOutLowestPolicies: a table with more rules
// than priorities is not an error (which would stop every update of the
// node): the lowest-precedence policies that do not fit are left out of
// that table, whole, and their applied-to pods are denied in that
// direction under every installed rule; the rest is compiled as usual,
// the same policies' rules of the other direction included.
func TestTableOverCapacityLeavesOutLowestPolicies(t *testing.T) {
	f := newFixture(4)
	// 632 × 100 = 63,200 ingress rules: 630 policies (63,000 rules) fit in
	// the 63,001 priorities, the last two do not.
	overCapacity(f, 632)
	c := NewCompiler(1)
	res, err := c.Compile(f.in)
	if err != nil {
		t.Fatalf("over capacity: %v", err)
	}
	if len(res.LeftOut) != 2 || res.LeftOut["anp-0630"] == "" || res.LeftOut["anp-0631"] == "" {
		t.Fatalf("left out %v, want anp-0630 and anp-0631", keys(res.LeftOut))
	}
	if msg := res.LeftOut["anp-0631"]; !strings.Contains(msg, "ingress rules not installed") || !strings.Contains(msg, "IngressAdmin") || !strings.Contains(msg, "fail closed") {
		t.Errorf("message %q", msg)
	}
	installed := map[string]int{}
	for _, ri := range res.Rules {
		installed[ri.PolicyID+"/"+string(ri.Direction)]++
	}
	if installed["anp-0629/In"] != 100 || installed["anp-0630/In"] != 0 || installed["anp-0631/In"] != 0 || installed["anp-0631/Out"] != 1 {
		t.Errorf("installed rules: anp-0629 in %d, anp-0630 in %d, anp-0631 in %d / out %d", installed["anp-0629/In"], installed["anp-0630/In"], installed["anp-0631/In"], installed["anp-0631/Out"])
	}
	// The left-out policies' pods: 1, 2+630%3 = 2 and 2+631%3 = 3.
	var denied []uint32
	lowest := pipeline.RulePriorityMax
	for _, fl := range res.Flows {
		_, role, _ := pipeline.DecodeCookie(fl.Cookie)
		switch {
		case role == pipeline.RoleOverflow:
			if fl.Table != pipeline.IngressAdmin.ID() || fl.Priority != pipeline.OverflowPriority || !deniesToCommit(fl) {
				t.Errorf("overflow flow %v", fl)
			}
			denied = append(denied, fl.Match.Regs[pipeline.RegOutPort].Value)
		case fl.Table == pipeline.IngressAdmin.ID() && (role == pipeline.RoleAction || role == pipeline.RoleClause):
			lowest = min(lowest, fl.Priority)
		}
	}
	if fmt.Sprint(denied) != "[1 2 3]" {
		t.Errorf("overflow denies for ports %v, want [1 2 3]", denied)
	}
	if lowest <= pipeline.OverflowPriority {
		t.Errorf("an installed rule at priority %d is not above the overflow denies", lowest)
	}

	// Back under the limit: everything installed, no overflow flow.
	overCapacity(f, 630)
	res, err = c.Compile(f.in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.LeftOut) != 0 || count(res.Flows, pipeline.IngressAdmin, pipeline.RoleOverflow) != 0 {
		t.Errorf("under the limit: left out %v", keys(res.LeftOut))
	}
}

func deniesToCommit(fl openflow.Flow) bool {
	return len(fl.Actions) == 2 && fl.Actions[0] == pipeline.LoadDeny() && fl.Actions[1] == openflow.GotoTable{Table: pipeline.ConntrackCommit.ID()}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestFitTableCutsATail(t *testing.T) {
	mk := func(sizes ...int) []placed {
		var out []placed
		for i, n := range sizes {
			p := &model.Policy{Meta: model.Meta{ID: fmt.Sprint(i)}}
			for r := 0; r < n; r++ {
				out = append(out, placed{pol: p})
			}
		}
		return out
	}
	for _, tc := range []struct {
		sizes    []int
		capacity int
		fit      int
		out      string
	}{
		{[]int{3, 3, 3}, 9, 9, "[]"},
		{[]int{3, 3, 3}, 8, 6, "[2]"},
		// The second policy does not fit; the third would, but comes after
		// it: left out too.
		{[]int{3, 5, 1}, 7, 3, "[1 2]"},
		{[]int{10}, 5, 0, "[0]"},
	} {
		fit, out := fitTable(mk(tc.sizes...), tc.capacity)
		var got []string
		for _, lo := range out {
			got = append(got, lo.ID)
		}
		if len(fit) != tc.fit || fmt.Sprint(got) != tc.out && !(tc.out == "[]" && got == nil) {
			t.Errorf("%v in %d: fit %d, left out %v; want %d, %s", tc.sizes, tc.capacity, len(fit), got, tc.fit, tc.out)
		}
	}
}
