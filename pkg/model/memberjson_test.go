package model

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

// plainMember is GroupMember decoded by encoding/json alone.
type plainMember GroupMember

var memberSamples = []GroupMember{
	{Node: "n1"},
	{Node: "n1", IPs: []netip.Addr{}},
	{Pod: &PodRef{Namespace: "ns-1", Name: "pod-7"}, Node: "node-12", IPs: []netip.Addr{netip.MustParseAddr("10.1.2.3")}},
	{Pod: &PodRef{Namespace: "ns", Name: "web"}, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
		Ports: []NamedPort{{Name: "http", Protocol: ProtocolTCP, Port: 80}, {Name: "dns", Protocol: "UDP", Port: 53}}},
	{Node: "n3", IPs: []netip.Addr{{}}, Ports: []NamedPort{{Name: "x", Port: -1}}},
	{Pod: &PodRef{Namespace: "ünï", Name: "\"<esc>\""}, Node: "n4"},
}

// TestMemberJSONRoundTrip: members decode to what was encoded, and those
// whose strings need no escape take the fast path (else large updates
// silently decode at encoding/json's speed again).
func TestMemberJSONRoundTrip(t *testing.T) {
	for i, m := range memberSamples {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got GroupMember
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		var want plainMember
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, GroupMember(want)) {
			t.Errorf("%s: decoded %+v, encoding/json %+v", data, got, want)
		}
		if _, fast := parseMember(data); fast != (i != len(memberSamples)-1) {
			t.Errorf("%s: fast path %v", data, fast)
		}
	}
}

// FuzzGroupMemberJSON: whatever the input, GroupMember's decoding agrees
// with encoding/json's (same value, an error exactly when it errs), and
// the fast path reads only what encoding/json reads the same way.
func FuzzGroupMemberJSON(f *testing.F) {
	for _, m := range memberSamples {
		data, _ := json.Marshal(m)
		f.Add(data)
	}
	f.Add([]byte(`{"node":"n","ips":["10.0.0.1"],"ports":[]}`))
	f.Add([]byte(`{"Node":"n","ips":null}`))
	f.Add([]byte(`{"node":"n","ips":["10.0.0.300"]}`))
	f.Add([]byte(`{"node":"n","ips":[""],"ports":[{"name":"a","protocol":"TCP","port":2147483648}]}`))
	f.Add([]byte(`{"node":"n","ips":[],"ports":[{"name":"a","protocol":"TCP","port":01}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var want plainMember
		errWant := json.Unmarshal(data, &want)
		var got GroupMember
		errGot := json.Unmarshal(data, &got)
		if (errWant == nil) != (errGot == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", data, errGot, errWant)
		}
		if errWant == nil && !reflect.DeepEqual(got, GroupMember(want)) {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
		}
		if fast, ok := parseMember(data); ok {
			var direct plainMember
			if err := json.Unmarshal(data, &direct); err != nil {
				t.Fatalf("%q: fast path read what encoding/json refuses: %v", data, err)
			}
			if !reflect.DeepEqual(fast, GroupMember(direct)) {
				t.Fatalf("%q: fast path %+v, encoding/json %+v", data, fast, direct)
			}
		}
	})
}

// FuzzAddressGroupsJSON: what ParseAddressGroupsJSON reads, encoding/json
// reads the same way; json.Marshal's form of groups without escapes takes
// the fast path.
func FuzzAddressGroupsJSON(f *testing.F) {
	groups := []*AddressGroup{
		{Meta: Meta{ID: "ag-1", Generation: 3, Span: []string{"n1", "n2"}}, Selector: "ns team=t1", Members: memberSamples[:5]},
		{Meta: Meta{ID: "ag-2"}, Members: []GroupMember{}},
		{Meta: Meta{ID: "ag-3", Generation: -1}},
	}
	data, err := json.Marshal(groups)
	if err != nil {
		f.Fatal(err)
	}
	if got, ok := ParseAddressGroupsJSON(data); !ok || !reflect.DeepEqual(got, groups) {
		f.Fatalf("%s: fast path %v, read %+v", data, ok, got)
	}
	f.Add(data)
	f.Add([]byte(`[]`))
	f.Add([]byte(`[null]`))
	f.Add([]byte(`[{"id":"a","generation":1,"span":[],"selector":"","members":null}]`))
	f.Add([]byte(`[{"id":"a","generation":9223372036854775808,"selector":"","members":[]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := ParseAddressGroupsJSON(data)
		if !ok {
			return
		}
		var want []*AddressGroup
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%q: fast path read what encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", data, got, want)
		}
	})
}
