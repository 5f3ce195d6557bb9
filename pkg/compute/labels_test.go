package compute

import (
	"testing"
)

// TestPodLabelsShared: pods with equal labels share one label map, a
// relabel moves a pod to the other labels' map, and the maps are
// forgotten with their last pod.
func TestPodLabelsShared(t *testing.T) {
	e := New()
	e.UpsertPod(mkPod("ns", "a", "n1", "10.0.0.1", []string{"app=web", "tier=1"}))
	e.UpsertPod(mkPod("ns", "b", "n1", "10.0.0.2", []string{"tier=1", "app=web"}))
	e.UpsertPod(mkPod("ns", "c", "n2", "10.0.0.3", []string{"app=db"}))
	e.UpsertPod(mkPod("ns", "d", "n2", "10.0.0.4", nil))
	pa, pb, pc := e.pods[podKey{"ns", "a"}], e.pods[podKey{"ns", "b"}], e.pods[podKey{"ns", "c"}]
	if pa.labelSet != pb.labelSet || pa.labelSet == pc.labelSet || pa.labelSet.refs != 2 {
		t.Fatalf("equal labels not shared: %p %p %p (refs %d)", pa.labelSet, pb.labelSet, pc.labelSet, pa.labelSet.refs)
	}
	// b takes c's labels: a keeps its map, b and c share.
	e.UpsertPod(mkPod("ns", "b", "n1", "10.0.0.2", []string{"app=db"}))
	if pb.labelSet != pc.labelSet || pa.labelSet.refs != 1 || pc.labelSet.refs != 2 || pb.labels["app"] != "db" || pa.labels["app"] != "web" {
		t.Fatalf("after relabel: a %v (%d), b %v, c %v (%d)", pa.labels, pa.labelSet.refs, pb.labels, pc.labels, pc.labelSet.refs)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		e.DeletePod("ns", n)
	}
	if len(e.labelSets.byHash) != 0 {
		t.Fatalf("label maps kept after their pods went: %d", len(e.labelSets.byHash))
	}
}
