package compute

import (
	"iter"
	"slices"
)

// smallMax is how many entries a set or counts keeps in a slice before it
// becomes a map. Most of the engine's sets are tiny (a pod is in a few
// groups, most groups hold a few pods or serve one policy): a Go map costs
// a few hundred bytes and an allocation even for one entry, a slice one
// small allocation; a linear search over sixteen keys is as fast as a
// hash lookup.
const smallMax = 16

// smallMap is a map that is a slice of entries while small and a Go map
// beyond smallMax (it stays one). The zero value is empty. While all()
// runs, the entry being visited may be deleted; nothing else may change.
type smallMap[K comparable, V any] struct {
	small []entry[K, V]
	m     map[K]V
}

// entry puts the value first: a zero-size value (a set's) then takes no
// room (a zero-size last field is padded).
type entry[K comparable, V any] struct {
	val V
	key K
}

func (s *smallMap[K, V]) get(k K) (V, bool) {
	if s.m != nil {
		v, ok := s.m[k]
		return v, ok
	}
	for _, e := range s.small {
		if e.key == k {
			return e.val, true
		}
	}
	var zero V
	return zero, false
}

// put sets k's value and reports whether k was absent.
func (s *smallMap[K, V]) put(k K, v V) bool {
	if s.m != nil {
		// One hash lookup, not two: the length tells whether k was new.
		n := len(s.m)
		s.m[k] = v
		return len(s.m) > n
	}
	for i := range s.small {
		if s.small[i].key == k {
			s.small[i].val = v
			return false
		}
	}
	if len(s.small) < smallMax {
		s.small = append(s.small, entry[K, V]{v, k})
		return true
	}
	s.m = make(map[K]V, 2*smallMax)
	for _, e := range s.small {
		s.m[e.key] = e.val
	}
	s.m[k] = v
	s.small = nil
	return true
}

// delete removes k and reports whether it was present.
func (s *smallMap[K, V]) delete(k K) bool {
	if s.m != nil {
		n := len(s.m)
		delete(s.m, k)
		return len(s.m) < n
	}
	for i := range s.small {
		if s.small[i].key == k {
			last := len(s.small) - 1
			s.small[i] = s.small[last]
			s.small[last] = entry[K, V]{}
			s.small = s.small[:last]
			if last == 0 {
				s.small = nil
			}
			return true
		}
	}
	return false
}

// grow makes room for n more entries while they stay in the slice: one
// allocation of the size they need instead of the doublings from one
// entry (each its own allocation and copy) that appending one at a time
// makes. Nothing when they would not fit in the slice anyway.
func (s *smallMap[K, V]) grow(n int) {
	if s.m == nil && len(s.small)+n <= smallMax {
		s.small = slices.Grow(s.small, n)
	}
}

func (s *smallMap[K, V]) len() int {
	if s.m != nil {
		return len(s.m)
	}
	return len(s.small)
}

// all visits every entry. A slice is visited from its end, so deleting
// the visited entry (which moves the last, already visited, into its
// place) skips nothing.
func (s *smallMap[K, V]) all() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if s.m != nil {
			for k, v := range s.m {
				if !yield(k, v) {
					return
				}
			}
			return
		}
		for i := len(s.small) - 1; i >= 0; i-- {
			if i >= len(s.small) {
				continue
			}
			if e := s.small[i]; !yield(e.key, e.val) {
				return
			}
		}
	}
}

// keys visits every key, as all does.
func (s *smallMap[K, V]) keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range s.all() {
			if !yield(k) {
				return
			}
		}
	}
}

// set is a smallMap of keys alone.
type set[T comparable] struct{ smallMap[T, struct{}] }

// add adds v and reports whether it was absent.
func (s *set[T]) add(v T) bool { return s.put(v, struct{}{}) }

// remove removes v and reports whether it was present.
func (s *set[T]) remove(v T) bool { return s.delete(v) }

func (s *set[T]) has(v T) bool {
	_, ok := s.get(v)
	return ok
}

// podList is a set of pods in which every pod knows its own position (in
// the int32 field pos names), for sets a pod is in at most one of: a
// namespace's pods, a node's. Adding appends and removing moves the last
// pod into the hole, with no hashing: as Go maps of hundreds of pods per
// namespace and per node, these two sets were about a fifth of applying
// a new pod (every insert a probe of a table too large for the cache,
// which grew by rehashing).
type podList struct{ pods []*podState }

// add appends p, which must not be in the list.
func (l *podList) add(p *podState, pos func(*podState) *int32) {
	*pos(p) = int32(len(l.pods))
	l.pods = append(l.pods, p)
}

// remove takes p out of the list and reports whether it was there.
func (l *podList) remove(p *podState, pos func(*podState) *int32) bool {
	i := int(*pos(p))
	if i < 0 || i >= len(l.pods) || l.pods[i] != p {
		return false
	}
	last := len(l.pods) - 1
	moved := l.pods[last]
	l.pods[i] = moved
	*pos(moved) = int32(i)
	l.pods[last] = nil
	l.pods = l.pods[:last]
	switch {
	case last == 0:
		l.pods = nil
	case cap(l.pods) > 64 && last < cap(l.pods)/4:
		// Let a list that shrank a lot give its array back.
		l.pods = append([]*podState(nil), l.pods...)
	}
	return true
}

