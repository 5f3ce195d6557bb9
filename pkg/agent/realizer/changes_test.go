package realizer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// memBridge is a flow table applying bundles by key, as OVS does (the
// real bridge's behaviour is tested by the _ovs tests); failNext makes the
// next Apply fail, changing nothing.
type memBridge struct {
	flows    map[string]openflow.Flow
	failNext bool
}

func (br *memBridge) Apply(_ context.Context, b flowsync.Bundle) error {
	if br.failNext {
		br.failNext = false
		return errors.New("bundle refused")
	}
	b.ApplyTo(br.flows)
	return nil
}

func (br *memBridge) Stats(context.Context) ([]flowsync.FlowStat, error) {
	var out []flowsync.FlowStat
	for _, f := range br.flows {
		out = append(out, flowsync.FlowStat{Table: f.Table, Priority: f.Priority, Cookie: f.Cookie})
	}
	return out, nil
}

func (br *memBridge) String() string {
	var out []string
	for _, f := range br.flows {
		out = append(out, f.String())
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func flowsString(fs []openflow.Flow) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// randomInput is a node's state: some of six pods attached, policies of
// every tier over them and remote peers.
func randomInput(rng *rand.Rand) policyflows.Input {
	in := policyflows.Input{Node: "n1", AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	atg := &model.AppliedToGroup{Meta: model.Meta{ID: "atg"}, MembersByNode: model.MembersByNode{}}
	for i := 1; i <= 6; i++ {
		ref := model.PodRef{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
		if rng.IntN(3) > 0 {
			in.Pods = append(in.Pods, pipeline.LocalPod{Pod: ref, OFPort: uint32(i), MAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(i)}, IPs: []netip.Addr{ip}})
		}
		if rng.IntN(2) == 0 {
			atg.MembersByNode.Append("n1", model.GroupMember{Pod: &ref, Node: "n1", IPs: []netip.Addr{ip}})
		}
	}
	in.AppliedToGroups[atg.ID] = atg
	ag := &model.AddressGroup{Meta: model.Meta{ID: "ag"}}
	for i := 0; i < 4; i++ {
		if rng.IntN(2) == 0 {
			ref := model.PodRef{Namespace: "remote", Name: fmt.Sprintf("r%d", i)}
			ag.Members = append(ag.Members, model.GroupMember{Pod: &ref, Node: "n2", IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, 0, byte(i)})}})
		}
	}
	in.AddressGroups[ag.ID] = ag
	for i := 0; i < 6; i++ {
		if rng.IntN(2) == 0 {
			continue
		}
		name := fmt.Sprintf("pol-%d", i)
		r := model.Rule{Direction: model.DirectionIn, Action: model.ActionAllow, Peer: model.Peer{AddressGroups: []string{"ag"}},
			Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(80 + rng.IntN(2))}}}
		p := &model.Policy{Meta: model.Meta{ID: name}, AppliedToGroups: []string{"atg"}, Rules: []model.Rule{r}}
		switch i % 3 {
		case 0:
			p.Source, p.Tier, p.Priority = model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: name}, model.TierAdmin, int32(rng.IntN(3))
			p.Rules[0].Action = model.ActionDeny
		case 1:
			p.Source, p.Tier = model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "ns", Name: name}, model.TierNetworkPolicy
			p.Isolates = []model.Direction{model.DirectionIn}
		default:
			p.Source, p.Tier = model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: name}, model.TierBaseline
		}
		in.Policies = append(in.Policies, p)
	}
	return in
}

// TestUpdatesByChangesEqualFullSyncs: a realizer that installs only each
// update's changes (static flows and the compiler's) leaves its bridge
// exactly as one that syncs every flow of every update, through pods
// coming and going or staying the same, policy changes, and a bundle the bridge refused (the
// next update catches up).
func TestUpdatesByChangesEqualFullSyncs(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg := pipeline.Config{UplinkPort: 100, CtZone: 1}
		incBr, fullBr := &memBridge{flows: map[string]openflow.Flow{}}, &memBridge{flows: map[string]openflow.Flow{}}
		inc, full := New(cfg, incBr), New(cfg, fullBr)
		for _, r := range []*Realizer{inc, full} {
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var prevPods []pipeline.LocalPod
		for step := 0; step < 30; step++ {
			in := randomInput(rng)
			if prevPods != nil && rng.IntN(2) == 0 {
				// The same pods (equal, not the same slice): the realizer
				// keeps its static flows.
				in.Pods = cloneLocalPods(prevPods)
			}
			prevPods = in.Pods
			refused := rng.IntN(8) == 0
			incBr.failNext = refused
			_, err := inc.Update(ctx, in)
			if refused && incBr.failNext {
				// Nothing changed, so no bundle was sent to refuse.
				refused, incBr.failNext = false, false
			}
			if refused != (err != nil) {
				t.Fatalf("seed %d step %d: refused %v, error %v", seed, step, refused, err)
			}
			full.resync = true // the reference syncs every flow
			if _, err := full.Update(ctx, in); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if refused {
				continue
			}
			if got, want := incBr.String(), fullBr.String(); got != want {
				t.Fatalf("seed %d step %d: bridge updated by changes:\n%s\n--- by full syncs:\n%s", seed, step, got, want)
			}
			flows, _ := inc.desired()
			if got, want := incBr.String(), flowsString(flows); got != want {
				t.Fatalf("seed %d step %d: bridge differs from the realizer's desired flows", seed, step)
			}
		}
	}
}

