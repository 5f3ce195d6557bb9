package compute

import (
	"slices"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// sel is a parsed label selector with its normalized text (part of group
// keys) and its index hint. It is immutable and shared.
type sel struct {
	labels.Selector
	text string
	hint indexHint
}

func newSel(s labels.Selector) *sel {
	return &sel{Selector: s, text: "{" + s.String() + "}", hint: hintFor(s)}
}

// everything selects every object ("{}").
var everything = newSel(labels.Everything())

// selectorCache remembers parsed selectors: policies repeat the same few
// selectors many times, and parsing (with validation) is the costliest part
// of translating a policy. It is bounded: when full it starts over.
var selectorCache = struct {
	sync.Mutex
	m map[string]selResult
}{m: map[string]selResult{}}

type selResult struct {
	s   *sel
	err error
}

const selectorCacheSize = 16384

// selector parses a label selector (nil is the caller's business: the
// fields that may be nil mean different things when absent).
func selector(ls *metav1.LabelSelector) (*sel, error) {
	if len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0 {
		return everything, nil
	}
	key := selectorCacheKey(ls)
	selectorCache.Lock()
	r, ok := selectorCache.m[key]
	selectorCache.Unlock()
	if ok {
		return r.s, r.err
	}
	parsed, err := metav1.LabelSelectorAsSelector(ls)
	if err == nil {
		r = selResult{s: newSel(parsed)}
	} else {
		r = selResult{err: err}
	}
	selectorCache.Lock()
	if len(selectorCache.m) >= selectorCacheSize {
		clear(selectorCache.m)
	}
	selectorCache.m[key] = r
	selectorCache.Unlock()
	return r.s, r.err
}

// selectorCacheKey encodes a selector unambiguously (length-prefixed
// strings; matchLabels sorted, expressions in order).
func selectorCacheKey(ls *metav1.LabelSelector) string {
	b := make([]byte, 0, 64)
	str := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	keys := make([]string, 0, len(ls.MatchLabels))
	for k := range ls.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	for _, k := range keys {
		str(k)
		str(ls.MatchLabels[k])
	}
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(len(ls.MatchExpressions)), 10)
	for _, r := range ls.MatchExpressions {
		str(r.Key)
		str(string(r.Operator))
		b = strconv.AppendInt(b, int64(len(r.Values)), 10)
		for _, v := range r.Values {
			str(v)
		}
	}
	return string(b)
}
