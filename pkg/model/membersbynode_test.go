package model

import (
	"encoding/json"
	"reflect"
	"testing"
)

// byNodeSamples are member maps as the wire carried them before
// MembersByNode was a list (nil, empty, one node, several, an empty and a
// null list, keys that sort differently as bytes and need escapes).
var byNodeSamples = []map[string][]GroupMember{
	nil,
	{},
	{"n1": {memberSamples[2]}},
	{"n2": {memberSamples[3], memberSamples[0]}, "n1": {memberSamples[1]}, "node-10": {memberSamples[4]}, "node-9": {memberSamples[5]}},
	{"a": {}, "b": nil, "Z": {memberSamples[0]}},
	{"<n>\"&": {memberSamples[0]}, "ü": {memberSamples[1]}},
}

// TestMembersByNodeJSONIsAMapsJSON: the list encodes to exactly the bytes
// a map[string][]GroupMember encodes to (agents and tools built before
// the change read it), and decodes from them to the list of the map.
func TestMembersByNodeJSONIsAMapsJSON(t *testing.T) {
	for _, byNode := range byNodeSamples {
		want, err := json.Marshal(byNode)
		if err != nil {
			t.Fatal(err)
		}
		m := MembersByNodeOf(byNode)
		got, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%v encodes to\n%s\nwant\n%s", byNode, got, want)
		}
		// Inside a group, as the wire has it.
		g, err := json.Marshal(AppliedToGroup{Meta: Meta{ID: "g"}, MembersByNode: m})
		if err != nil {
			t.Fatal(err)
		}
		var old struct {
			MembersByNode map[string][]GroupMember `json:"membersByNode"`
		}
		if err := json.Unmarshal(g, &old); err != nil || !reflect.DeepEqual(old.MembersByNode, decodedMap(t, want)) {
			t.Errorf("%s read as a map: %v, %v", g, old.MembersByNode, err)
		}
		var back AppliedToGroup
		if err := json.Unmarshal(g, &back); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		if !reflect.DeepEqual(back.MembersByNode, MembersByNodeOf(decodedMap(t, want))) {
			t.Errorf("%s decodes to %v", g, back.MembersByNode)
		}
	}
}

func decodedMap(t *testing.T, data []byte) map[string][]GroupMember {
	t.Helper()
	var m map[string][]GroupMember
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMembersByNodeJSONErrors: what a map would not decode from is an
// error, never a partial list.
func TestMembersByNodeJSONErrors(t *testing.T) {
	for _, in := range []string{`[]`, `{"n1":{}}`, `{"n1":[{"node":1}]}`, `{"n1":[]`, `"x"`, `{"n1":[{"ips":["nope"]}]}`} {
		var m MembersByNode
		if err := json.Unmarshal([]byte(in), &m); err == nil {
			t.Errorf("%s decoded to %v", in, m)
		}
	}
	// A repeated key: the last one counts, as in a map.
	var m MembersByNode
	if err := json.Unmarshal([]byte(`{"n1":[{"node":"a"}],"n0":[],"n1":[{"node":"b"}]}`), &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[0].Node != "n0" || m[1].Node != "n1" || len(m[1].Members) != 1 || m[1].Members[0].Node != "b" {
		t.Errorf("decoded to %v", m)
	}
}

// TestMembersByNodeLookups: Get, Has and Index find every entry of lists
// of every length and nothing else; Append keeps the list sorted.
func TestMembersByNodeLookups(t *testing.T) {
	var m MembersByNode
	if m.Get("n1") != nil || m.Has("n1") {
		t.Fatal("nil list has n1")
	}
	if i, ok := m.Index("n1"); i != 0 || ok {
		t.Fatalf("nil list: Index %d, %v", i, ok)
	}
	nodes := []string{"n5", "n1", "n9", "n3", "n7", "n1", "n0"}
	for k, n := range nodes {
		m.Append(n, GroupMember{Node: n, Ports: []NamedPort{{Port: int32(k)}}})
		seen := map[string]int{}
		for _, x := range nodes[:k+1] {
			seen[x]++
		}
		if len(m) != len(seen) {
			t.Fatalf("after %v: %d entries", nodes[:k+1], len(m))
		}
		for i, e := range m {
			if i > 0 && m[i-1].Node >= e.Node {
				t.Fatalf("not sorted: %v", m)
			}
			if got := m.Get(e.Node); len(got) != seen[e.Node] || got[0].Node != e.Node {
				t.Fatalf("Get(%s) = %v", e.Node, got)
			}
			if j, ok := m.Index(e.Node); j != i || !ok {
				t.Fatalf("Index(%s) = %d, %v, want %d", e.Node, j, ok, i)
			}
		}
		for _, absent := range []string{"", "m", "n2", "n4", "n6", "n8", "z"} {
			if m.Has(absent) || m.Get(absent) != nil {
				t.Fatalf("%v has %q", m, absent)
			}
			if i, _ := m.Index(absent); (i > 0 && m[i-1].Node >= absent) || (i < len(m) && m[i].Node <= absent) {
				t.Fatalf("Index(%q) = %d in %v", absent, i, m)
			}
		}
	}
	if got := m.Get("n1"); got[0].Ports[0].Port != 1 || got[1].Ports[0].Port != 5 {
		t.Errorf("n1's members out of order: %v", got)
	}
}
