package wire

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/tierflow/tierflow/pkg/model"
)

func decodeSample() *Update {
	g := &model.AddressGroup{Meta: model.Meta{ID: "ag-1", Generation: 2, Span: []string{"n1"}}, Selector: "team=t1"}
	for i := range 300 { // above cachedGroupMembers: the cached encoding is spliced too
		g.Members = append(g.Members, model.GroupMember{Pod: &model.PodRef{Namespace: "ns", Name: "p"}, Node: "n1",
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})}})
	}
	small := &model.AddressGroup{Meta: model.Meta{ID: "ag-2"}, Selector: "x", Members: []model.GroupMember{{Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("fd00::2")}}}}
	return &Update{Epoch: "e", Version: 3, Policies: []*model.Policy{{Meta: model.Meta{ID: "p"}, Rules: []model.Rule{{Peer: model.Peer{AddressGroups: []string{"ag-1"}}}}}},
		AddressGroups: AddressGroups{g, small}, DeletedAddressGroups: []string{"old"}}
}

// TestDecodeUpdate: what EncodeUpdate writes, DecodeUpdate and the codec
// read back as encoding/json does, through the fast path.
func TestDecodeUpdate(t *testing.T) {
	u := decodeSample()
	data, _, err := EncodeUpdate(u, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var want, got Update
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if err := DecodeUpdate(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(&got, u) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if _, ok := model.ParseAddressGroupsJSON(data[len(data)-1-len(mustJSON(t, u.AddressGroups)) : len(data)-1]); !ok {
		t.Fatal("EncodeUpdate's address groups do not take the fast path")
	}
	var m ServerMessage
	msg := mem.BufferSlice{mem.SliceBuffer(append(append([]byte(updatePrefix), data...), '}'))}
	if err := (jsonCodec{}).Unmarshal(msg, &m); err != nil || !reflect.DeepEqual(m.Update, u) {
		t.Fatalf("codec decoded %+v (%v), want %+v", m.Update, err, u)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeUpdate: DecodeUpdate and the codec read any input exactly as
// encoding/json does (same value, an error exactly when it errs).
func FuzzDecodeUpdate(f *testing.F) {
	data, _, err := EncodeUpdate(decodeSample(), 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"version":1,"addressGroups":[{"id":"a","generation":0,"span":["x"],"selector":"","members":null}],"addressGroups":[{"id":"b","generation":0,"selector":"","members":null}]}`))
	f.Add([]byte(`{"version":1,"policies":[{"id":"p","rules":[{"peer":{"addressGroups":["a"]}}]}],"addressGroups":[]}`))
	f.Add([]byte(`{"x":"\",\"addressGroups\":[]}"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got Update
		errWant := json.Unmarshal(data, &want)
		errGot := DecodeUpdate(data, &got)
		if (errWant == nil) != (errGot == nil) || (errWant == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: DecodeUpdate %+v (%v), encoding/json %+v (%v)", data, got, errGot, want, errWant)
		}
		msg := append(append([]byte(updatePrefix), data...), '}')
		var wantMsg, gotMsg ServerMessage
		errWant = json.Unmarshal(msg, &wantMsg)
		errGot = unmarshal(msg, &gotMsg)
		if (errWant == nil) != (errGot == nil) || (errWant == nil && !reflect.DeepEqual(gotMsg, wantMsg)) {
			t.Fatalf("%q: codec %+v (%v), encoding/json %+v (%v)", msg, gotMsg, errGot, wantMsg, errWant)
		}
	})
}
