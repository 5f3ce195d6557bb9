package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

func TestChunksRoundTrip(t *testing.T) {
	u := &Update{Epoch: "e", Version: 7, Full: true}
	for i := 0; i < 200; i++ {
		u.Policies = append(u.Policies, &model.Policy{Meta: model.Meta{ID: strings.Repeat("p", i%50+1)}})
	}
	whole, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 7, 1000, len(whole) - 1, len(whole), 10 * len(whole)} {
		data, chunked, err := EncodeUpdate(u, size)
		if err != nil {
			t.Fatal(err)
		}
		if chunked != (len(whole) > size) || !bytes.Equal(data, whole) {
			t.Fatalf("size %d: chunked %v for %d bytes", size, chunked, len(whole))
		}
		cs := Chunks(u.Version, data, size)
		if want := (len(whole) + size - 1) / size; len(cs) != want {
			t.Fatalf("size %d: %d chunks, want %d", size, len(cs), want)
		}
		var a Assembler
		var got *Update
		for i, c := range cs {
			if len(c.Data) > size || c.Index != i || c.Last != (i == len(cs)-1) {
				t.Fatalf("size %d: chunk %d: %d bytes, index %d, last %v", size, i, len(c.Data), c.Index, c.Last)
			}
			// Each chunk travels as its own message.
			b, _ := json.Marshal(&ServerMessage{Chunk: c})
			var m ServerMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if got, err = a.Add(m.Chunk); err != nil {
				t.Fatalf("size %d: chunk %d: %v", size, i, err)
			}
			if (got != nil) != c.Last {
				t.Fatalf("size %d: chunk %d of %d gave an update: %v", size, i, len(cs), got != nil)
			}
		}
		if b, _ := json.Marshal(got); !bytes.Equal(b, whole) {
			t.Fatalf("size %d: reassembled update differs", size)
		}
		if a.Pending() {
			t.Fatal("pieces left after the last chunk")
		}
	}
}

func TestAssemblerRefusesWhatDoesNotFit(t *testing.T) {
	data, _, _ := EncodeUpdate(&Update{Epoch: "e", Version: 3, Full: true, DeletedPolicies: []string{strings.Repeat("x", 100)}}, 10)
	cs := Chunks(3, data, 10)
	// The pieces say version 3, the update inside says 9.
	other, _, _ := EncodeUpdate(&Update{Epoch: "e", Version: 9}, 1<<20)
	for name, seq := range map[string][]*Chunk{
		"missing piece":      {cs[0], cs[2]},
		"no first piece":     {cs[1]},
		"other update":       {cs[0], {Version: 4, Index: 1, Data: cs[1].Data}},
		"repeated piece":     {cs[0], cs[1], cs[1]},
		"truncated encoding": {cs[0], {Version: 3, Index: 1, Last: true, Data: cs[1].Data}},
		"version mismatch":   {{Version: 3, Index: 0, Last: true, Data: other}},
	} {
		var a Assembler
		var err error
		var u *Update
		for _, c := range seq {
			if u, err = a.Add(c); err != nil {
				break
			}
		}
		if err == nil || u != nil {
			t.Errorf("%s: update %v, err %v; want refused", name, u, err)
		}
		if a.Pending() {
			t.Errorf("%s: pieces kept after the error", name)
		}
	}
	a := Assembler{MaxSize: 15}
	var err error
	for _, c := range cs {
		if _, err = a.Add(c); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "exceeds 15 bytes") {
		t.Errorf("over MaxSize: %v", err)
	}
}
