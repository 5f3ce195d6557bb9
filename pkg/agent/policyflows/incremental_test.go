package policyflows

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// randomWorld is a small random agent state that changes one thing at a
// time: few local pods, groups and addresses, so that rules of different
// policies share clause flows (the merged flows of the NetworkPolicy
// tables) and policies reorder.
type randomWorld struct {
	rng *rand.Rand
	f   *fixture
	pol map[string]*model.Policy
}

var (
	worldATGs = []string{"atg-a", "atg-b", "atg-c"}
	worldAGs  = []string{"ag-0", "ag-1", "ag-2", "ag-3"}
	http      = model.NamedPort{Name: "http", Protocol: model.ProtocolTCP, Port: 80}
)

func newRandomWorld(seed uint64) *randomWorld {
	w := &randomWorld{rng: rand.New(rand.NewPCG(seed, 7)), f: newFixture(5), pol: map[string]*model.Policy{}}
	for _, id := range worldATGs {
		w.changeATG(id)
	}
	for _, id := range worldAGs {
		w.changeAG(id)
	}
	for i := 0; i < 8; i++ {
		w.changePolicy(fmt.Sprintf("p%d", w.rng.IntN(12)))
	}
	return w
}

func (w *randomWorld) changeATG(id string) {
	var idx []int
	ports := map[int][]model.NamedPort{}
	for i := 1; i <= len(w.f.pods); i++ {
		if w.rng.IntN(2) == 0 {
			idx = append(idx, i)
			if w.rng.IntN(2) == 0 {
				ports[i] = []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: int32(8080 + w.rng.IntN(2))}}
			}
		}
	}
	w.f.atg(id, ports, idx...)
}

func (w *randomWorld) changeAG(id string) {
	g := &model.AddressGroup{Meta: model.Meta{ID: id}}
	for i := 0; i < 6; i++ {
		if w.rng.IntN(2) == 0 {
			ref := model.PodRef{Namespace: "remote", Name: fmt.Sprintf("r%d", i)}
			m := model.GroupMember{Pod: &ref, Node: "n2", IPs: []netip.Addr{netip.AddrFrom4([4]byte{172, 16, 0, byte(i)})}}
			if w.rng.IntN(2) == 0 {
				m.Ports = []model.NamedPort{http}
			}
			g.Members = append(g.Members, m)
		}
	}
	w.f.in.AddressGroups[id] = g
}

func (w *randomWorld) pick(s []string) string { return s[w.rng.IntN(len(s))] }

// changePolicy replaces (or adds) policy name with a random one, or
// removes it.
func (w *randomWorld) changePolicy(name string) {
	if w.rng.IntN(5) == 0 {
		delete(w.pol, name)
		return
	}
	tiers := []model.Tier{model.TierAdmin, model.TierNetworkPolicy, model.TierNetworkPolicy, model.TierBaseline}
	p := &model.Policy{Meta: model.Meta{ID: name}, Tier: tiers[w.rng.IntN(len(tiers))], AppliedToGroups: []string{w.pick(worldATGs)}}
	switch p.Tier {
	case model.TierAdmin:
		p.Source, p.Priority = model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: name}, int32(w.rng.IntN(4))
	case model.TierBaseline:
		p.Source = model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: name}
	default:
		p.Source = model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "ns", Name: name}
		p.Isolates = []model.Direction{model.DirectionIn, model.DirectionOut}[:1+w.rng.IntN(2)]
	}
	next := map[model.Direction]int{}
	for r := 0; r < 1+w.rng.IntN(3); r++ {
		d := []model.Direction{model.DirectionIn, model.DirectionOut}[w.rng.IntN(2)]
		rule := model.Rule{Index: next[d], Direction: d, Action: model.ActionAllow}
		next[d]++
		if p.Tier != model.TierNetworkPolicy {
			rule.Action = []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass}[w.rng.IntN(3)]
		}
		switch w.rng.IntN(4) {
		case 0: // any peer
			rule.Peer.IPBlocks = []model.IPBlock{{CIDR: netip.MustParsePrefix("0.0.0.0/0")}, {CIDR: netip.MustParsePrefix("::/0")}}
		case 1:
			rule.Peer.IPBlocks = []model.IPBlock{{CIDR: netip.MustParsePrefix("172.16.0.0/29"), Except: []netip.Prefix{netip.MustParsePrefix("172.16.0.2/32")}}}
		default:
			rule.Peer.AddressGroups = []string{w.pick(worldAGs)}
		}
		switch w.rng.IntN(4) {
		case 0: // every port
		case 1:
			rule.Ports = []model.Port{{Name: "http"}}
		default:
			rule.Ports = []model.Port{{Protocol: model.ProtocolTCP, Port: int32(80 + w.rng.IntN(3))}}
		}
		p.Rules = append(p.Rules, rule)
	}
	w.pol[name] = p
}

