package wire

import (
	"encoding/json"
	"testing"
)

// FuzzApply feeds arbitrary JSON updates to a node state: Apply returns
// an error or a delta, never panics, and a rejected update leaves the
// state as it was.
func FuzzApply(f *testing.F) {
	f.Add([]byte(`{"epoch":"e","version":1,"full":true,"policies":[{"id":"p","appliedToGroups":["g"],"rules":[{"peer":{"addressGroups":["a"]}}]}],"appliedToGroups":[{"id":"g","membersByNode":{"n1":[{"pod":{"namespace":"ns","name":"x"},"node":"n1","ips":["10.0.0.1"]}]}}],"addressGroups":[{"id":"a","members":[{"node":"n2","ips":["fd00::1"]}]}]}`))
	f.Add([]byte(`{"version":2,"addressGroupPatches":[{"id":"a","upserted":[{"pod":{"namespace":"ns","name":"y"},"node":"n3"}],"removed":["node/n2"]}],"deletedPolicies":["p"]}`))
	f.Add([]byte(`{"version":2,"policies":[null],"appliedToGroups":[{"id":""}],"addressGroupPatches":[{"id":"zz"}]}`))
	f.Add([]byte(`{"full":true,"deletedAddressGroups":["a"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var first, u Update
		st := NewNodeState("n1")
		if json.Unmarshal([]byte(`{"epoch":"e","version":1,"full":true,"policies":[{"id":"p"}],"addressGroups":[{"id":"a","members":[{"node":"n2"}]}]}`), &first) != nil {
			t.Fatal("seed state")
		}
		if _, err := st.Apply(&first); err != nil {
			t.Fatal(err)
		}
		if json.Unmarshal(data, &u) != nil {
			return
		}
		before := st.Clone()
		if _, err := st.Apply(&u); err != nil {
			if d := Diff(before, st); len(d) > 0 {
				t.Fatalf("rejected update changed the state: %v", d)
			}
		}
	})
}
