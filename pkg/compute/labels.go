package compute

import (
	"hash/maphash"
	"maps"
	"runtime"
	"slices"
	"sync"
	"weak"
)

// labelSets shares one immutable label map among the pods whose labels are
// equal (the replicas of a workload usually are): a map per pod would be
// most of the engine's memory for pods. Entries are reference counted and
// forgotten when no pod uses them.
type labelSets struct {
	byHash map[uint64][]*labelSet
}

// labelSet is one shared label map; nothing may modify labels.
type labelSet struct {
	labels map[string]string
	hash   uint64
	refs   int
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

// intern returns the shared set equal to m (whose labelsHash is h),
// copying m when no pod has such labels yet, and counts one more user.
// m itself is kept only if immutable (nothing will ever modify it).
func (ls *labelSets) intern(m map[string]string, h uint64, immutable bool) *labelSet {
	if ls.byHash == nil {
		ls.byHash = map[uint64][]*labelSet{}
	}
	for _, s := range ls.byHash[h] {
		if maps.Equal(s.labels, m) {
			s.refs++
			return s
		}
	}
	c := m
	if !immutable {
		c = maps.Clone(m)
	}
	if c == nil {
		c = map[string]string{}
	}
	s := &labelSet{labels: c, hash: h, refs: 1}
	ls.byHash[h] = append(ls.byHash[h], s)
	return s
}

// release counts one user fewer of s and forgets it after the last.
func (ls *labelSets) release(s *labelSet) {
	if s.refs--; s.refs > 0 {
		return
	}
	bucket := ls.byHash[s.hash]
	for i, x := range bucket {
		if x == s {
			bucket = append(bucket[:i], bucket[i+1:]...)
			break
		}
	}
	if len(bucket) == 0 {
		delete(ls.byHash, s.hash)
	} else {
		ls.byHash[s.hash] = bucket
	}
}

// preparedLabels shares one label map among the prepared pods whose labels
// are equal (PreparePod): a cache of prepared pods then holds a map per
// distinct label set, not one per pod (on 100,000 pods that was a tenth of
// the controller's memory). The table is process-wide, as the caches are;
// an entry lives as long as a prepared pod holds it: the table points to
// it weakly, and a cleanup forgets it once it is collected.
var preparedLabels = labelInterner{byHash: map[uint64]weak.Pointer[sharedLabels]{}}

// sharedLabels is one label map shared by prepared pods; nothing may
// modify it.
type sharedLabels struct{ labels map[string]string }

// labelInterner holds one entry per hash in byHash (nearly every hash
// has one label set; a slice per hash took 8 bytes of an allocation and
// 16 more of the map's slot for each) and the rare others in more.
type labelInterner struct {
	mu     sync.Mutex
	byHash map[uint64]weak.Pointer[sharedLabels]
	more   map[uint64][]weak.Pointer[sharedLabels]
}

// intern returns the shared labels equal to m (whose labelsHash is h),
// making m itself the shared map when none is held: m must never be
// modified afterwards.
func (in *labelInterner) intern(m map[string]string, h uint64) *sharedLabels {
	in.mu.Lock()
	defer in.mu.Unlock()
	first, taken := in.byHash[h]
	if s := first.Value(); s != nil && maps.Equal(s.labels, m) {
		return s
	}
	for _, w := range in.more[h] {
		if s := w.Value(); s != nil && maps.Equal(s.labels, m) {
			return s
		}
	}
	s := &sharedLabels{labels: m}
	if !taken || first.Value() == nil {
		in.byHash[h] = weak.Make(s)
	} else {
		if in.more == nil {
			in.more = map[uint64][]weak.Pointer[sharedLabels]{}
		}
		in.more[h] = append(in.more[h], weak.Make(s))
	}
	runtime.AddCleanup(s, forgetPreparedLabels, h)
	return s
}

// forgetPreparedLabels drops preparedLabels' collected entries of hash h
// (a function, not the method value, which would take an allocation of
// its own for every entry).
func forgetPreparedLabels(h uint64) { preparedLabels.forget(h) }

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
	live := slices.DeleteFunc(in.more[h], func(w weak.Pointer[sharedLabels]) bool { return w.Value() == nil })
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