// renameNetworkPolicy gives a NetworkPolicy another name, keeping its ID
// and content: its rules move in the evaluation order, unchanged.
func (w *randomWorld) renameNetworkPolicy() {
	for _, n := range slices.Sorted(maps.Keys(w.pol)) {
		if p := w.pol[n]; p.Tier == model.TierNetworkPolicy && w.rng.IntN(2) == 0 {
			q := *p
			q.Source.Name = fmt.Sprintf("renamed-%d", w.rng.IntN(100))
			w.pol[n] = &q
			return
		}
	}
}

// step changes one random thing.
func (w *randomWorld) step() {
	switch w.rng.IntN(5) {
	case 0:
		w.changeATG(w.pick(worldATGs))
	case 1:
		w.changeAG(w.pick(worldAGs))
	case 2:
		w.renameNetworkPolicy()
	default:
		w.changePolicy(fmt.Sprintf("p%d", w.rng.IntN(12)))
	}
}

func (w *randomWorld) input() Input {
	in := w.f.in
	in.Policies = nil
	for _, n := range slices.Sorted(maps.Keys(w.pol)) {
		in.Policies = append(in.Policies, w.pol[n])
	}
	return in
}

// fromScratch merges every rule's cached flows of c's last compilation
// again, with a builder, in evaluation order: the output as a compiler
// that keeps no assembly makes it.
func fromScratch(c *Compiler) ([]openflow.Flow, []string) {
	entries := slices.Collect(maps.Values(c.cache))
	sort.Slice(entries, func(i, j int) bool { return entries[i].seq < entries[j].seq })
	b := newBuilder(c.round)
	for _, e := range append(entries, c.extras) {
		for i := range e.flows {
			b.addKeyed(e.flows[i], e.keys[i], e.kinds[i])
		}
	}
	return b.out, b.keys
}

func render(f openflow.Flow) string {
	return fmt.Sprintf("%#x %s %s", f.Cookie, f.Key(), openflow.ActionsString(f.Actions))
}

func renderAll(fs []openflow.Flow) string {
	var out []string
	for _, f := range fs {
		out = append(out, render(f))
	}
	return strings.Join(out, "\n")
}

// bridge is a flow table that applies bundles as OVS does (by key).
type bridge map[string]openflow.Flow

func (br bridge) Apply(_ context.Context, b flowsync.Bundle) error {
	b.ApplyTo(br)
	return nil
}

func (br bridge) Stats(context.Context) ([]flowsync.FlowStat, error) { return nil, nil }

