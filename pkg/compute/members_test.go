package compute

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// TestPatchMembers compares patchMembers with sorting the wanted members
// from scratch, on random lists, drops and additions.
func TestPatchMembers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	member := func(i int, node string) model.GroupMember {
		return model.GroupMember{Pod: &model.PodRef{Namespace: fmt.Sprintf("ns%d", i%3), Name: fmt.Sprintf("p%d", i)}, Node: node}
	}
	for round := 0; round < 2000; round++ {
		n := rng.IntN(20)
		in := map[int]bool{}
		var old []model.GroupMember
		for i := 0; i < n; i++ {
			k := rng.IntN(30)
			if !in[k] {
				in[k] = true
				old = append(old, member(k, "a"))
			}
		}
		if rng.IntN(3) == 0 {
			old = append(old, model.GroupMember{Node: "node-x"})
		}
		slices.SortFunc(old, comparePodMembers)
		want := map[int]model.GroupMember{}
		for k := range in {
			want[k] = member(k, "a")
		}
		var drop []podKey
		var adds []model.GroupMember
		touched := map[int]bool{}
		for j := rng.IntN(8); j > 0; j-- {
			k := rng.IntN(30)
			key := podKey{fmt.Sprintf("ns%d", k%3), fmt.Sprintf("p%d", k)}
			if touched[k] {
				continue
			}
			touched[k] = true
			if in[k] {
				drop = append(drop, key)
				delete(want, k)
			}
			if rng.IntN(2) == 0 {
				m := member(k, "b")
				adds = append(adds, m)
				want[k] = m
			}
		}
		var wantList []model.GroupMember
		for _, m := range want {
			wantList = append(wantList, m)
		}
		if old != nil && old[len(old)-1].Pod == nil {
			wantList = append(wantList, old[len(old)-1])
		}
		slices.SortFunc(wantList, comparePodMembers)
		oldCopy := slices.Clone(old)
		got := patchMembers(old, drop, adds)
		if !reflect.DeepEqual(old, oldCopy) {
			t.Fatalf("round %d: old list modified", round)
		}
		if len(got) == 0 && len(wantList) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, wantList) {
			t.Fatalf("round %d: patch of %v dropping %v adding %v:\n got %v\nwant %v", round, old, drop, adds, got, wantList)
		}
	}
}

// TestGroupIDIsSHA256Prefix: a group's ID is its role's prefix and the
// first 64 bits of its key's SHA-256 in hex: stable across controller
// restarts, and no user can aim a selector at another group's ID.
func TestGroupIDIsSHA256Prefix(t *testing.T) {
	for _, key := range []string{"", "namespace=prod podSelector={app=web}", "nodeSelector={}", "namedPort=http"} {
		sum := sha256.Sum256([]byte(key))
		want := "ag-" + hex.EncodeToString(sum[:8])
		if got := groupID("ag", key); got != want {
			t.Errorf("groupID(%q) = %s, want %s", key, got, want)
		}
		atg, ag := groupIDs(keyHash(key))
		if wantATG := "atg-" + hex.EncodeToString(sum[:8]); atg != wantATG || ag != want {
			t.Errorf("groupIDs(keyHash(%q)) = %s, %s, want %s, %s", key, atg, ag, wantATG, want)
		}
	}
}

// TestGroupsByID: a group is found by either role's ID, only in the role
// it serves, and by no other spelling of its ID.
func TestGroupsByID(t *testing.T) {
	e := New()
	e.UpsertNamespace(mkNS("prod"))
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {namespace: prod, name: np}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from:
    - podSelector: {matchLabels: {app: web}}
`))
	s := e.Snapshot()
	if len(s.AppliedToGroups) != 1 || len(s.AddressGroups) != 1 {
		t.Fatalf("snapshot has %d applied-to and %d address groups, want 1 and 1", len(s.AppliedToGroups), len(s.AddressGroups))
	}
	for atgID := range s.AppliedToGroups {
		for agID := range s.AddressGroups {
			if _, ok := e.AppliedToGroup(atgID); !ok {
				t.Errorf("AppliedToGroup(%s) not found", atgID)
			}
			if _, ok := e.AddressGroup(agID); !ok {
				t.Errorf("AddressGroup(%s) not found", agID)
			}
			// The address group's selector serves no subject, and the
			// applied-to group's no peer.
			if _, ok := e.AppliedToGroup("atg-" + strings.TrimPrefix(agID, "ag-")); ok {
				t.Errorf("the address group answered as an applied-to group")
			}
			if _, ok := e.AddressGroup("ag-" + strings.TrimPrefix(atgID, "atg-")); ok {
				t.Errorf("the applied-to group answered as an address group")
			}
			for _, id := range []string{strings.ToUpper(atgID), atgID + "0", atgID[:len(atgID)-1], "ag-" + atgID} {
				if _, ok := e.AppliedToGroup(id); ok {
					t.Errorf("AppliedToGroup(%s) found a group", id)
				}
			}
		}
	}
}
