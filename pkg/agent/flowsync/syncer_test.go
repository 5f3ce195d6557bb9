package flowsync

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// recorder is an Installer that records bundles; the real-OVS behaviour of
// bundles is tested in pkg/agent/realizer.
type recorder struct{ bundles []Bundle }

func (r *recorder) Apply(_ context.Context, b Bundle) error {
	r.bundles = append(r.bundles, b)
	return nil
}
func (r *recorder) Stats(context.Context) ([]FlowStat, error) { return nil, nil }

func manyFlows(n int, prio uint16) []openflow.Flow {
	out := make([]openflow.Flow, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, openflow.Flow{Table: 10, Priority: prio, Cookie: 0x0102000000000000 | uint64(i%500),
			Match:   openflow.Match{EthType: 0x0800, IPSrc: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)},
			Actions: []openflow.Action{openflow.Conjunction{ID: uint32(i % 500), Clause: 2, NClauses: 3}}})
	}
	return out
}

func TestDiffMovesInOneBundle(t *testing.T) {
	rec := &recorder{}
	s := NewSyncer(rec)
	if _, err := s.Sync(context.Background(), manyFlows(100, 2000)); err != nil {
		t.Fatal(err)
	}
	// Every flow moves to a new priority, one flow's actions change: one
	// bundle with 100 adds and 100 deletes.
	moved := manyFlows(100, 3000)
	if _, err := s.Sync(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	if len(rec.bundles) != 2 {
		t.Fatalf("%d bundles, want 2", len(rec.bundles))
	}
	if b := rec.bundles[1]; len(b.Add) != 100 || len(b.Delete) != 100 || len(b.Modify) != 0 {
		t.Fatalf("move bundle: %d adds, %d deletes, %d modifies", len(b.Add), len(b.Delete), len(b.Modify))
	}
	// A new desired list: the syncer keeps the one it installed.
	moved = slices.Clone(moved)
	moved[7].Actions = []openflow.Action{openflow.GotoTable{Table: 14}}
	b, err := s.Sync(context.Background(), moved)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Modify) != 1 || len(b.Add)+len(b.Delete) != 0 {
		t.Fatalf("action change: %+v", b)
	}
	if _, err := s.Diff(append(moved, moved[0])); err == nil {
		t.Fatal("duplicate desired flows accepted")
	}
}

// BenchmarkDiffUnchanged200k: the cost of an update that changes nothing
// on a bridge with 200k flows.
func BenchmarkDiffUnchanged200k(b *testing.B) {
	s := NewSyncer(&recorder{})
	flows := manyFlows(200000, 2000)
	if _, err := s.Sync(context.Background(), flows); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Diff(flows); err != nil {
			b.Fatal(err)
		}
	}
}

// failing is an Installer whose Apply fails.
type failing struct{ recorder }

func (f *failing) Apply(context.Context, Bundle) error { return errors.New("bridge gone") }

func keysOf(fs []openflow.Flow) []string {
	out := make([]string, len(fs))
	for i := range fs {
		out[i] = fs[i].Key()
	}
	return out
}

// TestSyncChanges: changes become the smallest bundle (an upsert installed
// as it is costs nothing), the syncer's view follows them through
// compaction, the caller's list is never written, and a failed or invalid
// change leaves the view as it was.
func TestSyncChanges(t *testing.T) {
	rec := &recorder{}
	s := NewSyncer(rec)
	flows := manyFlows(10, 2000)
	given := slices.Clone(flows)
	if _, err := s.Sync(context.Background(), flows); err != nil {
		t.Fatal(err)
	}
	changed := flows[3]
	changed.Actions = []openflow.Action{openflow.GotoTable{Table: 14}}
	fresh := manyFlows(11, 2000)[10:]
	ch := Changes{Upserts: append([]openflow.Flow{flows[0], changed}, fresh...), Keys: keysOf(append([]openflow.Flow{flows[0], changed}, fresh...)),
		Removes: keysOf(flows[4:10])}
	b, err := s.SyncChanges(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Add) != 1 || len(b.Modify) != 1 || len(b.Delete) != 6 {
		t.Fatalf("bundle: %d adds, %d modifies, %d deletes; want 1, 1, 6", len(b.Add), len(b.Modify), len(b.Delete))
	}
	if s.installed.stale != 0 || len(s.installed.flows) != 5 {
		t.Fatalf("not compacted: %d stale of %d", s.installed.stale, len(s.installed.flows))
	}
	if !slices.EqualFunc(flows, given, func(a, b openflow.Flow) bool { return a.Key() == b.Key() && actionsEqual(a.Actions, b.Actions) }) {
		t.Fatal("SyncChanges wrote the list Sync was given")
	}
	// The view (compacted: 6 of 11 entries were stale) is flows 0-3, with
	// 3 changed, and the fresh one: a full sync of that is empty.
	want := append(append(slices.Clone(flows[:3]), changed), fresh...)
	if s.Installed() != len(want) {
		t.Fatalf("syncer holds %d flows, want %d", s.Installed(), len(want))
	}
	if d, err := s.Diff(want); err != nil || !d.Empty() {
		t.Fatalf("view differs from the changes applied: %+v %v", d, err)
	}
	for name, bad := range map[string]Changes{
		"duplicate": {Upserts: []openflow.Flow{changed, changed}, Keys: keysOf([]openflow.Flow{changed, changed})},
		"both":      {Upserts: []openflow.Flow{changed}, Keys: keysOf([]openflow.Flow{changed}), Removes: keysOf([]openflow.Flow{changed})},
		"keys":      {Upserts: []openflow.Flow{changed}},
	} {
		if _, err := s.SyncChanges(context.Background(), bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	s.inst = &failing{}
	if _, err := s.SyncChanges(context.Background(), Changes{Removes: keysOf(fresh)}); err == nil {
		t.Fatal("failed bundle: no error")
	}
	if d, err := s.Diff(want); err != nil || !d.Empty() {
		t.Fatalf("a failed bundle changed the view: %+v %v", d, err)
	}
}
