package policyflows

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
)

func checkOrder(t *testing.T, keys []string, got map[string]uint16, min, max uint16) {
	t.Helper()
	for i, k := range keys {
		p, ok := got[k]
		if !ok || p < min || p > max {
			t.Fatalf("key %s: priority %d (ok=%v) outside [%d,%d]", k, p, ok, min, max)
		}
		if i > 0 && got[keys[i-1]] <= p {
			t.Fatalf("order broken at %s: %d <= %d", k, got[keys[i-1]], p)
		}
	}
}

func TestPriorityAllocatorWholeRange(t *testing.T) {
	// 1001 policy priorities × 60 rules fits in the 63001 slots.
	a := newPriorityAllocator(1000, 64000)
	var keys []string
	for p := 0; p <= 1000; p++ {
		for r := 0; r < 60; r++ {
			keys = append(keys, fmt.Sprintf("%04d/%03d", p, r))
		}
	}
	got, err := a.assign(keys)
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, keys, got, 1000, 64000)
	// Too many rules in one table is an error, not a wrong order.
	if _, err := newPriorityAllocator(1000, 1010).assign(keys[:12]); err == nil {
		t.Fatal("want an error for more rules than priorities")
	}
}

func TestPriorityAllocatorStableAndOrdered(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	a := newPriorityAllocator(1000, 64000)
	set := map[string]bool{}
	moved := 0
	for round := 0; round < 300; round++ {
		// Insert or delete a random policy's rules (up to 100).
		p := r.Intn(1001)
		for i := 0; i < 1+r.Intn(100); i++ {
			k := fmt.Sprintf("%04d/%03d", p, i)
			if set[k] {
				delete(set, k)
			} else {
				set[k] = true
			}
		}
		var keys []string
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		prev := a.prev
		got, err := a.assign(keys)
		if err != nil {
			t.Fatal(err)
		}
		checkOrder(t, keys, got, 1000, 64000)
		for k, v := range got {
			if pv, ok := prev[k]; ok && pv != v {
				moved++
			}
		}
	}
	t.Logf("priorities moved over 300 updates: %d", moved)
}

func BenchmarkPriorityAllocator60k(b *testing.B) {
	var keys []string
	for p := 0; p <= 1000; p++ {
		for r := 0; r < 60; r++ {
			keys = append(keys, fmt.Sprintf("%04d/%03d", p, r))
		}
	}
	a := newPriorityAllocator(1000, 64000)
	for i := 0; i < b.N; i++ {
		if _, err := a.assign(keys); err != nil {
			b.Fatal(err)
		}
	}
}
