package compute

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

type set[T comparable] map[T]struct{}

// labelIndex finds objects by one of their labels: key → value → objects.
// It lets a new group find its candidate members without scanning every pod.
type labelIndex[T comparable] struct {
	byKV map[string]map[string]set[T]
}

func newLabelIndex[T comparable]() labelIndex[T] {
	return labelIndex[T]{byKV: map[string]map[string]set[T]{}}
}

func (ix labelIndex[T]) add(lbls map[string]string, t T) {
	for k, v := range lbls {
		vals := ix.byKV[k]
		if vals == nil {
			vals = map[string]set[T]{}
			ix.byKV[k] = vals
		}
		s := vals[v]
		if s == nil {
			s = set[T]{}
			vals[v] = s
		}
		s[t] = struct{}{}
	}
}

func (ix labelIndex[T]) remove(lbls map[string]string, t T) {
	for k, v := range lbls {
		vals := ix.byKV[k]
		if vals == nil {
			continue
		}
		s := vals[v]
		delete(s, t)
		if len(s) == 0 {
			delete(vals, v)
			if len(vals) == 0 {
				delete(ix.byKV, k)
			}
		}
	}
}

// indexHint is the equality requirement a selector is indexed by: every
// object the selector matches carries Key with one of Values. A selector
// without such a requirement has an empty Key and must be checked against
// every object.
type indexHint struct {
	Key    string
	Values []string
}

// hintFor picks the first (requirements are sorted by key) equality or set
// membership requirement of a parsed selector.
func hintFor(sel labels.Selector) indexHint {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return indexHint{}
	}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			return indexHint{Key: r.Key(), Values: r.Values().List()}
		}
	}
	return indexHint{}
}

// candidates visits, for a hinted selector, the objects carrying the hinted
// label; for an unhinted one, it returns false and the caller scans all.
func (ix labelIndex[T]) candidates(h indexHint, visit func(T)) bool {
	if h.Key == "" {
		return false
	}
	vals := ix.byKV[h.Key]
	for _, v := range h.Values {
		for t := range vals[v] {
			visit(t)
		}
	}
	return true
}

// selectorIndex is the reverse: it finds the selectors (groups) that may
// match a label set, so one pod's label change looks only at groups whose
// selectors mention one of its labels, plus the unhinted ones.
type selectorIndex[T comparable] struct {
	byKV map[string]map[string]set[T]
	rest set[T]
}

func newSelectorIndex[T comparable]() selectorIndex[T] {
	return selectorIndex[T]{byKV: map[string]map[string]set[T]{}, rest: set[T]{}}
}

func (ix selectorIndex[T]) add(h indexHint, t T) {
	if h.Key == "" {
		ix.rest[t] = struct{}{}
		return
	}
	vals := ix.byKV[h.Key]
	if vals == nil {
		vals = map[string]set[T]{}
		ix.byKV[h.Key] = vals
	}
	for _, v := range h.Values {
		s := vals[v]
		if s == nil {
			s = set[T]{}
			vals[v] = s
		}
		s[t] = struct{}{}
	}
}

func (ix selectorIndex[T]) remove(h indexHint, t T) {
	if h.Key == "" {
		delete(ix.rest, t)
		return
	}
	vals := ix.byKV[h.Key]
	for _, v := range h.Values {
		s := vals[v]
		delete(s, t)
		if len(s) == 0 {
			delete(vals, v)
		}
	}
	if len(vals) == 0 {
		delete(ix.byKV, h.Key)
	}
}

func (ix selectorIndex[T]) empty() bool { return len(ix.byKV) == 0 && len(ix.rest) == 0 }

// candidates visits every selector that may match lbls. A selector is
// visited at most once: it is indexed under one key, and a label set has
// one value per key.
func (ix selectorIndex[T]) candidates(lbls map[string]string, visit func(T)) {
	for t := range ix.rest {
		visit(t)
	}
	if len(ix.byKV) < len(lbls) {
		for k, vals := range ix.byKV {
			if v, ok := lbls[k]; ok {
				for t := range vals[v] {
					visit(t)
				}
			}
		}
		return
	}
	for k, v := range lbls {
		for t := range ix.byKV[k][v] {
			visit(t)
		}
	}
}
