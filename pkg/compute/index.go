package compute

import "iter"

// smallMax is how many elements a set or counts keeps in a slice before it
// becomes a map. Most of the engine's sets are tiny (a pod is in a few
// groups, most groups hold a few pods or serve one policy): a Go map costs
// a few hundred bytes and an allocation even for one element, a slice one
// small allocation; a linear search over sixteen keys is as fast as a
// hash lookup.
const smallMax = 16

// set is a set that is a slice while small and a map beyond smallMax (it
// stays a map). The zero value is an empty set. While all() runs, the
// element being visited may be removed; nothing else may change.
type set[T comparable] struct {
	small []T
	m     map[T]struct{}
}

// add adds v and reports whether it was absent.
func (s *set[T]) add(v T) bool {
	if s.m != nil {
		if _, ok := s.m[v]; ok {
			return false
		}
		s.m[v] = struct{}{}
		return true
	}
	for _, x := range s.small {
		if x == v {
			return false
		}
	}
	if len(s.small) < smallMax {
		s.small = append(s.small, v)
		return true
	}
	s.m = make(map[T]struct{}, 2*smallMax)
	for _, x := range s.small {
		s.m[x] = struct{}{}
	}
	s.m[v] = struct{}{}
	s.small = nil
	return true
}

// remove removes v and reports whether it was present.
func (s *set[T]) remove(v T) bool {
	if s.m != nil {
		if _, ok := s.m[v]; !ok {
			return false
		}
		delete(s.m, v)
		return true
	}
	for i, x := range s.small {
		if x == v {
			last := len(s.small) - 1
			s.small[i] = s.small[last]
			var zero T
			s.small[last] = zero
			s.small = s.small[:last]
			if last == 0 {
				s.small = nil
			}
			return true
		}
	}
	return false
}

func (s *set[T]) has(v T) bool {
	if s.m != nil {
		_, ok := s.m[v]
		return ok
	}
	for _, x := range s.small {
		if x == v {
			return true
		}
	}
	return false
}

func (s *set[T]) len() int {
	if s.m != nil {
		return len(s.m)
	}
	return len(s.small)
}

// all visits every element. A slice is visited from its end, so removing
// the visited element (which moves the last, already visited, into its
// place) skips nothing.
func (s *set[T]) all() iter.Seq[T] {
	return func(yield func(T) bool) {
		if s.m != nil {
			for v := range s.m {
				if !yield(v) {
					return
				}
			}
			return
		}
		for i := len(s.small) - 1; i >= 0; i-- {
			if i >= len(s.small) {
				continue
			}
			if !yield(s.small[i]) {
				return
			}
		}
	}
}

// counts is a positive count per key, a slice while small and a map beyond
// smallMax, as set is. Keys whose count drops to zero are removed.
type counts[K comparable] struct {
	small []countOf[K]
	m     map[K]int
}

type countOf[K comparable] struct {
	key K
	n   int
}

// add adds delta to k's count and returns the new count.
func (c *counts[K]) add(k K, delta int) int {
	if c.m != nil {
		n := c.m[k] + delta
		if n == 0 {
			delete(c.m, k)
		} else {
			c.m[k] = n
		}
		return n
	}
	for i := range c.small {
		if c.small[i].key == k {
			n := c.small[i].n + delta
			if n != 0 {
				c.small[i].n = n
				return n
			}
			last := len(c.small) - 1
			c.small[i] = c.small[last]
			c.small[last] = countOf[K]{}
			c.small = c.small[:last]
			if last == 0 {
				c.small = nil
			}
			return 0
		}
	}
	if delta == 0 {
		return 0
	}
	if len(c.small) < smallMax {
		c.small = append(c.small, countOf[K]{k, delta})
		return delta
	}
	c.m = make(map[K]int, 2*smallMax)
	for _, e := range c.small {
		c.m[e.key] = e.n
	}
	c.m[k] = delta
	c.small = nil
	return delta
}

func (c *counts[K]) get(k K) int {
	if c.m != nil {
		return c.m[k]
	}
	for _, e := range c.small {
		if e.key == k {
			return e.n
		}
	}
	return 0
}

