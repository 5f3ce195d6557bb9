package wire

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"weak"

	"github.com/tierflow/tierflow/pkg/model"
)

// TestAddressGroupsEncodeAsPlainJSON: an Update's address groups, small
// and large (the latter through the encoding cache, twice), encode exactly
// as encoding/json encodes the plain slice, and decode back.
func TestAddressGroupsEncodeAsPlainJSON(t *testing.T) {
	big := &model.AddressGroup{Meta: model.Meta{ID: "ag-big", Generation: 3, Span: []string{"n1", "n2"}}, Selector: "team=t1"}
	for i := 0; i < 2*cachedGroupMembers; i++ {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		big.Members = append(big.Members, model.GroupMember{Pod: &model.PodRef{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}, Node: "n1", IPs: []netip.Addr{ip}})
	}
	small := &model.AddressGroup{Meta: model.Meta{ID: "ag-small", Generation: 1}, Members: big.Members[:3]}
	plain := []*model.AddressGroup{big, small, big}
	want, err := json.Marshal(struct {
		AddressGroups []*model.AddressGroup `json:"addressGroups,omitempty"`
	}{plain})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second time from the cache
		got, err := json.Marshal(&Update{AddressGroups: plain})
		if err != nil {
			t.Fatal(err)
		}
		var gotRaw, wantRaw map[string]json.RawMessage
		if err := json.Unmarshal(got, &gotRaw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(want, &wantRaw); err != nil {
			t.Fatal(err)
		}
		if string(gotRaw["addressGroups"]) != string(wantRaw["addressGroups"]) {
			t.Fatalf("round %d: address groups encode differently from encoding/json", i)
		}
		var back Update
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		var again struct {
			AddressGroups []*model.AddressGroup `json:"addressGroups,omitempty"`
		}
		if err := json.Unmarshal(want, &again); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual([]*model.AddressGroup(back.AddressGroups), again.AddressGroups) {
			t.Fatalf("round %d: decoded groups differ", i)
		}
		if _, cached := groupJSON.Load(weakKey(big)); !cached {
			t.Fatal("the large group's encoding is not cached")
		}
	}
	if b, _ := json.Marshal(&Update{}); string(b) != `{"epoch":"","version":0}` {
		t.Fatalf("an update without groups encodes as %s", b)
	}
}

func weakKey(g *model.AddressGroup) weak.Pointer[model.AddressGroup] { return weak.Make(g) }

// TestEncodedUpdateIsTheCodecsEncoding: a message made from EncodeUpdate's
// bytes (address groups spliced in) decodes exactly as the codec's own
// encoding of the Update does.
func TestEncodedUpdateIsTheCodecsEncoding(t *testing.T) {
	big := &model.AddressGroup{Meta: model.Meta{ID: "ag-big", Generation: 1}}
	for i := 0; i < cachedGroupMembers; i++ {
		big.Members = append(big.Members, model.GroupMember{Node: fmt.Sprintf("n%d", i), IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)})}})
	}
	u := &Update{Epoch: "e", Version: 7, DeletedPolicies: []string{"p"},
		AddressGroups:        AddressGroups{{Meta: model.Meta{ID: "ag", Generation: 2}, Selector: "x"}, big},
		AddressGroupPatches:  []AddressGroupPatch{{ID: "ag2", Removed: []string{"k"}}},
		DeletedAddressGroups: []string{"ag3"}}
	data, _, err := EncodeUpdate(u, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := jsonCodec{}.Marshal(EncodedUpdate(data))
	if err != nil {
		t.Fatal(err)
	}
	want, err := jsonCodec{}.Marshal(&ServerMessage{Update: u})
	if err != nil {
		t.Fatal(err)
	}
	var back, viaCodec ServerMessage
	if err := (jsonCodec{}).Unmarshal(pre, &back); err != nil {
		t.Fatal(err)
	}
	if err := (jsonCodec{}).Unmarshal(want, &viaCodec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, viaCodec) || len(back.Update.AddressGroups) != 2 || len(back.Update.AddressGroupPatches) != 1 {
		t.Fatalf("pre-encoded message decodes to %+v, the codec's to %+v", back.Update, viaCodec.Update)
	}
	without, _, err := EncodeUpdate(&Update{Epoch: "e", Version: 8}, 1<<20)
	if err != nil || string(without) != `{"epoch":"e","version":8}` {
		t.Fatalf("an update without groups encodes as %s (%v)", without, err)
	}
}
