package flowsync

import (
	"context"
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
