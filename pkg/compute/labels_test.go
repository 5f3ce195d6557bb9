package compute

import (
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// TestPodLabelsShared: pods given as objects whose labels are equal share
// one label set (with prepared pods too), a relabel moves a pod to the
// other labels' set, and the table forgets a set once no pod holds it.
func TestPodLabelsShared(t *testing.T) {
	e := New()
	e.UpsertPod(mkPod("ns", "a", "n1", "10.0.0.1", []string{"app=web", "tier=1"}))
	e.UpsertPod(mkPod("ns", "b", "n1", "10.0.0.2", []string{"tier=1", "app=web"}))
	e.UpsertPod(mkPod("ns", "c", "n2", "10.0.0.3", []string{"app=db"}))
	e.UpsertPod(mkPod("ns", "d", "n2", "10.0.0.4", nil))
	pa, pb, pc := e.pods[podKey{"ns", "a"}], e.pods[podKey{"ns", "b"}], e.pods[podKey{"ns", "c"}]
	if pa.labels != pb.labels || pa.labels == pc.labels || !pa.labels.equalMap(map[string]string{"app": "web", "tier": "1"}) {
		t.Fatalf("equal labels not shared: %p %p %p", pa.labels, pb.labels, pc.labels)
	}
	if prepared := PreparePod(mkPod("ns", "x", "n1", "10.0.0.9", []string{"app=db"})); prepared.u.set != pc.labels {
		t.Fatal("a prepared pod does not share the set of an engine's pod of equal labels")
	}
	// b takes c's labels: a keeps its set, b and c share.
	e.UpsertPod(mkPod("ns", "b", "n1", "10.0.0.2", []string{"app=db"}))
	if pb.labels != pc.labels || pa.labels == pb.labels || pb.labels.Get("app") != "db" || pa.labels.Get("app") != "web" {
		t.Fatalf("after relabel: a %v, b %v, c %v", pa.labels.toMap(), pb.labels.toMap(), pc.labels.toMap())
	}
	h := pa.labels.hash
	for _, n := range []string{"a", "b", "c", "d"} {
		e.DeletePod("ns", n)
	}
	pa, pb, pc = nil, nil, nil
	waitForgotten(t, h, "a label set is still in the table after its pods went")
	runtime.KeepAlive(e)
}

// TestPreparedPodLabelsShared: prepared pods with equal labels share one
// label set, a pod with other labels gets its own, and the table forgets a
// set once no prepared pod holds it.
func TestPreparedPodLabelsShared(t *testing.T) {
	a := PreparePod(mkPod("ns", "a", "n1", "10.0.0.1", []string{"bench=shared", "tier=1"}))
	b := PreparePod(mkPod("ns", "b", "n1", "10.0.0.2", []string{"tier=1", "bench=shared"}))
	c := PreparePod(mkPod("ns", "c", "n2", "10.0.0.3", []string{"bench=other"}))
	if a.u.set != b.u.set || a.u.set == c.u.set || !maps.Equal(b.Labels(), map[string]string{"bench": "shared", "tier": "1"}) {
		t.Fatalf("prepared labels: a %v b %v c %v, want a and b one set, c its own", a.Labels(), b.Labels(), c.Labels())
	}
	// The labels read back are a new map each time: a caller may keep
	// or modify it.
	if m := b.Labels(); reflect.ValueOf(m).Pointer() == reflect.ValueOf(b.Labels()).Pointer() {
		t.Fatal("PreparedPod.Labels answered one map twice")
	}
	// The engine keeps the shared set itself as the pod's labels (it is
	// never modified), not a copy.
	e := New()
	e.UpsertPreparedPod(b)
	if got := e.pods[podKey{"ns", "b"}].labels; !got.equalMap(map[string]string{"bench": "shared", "tier": "1"}) || got != b.u.set {
		t.Fatalf("engine's labels of b: %v, want b's shared set", got.toMap())
	}
	// A relabel moves it to the other labels' set.
	e.UpsertPreparedPod(PreparePod(mkPod("ns", "b", "n1", "10.0.0.2", []string{"bench=other"})))
	if p := e.pods[podKey{"ns", "b"}]; p.labels != c.u.set {
		t.Fatalf("engine's labels of b after a relabel: %v, want c's set", p.labels.toMap())
	}
	e.DeletePod("ns", "b")
	if len(e.pods) != 0 {
		t.Fatalf("after delete: %d pods", len(e.pods))
	}
	h := a.u.labelsHash
	if held := podLabelSets.held(h); held != 1 {
		t.Fatalf("the table holds %d maps of a's labels, want 1", held)
	}
	runtime.KeepAlive(c)
	a, b, c, e = PreparedPod{}, PreparedPod{}, PreparedPod{}, nil
	waitForgotten(t, h, "the shared labels are still in the table after their last prepared pod was collected")
}

// waitForgotten fails t (with msg) unless the prepared-labels table
// forgets every label set of hash h within a second of collections.
func waitForgotten(t *testing.T, h uint64, msg string) {
	t.Helper()
	for range 100 {
		runtime.GC()
		if podLabelSets.held(h) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	}
	t.Fatal(msg)
}

// TestPreparedLabelsOfOneHash: label sets whose hashes collide are told
// apart (and each shared), and forgotten once unused.
func TestPreparedLabelsOfOneHash(t *testing.T) {
	const h = 42 // as if both sets hashed alike
	x, y := map[string]string{"app": "x"}, map[string]string{"app": "y"}
	a, b := podLabelSets.intern(x, h), podLabelSets.intern(y, h)
	if a == b || podLabelSets.intern(maps.Clone(x), h) != a || podLabelSets.intern(maps.Clone(y), h) != b {
		t.Fatal("label sets of one hash are not told apart, or not shared")
	}
	if n := podLabelSets.held(h); n != 2 {
		t.Fatalf("the table holds %d label sets of the hash, want 2", n)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	a, b = nil, nil
	waitForgotten(t, h, "label sets of one hash are still in the table after they were collected")
}

// TestPodLabelSet: a label set answers what the map it was made from
// does, for selectors too, whatever the number of labels (a scan for a
// few, halving for more).
func TestPodLabelSet(t *testing.T) {
	for _, n := range []int{0, 1, 2, 8, 9, 40} {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%02d", (i*7)%n)] = fmt.Sprint("v", i)
		}
		s := newLabelSet(m, labelsHash(m))
		if !s.equalMap(m) || !maps.Equal(s.toMap(), m) && n > 0 || n == 0 && s.toMap() != nil {
			t.Fatalf("%d labels: set %v, map %v", n, s.toMap(), m)
		}
		for k, v := range m {
			if got, ok := s.Lookup(k); !ok || got != v || !s.Has(k) || s.Get(k) != v {
				t.Fatalf("%d labels: %s = %q, %v; want %q", n, k, got, ok, v)
			}
		}
		for _, k := range []string{"", "k", "k99", "zz"} {
			if s.Has(k) || s.Get(k) != "" {
				t.Fatalf("%d labels: has %q", n, k)
			}
		}
		for _, sel := range []string{"k00", "!k00", "k01 in (v1, v2)", "k01 notin (v1)", "k03=v3,k00"} {
			want, err := labels.Parse(sel)
			if err != nil {
				t.Fatal(err)
			}
			if got := want.Matches(s); got != want.Matches(labels.Set(m)) {
				t.Fatalf("%d labels: %q matches the set %v, the map %v", n, sel, got, !got)
			}
		}
		other := maps.Clone(m)
		other["extra"] = "x"
		if s.equalMap(other) || s.equal(newLabelSet(other, labelsHash(other))) || !s.equal(newLabelSet(maps.Clone(m), s.hash)) {
			t.Fatalf("%d labels: equality wrong", n)
		}
	}
	var none *labelSet
	if none.Has("a") || none.pairs() != nil || !none.equalMap(nil) || none.toMap() != nil {
		t.Fatal("the nil set is not empty")
	}
}