func (l *podList) len() int { return len(l.pods) }

// nsPos and nodePos name a pod's positions in its namespace's and its
// node's podList.
func nsPos(p *podState) *int32   { return &p.nsPos }
func nodePos(p *podState) *int32 { return &p.nodePos }

// counts is a positive count per key; a key whose count drops to zero is
// removed.
type counts[K comparable] struct{ smallMap[K, int] }

// add adds delta to k's count and returns the new count.
func (c *counts[K]) add(k K, delta int) int {
	n, _ := c.get(k)
	n += delta
	if n == 0 {
		c.delete(k)
	} else {
		c.put(k, n)
	}
	return n
}

// inc adds one to k's count and reports whether k was absent (its count
// is 1 now): add(k, 1) == 1 with one hash of k instead of two once the
// counts are a Go map (a group's per-node counts take one per pod that
// joins it).
func (c *counts[K]) inc(k K) bool {
	if c.m == nil {
		for i := range c.small {
			if c.small[i].key == k {
				c.small[i].val++
				return false
			}
		}
		return c.put(k, 1)
	}
	n := len(c.m)
	c.m[k]++
	return len(c.m) > n
}

// count is k's count (0 when absent).
func (c *counts[K]) count(k K) int {
	n, _ := c.get(k)
	return n
}

// labelKV is one label, the key of both indexes below.
type labelKV struct{ k, v string }

// byLabel maps labels to sets of objects: the table of both indexes
// below. A smallMap, not a Go map: each namespace has an index of its pods
// and one of its groups, and most namespaces hold a few labels (the 25,000
// namespaces of small namespaces two each): a Go map per index took about
// 600 bytes, 14 MiB of pod indexes alone.
type byLabel[T comparable] struct {
	m smallMap[labelKV, set[T]]
}

// add puts t in kv's set.
func (b *byLabel[T]) add(kv labelKV, t T) {
	s, _ := b.m.get(kv)
	s.add(t)
	b.m.put(kv, s)
}

// remove takes t out of kv's set, and the set out when it is empty.
func (b *byLabel[T]) remove(kv labelKV, t T) {
	s, ok := b.m.get(kv)
	if !ok {
		return
	}
	s.remove(t)
	if s.len() == 0 {
		b.m.delete(kv)
	} else {
		b.m.put(kv, s)
	}
}

// set is kv's set (empty when absent).
func (b *byLabel[T]) set(kv labelKV) set[T] {
	s, _ := b.m.get(kv)
	return s
}

// labelIndex finds objects by one of their labels. It lets a new group find
// its candidate members without scanning every pod.
type labelIndex[T comparable] struct {
	byKV byLabel[T]
}

func newLabelIndex[T comparable]() labelIndex[T] { return labelIndex[T]{} }

func (ix *labelIndex[T]) add(lbls *labelSet, t T) {
	for _, kv := range lbls.pairs() {
		ix.byKV.add(kv, t)
	}
}

func (ix *labelIndex[T]) remove(lbls *labelSet, t T) {
	for _, kv := range lbls.pairs() {
		ix.byKV.remove(kv, t)
	}
}

// candidates visits, for a hinted selector, the objects carrying the hinted
// label; for an unhinted one, it returns false and the caller scans all.
// visit must not change the index.
func (ix *labelIndex[T]) candidates(h indexHint, visit func(T)) bool {
	if h.Key == "" {
		return false
	}
	for _, v := range h.Values {
		s := ix.byKV.set(labelKV{h.Key, v})
		for t := range s.all() {
			visit(t)
		}
	}
	return true
}

// selectorIndex is the reverse: it finds the selectors (groups) that may
// match a label set, so one pod's label change looks only at groups whose
// selectors mention one of its labels, plus the unhinted ones.
type selectorIndex[T comparable] struct {
	byKV byLabel[T]
	rest set[T]
}

func newSelectorIndex[T comparable]() selectorIndex[T] { return selectorIndex[T]{} }

func (ix *selectorIndex[T]) add(h indexHint, t T) {
	if h.Key == "" {
		ix.rest.add(t)
		return
	}
	for _, v := range h.Values {
		ix.byKV.add(labelKV{h.Key, v}, t)
	}
}

func (ix *selectorIndex[T]) remove(h indexHint, t T) {
	if h.Key == "" {
		ix.rest.remove(t)
		return
	}
	for _, v := range h.Values {
		ix.byKV.remove(labelKV{h.Key, v}, t)
	}
}

// candidates visits every selector that may match lbls. A selector is
// visited at most once: it is indexed under one key, and a label set has
// one value per key. visit must not change the index.
func (ix *selectorIndex[T]) candidates(lbls *labelSet, visit func(T)) {
	for t := range ix.rest.all() {
		visit(t)
	}
	if ix.byKV.m.len() == 0 {
		return
	}
	for _, kv := range lbls.pairs() {
		s := ix.byKV.set(kv)
		for t := range s.all() {
			visit(t)
		}
	}
}

// count is how many selectors candidates would visit for lbls.
func (ix *selectorIndex[T]) count(lbls *labelSet) int {
	n := ix.rest.len()
	if ix.byKV.m.len() == 0 {
		return n
	}
	for _, kv := range lbls.pairs() {
		s := ix.byKV.set(kv)
		n += s.len()
	}
	return n
}
