package compute

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
// of translating a policy. It is bounded: when full it starts over. The
// selectors that fail to parse (few) are kept apart, so that an entry of
// the many that parse is a pointer alone (a result with room for an error
// took 16 bytes more of every slot).
var selectorCache = struct {
	sync.Mutex
	m   map[string]*sel
	bad map[string]error
}{m: map[string]*sel{}, bad: map[string]error{}}

const selectorCacheSize = 16384

// selector parses a label selector (nil is the caller's business: the
// fields that may be nil mean different things when absent).
func selector(ls *metav1.LabelSelector) (*sel, error) {
	if len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0 {
		return everything, nil
	}
	key := selectorCacheKey(ls)
	selectorCache.Lock()
	s, ok := selectorCache.m[key]
	err, bad := selectorCache.bad[key]
	selectorCache.Unlock()
	if ok || bad {
		return s, err
	}
	parsed, err := metav1.LabelSelectorAsSelector(ls)
	if err == nil {
		s = newSel(parsed)
	}
	selectorCache.Lock()
	if len(selectorCache.m)+len(selectorCache.bad) >= selectorCacheSize {
		clear(selectorCache.m)
		clear(selectorCache.bad)
	}
	if err == nil {
		selectorCache.m[key] = s
	} else {
		selectorCache.bad[key] = err
	}
	selectorCache.Unlock()
	return s, err
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

// groupKind is what a group's members are.
type groupKind int

const (
	groupPods groupKind = iota
	groupNodes
	// groupNamedPort holds every pod (cluster-wide) that declares a
	// container port with one name; it serves only as an address group for
	// resolving that named port on ipBlock destinations (model.Rule's
	// NamedPortGroups), never as a peer.
	groupNamedPort
)

// groupSpec is a normalized selector: the pods matching podSel in one
// namespace (nsSel nil) or in the namespaces matching nsSel, or the nodes
// matching nodeSel. Its key is its identity: policies whose selectors
// normalize to the same key share one group.
type groupSpec struct {
	kind      groupKind
	namespace string
	nsSel     *sel
	podSel    *sel
	nodeSel   *sel
	key       string
}

// namedPortKeyPrefix starts the key of a named-port group; the port's
// name follows (a field of its own took 16 bytes of every groupSpec).
const namedPortKeyPrefix = "namedPort="

func namedPortGroup(name string) groupSpec {
	return groupSpec{kind: groupNamedPort, key: namedPortKeyPrefix + name}
}

// portName is the port name of a named-port group ("" for the others).
func (s *groupSpec) portName() string {
	if s.kind != groupNamedPort {
		return ""
	}
	return strings.TrimPrefix(s.key, namedPortKeyPrefix)
}

func podGroupInNamespace(ns string, podSel *sel) groupSpec {
	return groupSpec{kind: groupPods, namespace: ns, podSel: podSel,
		key: "namespace=" + ns + " podSelector=" + podSel.text}
}

func podGroupInNamespaces(nsSel, podSel *sel) groupSpec {
	return groupSpec{kind: groupPods, nsSel: nsSel, podSel: podSel,
		key: "namespaceSelector=" + nsSel.text + " podSelector=" + podSel.text}
}

func nodeGroup(nodeSel *sel) groupSpec {
	return groupSpec{kind: groupNodes, nodeSel: nodeSel, key: "nodeSelector=" + nodeSel.text}
}

// groupID derives a stable, short ID from a normalized selector key.
func groupID(prefix, key string) string { return formatGroupID(prefix, keyHash(key)) }

// keyHash is the hash of a normalized selector key that its group IDs
// carry: the first 64 bits of its SHA-256. Two keys with one hash would be
// one group to the agents, and keys come from user-written selectors: a
// namespace's owner could search for a selector of theirs whose hash is an
// AdminNetworkPolicy group's. FNV-1a, used before, yields such second
// preimages to arithmetic; SHA-256 asks about 2^64 attempts.
func keyHash(key string) uint64 {
	// The key copied into a buffer on the stack (most keys are shorter
	// than 96 bytes): []byte(key) allocated a copy of every key longer
	// than 32 bytes.
	var buf [96]byte
	sum := sha256.Sum256(append(buf[:0], key...))
	return binary.BigEndian.Uint64(sum[:8])
}

// formatGroupID is a group's ID in one role: the role's prefix, '-' and
// the key's hash in hex (16 lower-case digits, most significant first).
func formatGroupID(prefix string, h uint64) string {
	var buf [24]byte
	b := append(buf[:0], prefix...)
	b = append(b, '-')
	return string(appendHash(b, h))
}

// groupIDs are formatGroupID("atg", h) and formatGroupID("ag", h) in one
// allocation (the two strings share it, 39 bytes: the size class of the two
// apart): every new group needs both, and formatting them through
// encoding/hex, three allocations each, took about a tenth of applying
// small namespaces' 75,000 NetworkPolicies.
func groupIDs(h uint64) (atgID, agID string) {
	var buf [39]byte
	b := append(buf[:0], "atg-"...)
	b = appendHash(b, h)
	b = append(b, "ag-"...)
	b = appendHash(b, h)
	s := string(b)
	return s[:20], s[20:]
}

// appendHash appends h's 16 lower-case hex digits, most significant first
// (through an array on the stack: no allocation).
func appendHash(b []byte, h uint64) []byte {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], h)
	return hex.AppendEncode(b, raw[:])
}

// parseGroupID is the key hash of an ID of the role prefix names; false
// when id is not one.
func parseGroupID(prefix, id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, prefix+"-")
	if !ok || len(rest) != 16 {
		return 0, false
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(rest)); err != nil {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[:]), true
}
