package compute

type set[T comparable] map[T]struct{}

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
		if s == nil {
			s = set[T]{}
			ix.byKV[kv] = s
		}
		s[t] = struct{}{}
	}
}

func (ix labelIndex[T]) remove(lbls map[string]string, t T) {
	for k, v := range lbls {
		kv := labelKV{k, v}
		if s := ix.byKV[kv]; s != nil {
			delete(s, t)
			if len(s) == 0 {
				delete(ix.byKV, kv)
			}
		}
	}
}

// candidates visits, for a hinted selector, the objects carrying the hinted
// label; for an unhinted one, it returns false and the caller scans all.
func (ix labelIndex[T]) candidates(h indexHint, visit func(T)) bool {
	if h.Key == "" {
		return false
	}
	for _, v := range h.Values {
		for t := range ix.byKV[labelKV{h.Key, v}] {
			visit(t)
		}
	}
	return true
}

// selectorIndex is the reverse: it finds the selectors (groups) that may
// match a label set, so one pod's label change looks only at groups whose
// selectors mention one of its labels, plus the unhinted ones. Its maps are
// made on first use: most namespaces hold few groups.
type selectorIndex[T comparable] struct {
	byKV map[labelKV]set[T]
	rest set[T]
}

func newSelectorIndex[T comparable]() selectorIndex[T] { return selectorIndex[T]{} }

func (ix *selectorIndex[T]) add(h indexHint, t T) {
	if h.Key == "" {
		if ix.rest == nil {
			ix.rest = set[T]{}
		}
		ix.rest[t] = struct{}{}
		return
	}
	if ix.byKV == nil {
		ix.byKV = map[labelKV]set[T]{}
	}
	for _, v := range h.Values {
		kv := labelKV{h.Key, v}
		s := ix.byKV[kv]
		if s == nil {
			s = set[T]{}
			ix.byKV[kv] = s
		}
		s[t] = struct{}{}
	}
}

func (ix *selectorIndex[T]) remove(h indexHint, t T) {
	if h.Key == "" {
		delete(ix.rest, t)
		return
	}
	for _, v := range h.Values {
		kv := labelKV{h.Key, v}
		if s := ix.byKV[kv]; s != nil {
			delete(s, t)
			if len(s) == 0 {
				delete(ix.byKV, kv)
			}
		}
	}
}

// candidates visits every selector that may match lbls. A selector is
// visited at most once: it is indexed under one key, and a label set has
// one value per key.
func (ix *selectorIndex[T]) candidates(lbls map[string]string, visit func(T)) {
	for t := range ix.rest {
		visit(t)
	}
	if len(ix.byKV) == 0 {
		return
	}
	for k, v := range lbls {
		for t := range ix.byKV[labelKV{k, v}] {
			visit(t)
		}
	}
}

// count is how many selectors candidates would visit for lbls.
func (ix *selectorIndex[T]) count(lbls map[string]string) int {
	n := len(ix.rest)
	if len(ix.byKV) == 0 {
		return n
	}
	for k, v := range lbls {
		n += len(ix.byKV[labelKV{k, v}])
	}
	return n
}
