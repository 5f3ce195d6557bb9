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

// TestEncodedUpdateIsTheCodecsEncoding: the message EncodeUpdateMessages
// makes (address groups spliced in, a large one's cached encoding shared,
// not copied) is EncodeUpdate's bytes and decodes exactly as the codec's
// own encoding of the Update does.
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
	msgs, err := EncodeUpdateMessages(u, 1<<20)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("%d messages (%v), want 1", len(msgs), err)
	}
	pre, err := jsonCodec{}.Marshal(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := string(pre.Materialize()); got != updatePrefix+string(data)+"}" {
		t.Fatalf("message encodes as %s, want the update's encoding %s", got, data)
	}
	cached, _ := encodedGroup(big)
	shared := false
	for _, b := range pre {
		shared = shared || &b.ReadOnlyData()[0] == &cached[0]
	}
	if !shared {
		t.Error("the message copies the large group's cached encoding")
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
	chunks, err := EncodeUpdateMessages(u, 100)
	if err != nil || len(chunks) < 2 || chunks[0].Chunk == nil {
		t.Fatalf("an update over the chunk size makes %d messages (%v), want chunks", len(chunks), err)
	}
	without, _, err := EncodeUpdate(&Update{Epoch: "e", Version: 8}, 1<<20)
	if err != nil || string(without) != `{"epoch":"e","version":8}` {
		t.Fatalf("an update without groups encodes as %s (%v)", without, err)
	}
}