func (br bridge) String() string {
	var out []string
	for _, f := range br {
		out = append(out, render(f))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func sortedRender(fs []openflow.Flow) string {
	var out []string
	for _, f := range fs {
		out = append(out, render(f))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestChangesEqualFullRecompile is the differential test of the
// incremental output: over random sequences of single changes, a compiler
// that reports only changes (CompileChanges), applied to a bridge through
// SyncChanges, leaves the bridge with exactly the flows of a full
// recompilation (Compile by a compiler with the same history, synced with
// a full diff), which are, in order, those of merging every rule's flows
// from scratch; and both bundles change the same flows.
func TestChangesEqualFullRecompile(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		w := newRandomWorld(seed)
		inc, full := NewCompiler(1), NewCompiler(1)
		incBridge, fullBridge := bridge{}, bridge{}
		incSync, fullSync := flowsync.NewSyncer(incBridge), flowsync.NewSyncer(fullBridge)
		for step := 0; step < 60; step++ {
			in := w.input()
			res, ch, err := inc.CompileChanges(in)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if res.Flows != nil {
				t.Fatal("CompileChanges returned the whole output")
			}
			fres, err := full.Compile(in)
			if err != nil {
				t.Fatalf("seed %d step %d: full: %v", seed, step, err)
			}
			scratch, scratchKeys := fromScratch(full)
			if got, want := renderAll(fres.Flows), renderAll(scratch); got != want {
				t.Fatalf("seed %d step %d: full compilation differs from merging from scratch:\n%s\n--- from scratch:\n%s", seed, step, got, want)
			}
			if !slices.Equal(fres.Keys, scratchKeys) {
				t.Fatalf("seed %d step %d: keys differ from the flows'", seed, step)
			}
			for _, k := range ch.Removes {
				if _, ok := incBridge[k]; !ok {
					t.Fatalf("seed %d step %d: removes %s, which is not installed", seed, step, k)
				}
			}
			ib, err := incSync.SyncChanges(context.Background(), ch)
			if err != nil {
				t.Fatalf("seed %d step %d: SyncChanges: %v", seed, step, err)
			}
			fb, err := fullSync.SyncKeyed(context.Background(), fres.Flows, fres.Keys)
			if err != nil {
				t.Fatalf("seed %d step %d: SyncKeyed: %v", seed, step, err)
			}
			if got, want := incBridge.String(), sortedRender(fres.Flows); got != want {
				t.Fatalf("seed %d step %d: bridge after changes:\n%s\n--- full recompilation:\n%s", seed, step, got, want)
			}
			if got, want := fullBridge.String(), sortedRender(fres.Flows); got != want {
				t.Fatalf("seed %d step %d: bridge after a full diff:\n%s\n--- full recompilation:\n%s", seed, step, got, want)
			}
			for _, pair := range [][2][]openflow.Flow{{ib.Add, fb.Add}, {ib.Modify, fb.Modify}, {ib.Delete, fb.Delete}} {
				if got, want := sortedRender(pair[0]), sortedRender(pair[1]); got != want {
					t.Fatalf("seed %d step %d: bundle of the changes:\n%s\n--- of the full diff:\n%s", seed, step, got, want)
				}
			}
			if incSync.Installed() != len(fres.Flows) {
				t.Fatalf("seed %d step %d: syncer holds %d flows, want %d", seed, step, incSync.Installed(), len(fres.Flows))
			}
			w.step()
		}
	}
}

// TestChangesOfOnePolicy: on a large output, changing one policy's port
// reports that policy's flows only, and nothing when nothing changed.
func TestChangesOfOnePolicy(t *testing.T) {
	f := benchInput()
	c := NewCompiler(1)
	_, all, err := c.CompileChanges(f.in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ch, err := c.CompileChanges(f.in); err != nil || !ch.Empty() {
		t.Fatalf("unchanged input: %d upserts, %d removes, %v", len(ch.Upserts), len(ch.Removes), err)
	}
	p := *f.in.Policies[7]
	p.Rules = slices.Clone(p.Rules)
	p.Rules[0].Ports = []model.Port{{Protocol: model.ProtocolUDP, Port: 53}}
	f.in.Policies[7] = &p
	before := len(c.cache[ruleKey(&p, &p.Rules[0])].keys)
	_, ch, err := c.CompileChanges(f.in)
	if err != nil {
		t.Fatal(err)
	}
	after := len(c.cache[ruleKey(&p, &p.Rules[0])].keys)
	// The rule's flows are withdrawn and its new ones added: nothing else.
	if n := len(ch.Upserts) + len(ch.Removes); n == 0 || n > before+after {
		t.Fatalf("one rule's port changed: %d upserts, %d removes; the rule had %d flows and has %d (of %d)",
			len(ch.Upserts), len(ch.Removes), before, after, len(all.Upserts))
	}
	t.Logf("one rule of %d flows: %d upserts, %d removes (of %d flows)", after, len(ch.Upserts), len(ch.Removes), len(all.Upserts))
}

// BenchmarkOnePolicyChange: one Admin rule's port changes (and back, in
// turn) on the 260k-flow input of BenchmarkCompile, compiled with
// CompileChanges and synced with SyncChanges (the bridge an in-memory
// table): the agent's own work for one policy change.
func BenchmarkOnePolicyChange(b *testing.B) {
	f := benchInput()
	c := NewCompiler(1)
	s := flowsync.NewSyncer(bridge{})
	_, ch, err := c.CompileChanges(f.in)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.SyncChanges(context.Background(), ch); err != nil {
		b.Fatal(err)
	}
	orig := f.in.Policies[7]
	moved := *orig
	moved.Rules = slices.Clone(orig.Rules)
	moved.Rules[0].Ports = []model.Port{{Protocol: model.ProtocolUDP, Port: 53}}
	touched := 0
	for i := 0; b.Loop(); i++ {
		f.in.Policies[7] = &moved
		if i%2 == 1 {
			f.in.Policies[7] = orig
		}
		_, ch, err := c.CompileChanges(f.in)
		if err != nil {
			b.Fatal(err)
		}
		bundle, err := s.SyncChanges(context.Background(), ch)
		if err != nil {
			b.Fatal(err)
		}
		touched = len(bundle.Add) + len(bundle.Modify) + len(bundle.Delete)
	}
	b.ReportMetric(float64(touched), "flows-touched")
	b.ReportMetric(float64(s.Installed()), "flows")
}