func (c *counts[K]) len() int {
	if c.m != nil {
		return len(c.m)
	}
	return len(c.small)
}

// keys visits every key (with a non-zero count); nothing may change
// meanwhile.
func (c *counts[K]) keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		if c.m != nil {
			for k := range c.m {
				if !yield(k) {
					return
				}
			}
			return
		}
		for _, e := range c.small {
			if !yield(e.key) {
				return
			}
		}
	}
}

// labelKV is one label, the key of both indexes below.
type labelKV struct{ k, v string }

// labelIndex finds objects by one of their labels. It lets a new group find
// its candidate members without scanning every pod.
type labelIndex[T comparable] struct {
	byKV map[labelKV]set[T]
}

func newLabelIndex[T comparable]() labelIndex[T] {
	return labelIndex[T]{byKV: map[labelKV]set[T]{}}
}

func (ix labelIndex[T]) add(lbls map[string]string, t T) {
	for k, v := range lbls {
		kv := labelKV{k, v}
		s := ix.byKV[kv]
		s.add(t)
		ix.byKV[kv] = s
	}
}

func (ix labelIndex[T]) remove(lbls map[string]string, t T) {
	for k, v := range lbls {
		kv := labelKV{k, v}
		s, ok := ix.byKV[kv]
		if !ok {
			continue
		}
		s.remove(t)
		if s.len() == 0 {
			delete(ix.byKV, kv)
		} else {
			ix.byKV[kv] = s
		}
	}
}

// candidates visits, for a hinted selector, the objects carrying the hinted
// label; for an unhinted one, it returns false and the caller scans all.
// visit must not change the index.
func (ix labelIndex[T]) candidates(h indexHint, visit func(T)) bool {
	if h.Key == "" {
		return false
	}
	for _, v := range h.Values {
		s := ix.byKV[labelKV{h.Key, v}]
		for t := range s.all() {
			visit(t)
		}
	}
	return true
}

// selectorIndex is the reverse: it finds the selectors (groups) that may
// match a label set, so one pod's label change looks only at groups whose
// selectors mention one of its labels, plus the unhinted ones. Its map is
// made on first use: most namespaces hold few groups.
type selectorIndex[T comparable] struct {
	byKV map[labelKV]set[T]
	rest set[T]
}

func newSelectorIndex[T comparable]() selectorIndex[T] { return selectorIndex[T]{} }

func (ix *selectorIndex[T]) add(h indexHint, t T) {
	if h.Key == "" {
		ix.rest.add(t)
		return
	}
	if ix.byKV == nil {
		ix.byKV = map[labelKV]set[T]{}
	}
	for _, v := range h.Values {
		kv := labelKV{h.Key, v}
		s := ix.byKV[kv]
		s.add(t)
		ix.byKV[kv] = s
	}
}

func (ix *selectorIndex[T]) remove(h indexHint, t T) {
	if h.Key == "" {
		ix.rest.remove(t)
		return
	}
	for _, v := range h.Values {
		kv := labelKV{h.Key, v}
		s, ok := ix.byKV[kv]
		if !ok {
			continue
		}
		s.remove(t)
		if s.len() == 0 {
			delete(ix.byKV, kv)
		} else {
			ix.byKV[kv] = s
		}
	}
}

// candidates visits every selector that may match lbls. A selector is
// visited at most once: it is indexed under one key, and a label set has
// one value per key. visit must not change the index.
func (ix *selectorIndex[T]) candidates(lbls map[string]string, visit func(T)) {
	for t := range ix.rest.all() {
		visit(t)
	}
	if len(ix.byKV) == 0 {
		return
	}
	for k, v := range lbls {
		s := ix.byKV[labelKV{k, v}]
		for t := range s.all() {
			visit(t)
		}
	}
}

// count is how many selectors candidates would visit for lbls.
func (ix *selectorIndex[T]) count(lbls map[string]string) int {
	n := ix.rest.len()
	if len(ix.byKV) == 0 {
		return n
	}
	for k, v := range lbls {
		s := ix.byKV[labelKV{k, v}]
		n += s.len()
	}
	return n
}