// countingBridge is an Installer that only counts what it is asked to do:
// the realizer's own work, without a switch's.
type countingBridge struct{ touched int }

func (c *countingBridge) Apply(_ context.Context, b flowsync.Bundle) error {
	c.touched = len(b.Add) + len(b.Modify) + len(b.Delete)
	return nil
}
func (c *countingBridge) Stats(context.Context) ([]flowsync.FlowStat, error) { return nil, nil }

// benchInput is about 100,000 flows of state: 900 policies (a third
// Admin) over 8 local pods, each with its own 100 remote peers, the shape
// of test/bench's BenchmarkAgentInstall.
func benchInput() policyflows.Input { return benchInputOf(8, 100, 900) }

// benchInputOf is policies policies (a third Admin) over localPods local
// pods, each with its own peers remote peers.
func benchInputOf(localPods, peers, policies int) policyflows.Input {
	in := policyflows.Input{Node: "n1", AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	atg := &model.AppliedToGroup{Meta: model.Meta{ID: "atg"}, MembersByNode: model.MembersByNode{}}
	for i := 1; i <= localPods; i++ {
		ref := model.PodRef{Namespace: "bench", Name: fmt.Sprintf("p%d", i)}
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		in.Pods = append(in.Pods, pipeline.LocalPod{Pod: ref, OFPort: uint32(i), MAC: net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)}, IPs: []netip.Addr{ip}})
		atg.MembersByNode.Append("n1", model.GroupMember{Pod: &ref, Node: "n1", IPs: []netip.Addr{ip}})
	}
	in.AppliedToGroups[atg.ID] = atg
	actions := []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass}
	for i := 0; i < policies; i++ {
		ag := &model.AddressGroup{Meta: model.Meta{ID: fmt.Sprintf("ag-%d", i)}}
		for j := 0; j < peers; j++ {
			k := i*peers + j
			ref := &model.PodRef{Namespace: "remote", Name: fmt.Sprintf("peer-%d", k)}
			ag.Members = append(ag.Members, model.GroupMember{Pod: ref, Node: "n2", IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(100 + k>>16), byte(k >> 8), byte(k)})}})
		}
		in.AddressGroups[ag.ID] = ag
		p := &model.Policy{Meta: model.Meta{ID: fmt.Sprintf("policy-%d", i)}, AppliedToGroups: []string{"atg"},
			Rules: []model.Rule{{Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{ag.ID}}, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(80 + i%50)}}}}}
		if i%3 == 0 {
			p.Source, p.Tier, p.Priority, p.Rules[0].Action = model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: p.ID}, model.TierAdmin, int32(i/3), actions[i/3%3]
		} else {
			p.Source, p.Tier, p.Isolates = model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "bench", Name: p.ID}, model.TierNetworkPolicy, []model.Direction{model.DirectionIn}
			p.Rules[0].Action = model.ActionAllow
		}
		in.Policies = append(in.Policies, p)
	}
	return in
}

// BenchmarkFirstInstall: the realizer's own work (compile, sync, no
// switch) for the first update of a fresh realizer with benchInput's
// ~100,000 flows: the agent's share of test/bench's BenchmarkAgentInstall.
func BenchmarkFirstInstall(b *testing.B) {
	in := benchInput()
	ctx := context.Background()
	br := &countingBridge{}
	for b.Loop() {
		r := New(pipeline.Config{UplinkPort: 1000, CtZone: 1}, br)
		if err := r.Start(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Update(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(br.touched), "flows")
}

// BenchmarkUpdateOnePolicy: the realizer's own work (compile, sync, no
// switch) for one NetworkPolicy's port change on a node holding about
// 100,000 flows (benchInput).
func BenchmarkUpdateOnePolicy(b *testing.B) { benchUpdateOnePolicy(b, benchInput()) }

// BenchmarkUpdateOnePolicyManyPods: the same change on a node of
// test/bench's end-to-end bed (about 333 local pods, few policies).
func BenchmarkUpdateOnePolicyManyPods(b *testing.B) {
	benchUpdateOnePolicy(b, benchInputOf(333, 50, 60))
}

func benchUpdateOnePolicy(b *testing.B, in policyflows.Input) {
	br := &countingBridge{}
	r := New(pipeline.Config{UplinkPort: 1000, CtZone: 1}, br)
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := r.Update(ctx, in); err != nil {
		b.Fatal(err)
	}
	flows := br.touched
	moved := *in.Policies[1]
	moved.Rules = slices.Clone(moved.Rules)
	moved.Rules[0].Ports = []model.Port{{Protocol: model.ProtocolTCP, Port: 7999}}
	changed := in
	changed.Policies = slices.Clone(in.Policies)
	changed.Policies[1] = &moved
	for i := 0; b.Loop(); i++ {
		next := changed
		if i%2 == 1 {
			next = in
		}
		if _, err := r.Update(ctx, next); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(flows), "flows")
	b.ReportMetric(float64(br.touched), "flows-touched")
}
