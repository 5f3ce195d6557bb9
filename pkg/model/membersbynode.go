package model

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// NodeMembers are a group's members on one node.
type NodeMembers struct {
	Node    string
	Members []GroupMember
}

// MembersByNode are an applied-to group's members by node: one entry per
// node, sorted by node name (byte order). It is a sorted list rather than
// a Go map because most groups have pods on one node or a few: a map's
// smallest table has eight slots, about 400 bytes for a one-node group
// against 48 for this list (10,000 one-pod groups, 3.4 MiB of a
// snapshot). Its JSON is exactly a map's (an object keyed by node, keys
// in order; null for a nil list), so agents and tools read it as before.
// Like the objects holding it, a list made is never modified.
type MembersByNode []NodeMembers

// MembersByNodeOf is byNode as a MembersByNode (every entry, empty lists
// included; the member lists are shared, not copied). A nil map gives a
// nil list.
func MembersByNodeOf(byNode map[string][]GroupMember) MembersByNode {
	if byNode == nil {
		return nil
	}
	m := make(MembersByNode, 0, len(byNode))
	for n, ms := range byNode {
		m = append(m, NodeMembers{Node: n, Members: ms})
	}
	slices.SortFunc(m, func(a, b NodeMembers) int { return strings.Compare(a.Node, b.Node) })
	return m
}

// Index is the index of node's entry and true, or where it would go and
// false.
func (m MembersByNode) Index(node string) (int, bool) {
	if len(m) == 1 { // most groups: no search
		c := strings.Compare(m[0].Node, node)
		if c >= 0 {
			return 0, c == 0
		}
		return 1, false
	}
	return slices.BinarySearchFunc(m, node, func(e NodeMembers, n string) int { return strings.Compare(e.Node, n) })
}

// Get returns node's members (nil when it has none).
func (m MembersByNode) Get(node string) []GroupMember {
	if i, ok := m.Index(node); ok {
		return m[i].Members
	}
	return nil
}

// Has reports whether node has an entry (possibly an empty list).
func (m MembersByNode) Has(node string) bool {
	_, ok := m.Index(node)
	return ok
}

// Append appends ms to node's members, adding node's entry in order if it
// has none (for building a list; never on a list an object holds).
func (m *MembersByNode) Append(node string, ms ...GroupMember) {
	i, ok := m.Index(node)
	if !ok {
		*m = slices.Insert(*m, i, NodeMembers{Node: node})
	}
	(*m)[i].Members = append((*m)[i].Members, ms...)
}

// MarshalJSON writes the list as encoding/json writes a
// map[string][]GroupMember: an object keyed by node in byte order, or null
// for a nil list.
func (m MembersByNode) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, e := range m {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(e.Node)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		v, err := json.Marshal(e.Members)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads what encoding/json reads into a
// map[string][]GroupMember (a repeated key: the last one counts; null: a
// nil list).
func (m *MembersByNode) UnmarshalJSON(data []byte) error {
	var byNode map[string][]GroupMember
	if err := json.Unmarshal(data, &byNode); err != nil {
		return err
	}
	*m = MembersByNodeOf(byNode)
	return nil
}
