package compute

import (
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"
)

// labelSet is an object's labels as the engine keeps them (a pod's,
// shared with the prepared pods; a namespace's; a node's): the pairs
// sorted by key in one slice, and their labelsHash. A Go
// map of two labels takes 336 bytes (its smallest table has eight slots);
// this takes 32 and 64, and with one pod per label set (every pod of a
// policy per pod has labels of its own) the maps were about a tenth of
// the controller's live heap. It is what the selectors match (it
// implements labels.Labels; a pointer, so passing it as one allocates
// nothing). Immutable: a pod's is shared by the pods whose labels are equal.
type labelSet struct {
	kvs  []labelKV
	hash uint64
}

// newLabelSet is the set of m's labels (h their labelsHash).
func newLabelSet(m map[string]string, h uint64) *labelSet {
	s := &labelSet{hash: h}
	if len(m) > 0 {
		s.kvs = make([]labelKV, 0, len(m))
		for k, v := range m {
			s.kvs = append(s.kvs, labelKV{k, v})
		}
		slices.SortFunc(s.kvs, func(a, b labelKV) int { return strings.Compare(a.k, b.k) })
	}
	return s
}

// Lookup implements labels.Labels: the value of label k and whether the
// set has it.
func (s *labelSet) Lookup(k string) (string, bool) {
	if s == nil {
		return "", false
	}
	if len(s.kvs) <= 8 { // the usual few labels: a scan beats halving
		for _, kv := range s.kvs {
			if kv.k == k {
				return kv.v, true
			}
		}
		return "", false
	}
	i, ok := slices.BinarySearchFunc(s.kvs, k, func(kv labelKV, k string) int { return strings.Compare(kv.k, k) })
	if !ok {
		return "", false
	}
	return s.kvs[i].v, true
}

// Has implements labels.Labels.
func (s *labelSet) Has(k string) bool {
	_, ok := s.Lookup(k)
	return ok
}

// Get implements labels.Labels.
func (s *labelSet) Get(k string) string {
	v, _ := s.Lookup(k)
	return v
}

// labelSetOf is m's labels as a set of their own (m is not kept).
func labelSetOf(m map[string]string) *labelSet { return newLabelSet(m, labelsHash(m)) }

// pairs are the labels, sorted by key (shared: never modify).
func (s *labelSet) pairs() []labelKV {
	if s == nil {
		return nil
	}
	return s.kvs
}

// equalMap reports whether the set holds exactly m's labels.
func (s *labelSet) equalMap(m map[string]string) bool {
	kvs := s.pairs()
	if len(kvs) != len(m) {
		return false
	}
	for _, kv := range kvs {
		if v, ok := m[kv.k]; !ok || v != kv.v {
			return false
		}
	}
	return true
}

// equal reports whether s and o hold the same labels.
func (s *labelSet) equal(o *labelSet) bool {
	return s == o || slices.Equal(s.pairs(), o.pairs())
}

// toMap is the labels as a new map (nil when there are none).
func (s *labelSet) toMap() map[string]string {
	kvs := s.pairs()
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.k] = kv.v
	}
	return m
}

var labelSeed = maphash.MakeSeed()

// labelsHash hashes a label set independently of map order: the sum of
// its pairs' hashes.
func labelsHash(m map[string]string) uint64 {
	h := uint64(len(m))
	for k, v := range m {
		h += maphash.Comparable(labelSeed, labelKV{k, v})
	}
	return h
}

// podLabelSets shares one label set among the pods whose labels are equal
// (the replicas of a workload usually are), prepared (PreparePod) or given
// to an engine as objects: a cache of prepared pods and the engines then
// hold a set per distinct labels, not one per pod (on 100,000 pods a map
// per pod was a tenth of the controller's memory). The table is
// process-wide, as the caches are; an entry lives as long as a prepared
// pod or a pod's state holds it: the table points to it weakly, and a
// cleanup forgets it once it is collected (no count of users to keep
// right).
var podLabelSets = labelInterner{byHash: map[uint64]weak.Pointer[labelSet]{}}

// labelInterner holds one entry per hash in byHash (nearly every hash
// has one label set; a slice per hash took 8 bytes of an allocation and
// 16 more of the map's slot for each) and the rare others in more.
type labelInterner struct {
	mu     sync.Mutex
	byHash map[uint64]weak.Pointer[labelSet]
	more   map[uint64][]weak.Pointer[labelSet]
}

// intern returns the shared label set equal to m (whose labelsHash is h),
// making it when none is held.
func (in *labelInterner) intern(m map[string]string, h uint64) *labelSet {
	in.mu.Lock()
	defer in.mu.Unlock()
	first, taken := in.byHash[h]
	if s := first.Value(); s != nil && s.equalMap(m) {
		return s
	}
	for _, w := range in.more[h] {
		if s := w.Value(); s != nil && s.equalMap(m) {
			return s
		}
	}
	s := newLabelSet(m, h)
	if !taken || first.Value() == nil {
		in.byHash[h] = weak.Make(s)
	} else {
		if in.more == nil {
			in.more = map[uint64][]weak.Pointer[labelSet]{}
		}
		in.more[h] = append(in.more[h], weak.Make(s))
	}
	runtime.AddCleanup(s, forgetPreparedLabels, h)
	return s
}

// forgetPreparedLabels drops podLabelSets' collected entries of hash h
// (a function, not the method value, which would take an allocation of
// its own for every entry).
func forgetPreparedLabels(h uint64) { podLabelSets.forget(h) }

// forget drops the collected entries of hash h.
func (in *labelInterner) forget(h uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if w, ok := in.byHash[h]; ok && w.Value() == nil {
		delete(in.byHash, h)
	}
	if len(in.more[h]) == 0 {
		return
	}
	live := slices.DeleteFunc(in.more[h], func(w weak.Pointer[labelSet]) bool { return w.Value() == nil })
	if len(live) == 0 {
		delete(in.more, h)
	} else {
		in.more[h] = live
	}
}

// held counts the entries of hash h (live or not yet forgotten).
func (in *labelInterner) held(h uint64) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := len(in.more[h])
	if _, ok := in.byHash[h]; ok {
		n++
	}
	return n
}
