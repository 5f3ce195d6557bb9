package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tierflow/tierflow/pkg/model"
)

// Chunk is one piece of an Update too large for one message: the
// Update's JSON encoding cut into consecutive pieces of at most the
// server's chunk size. The pieces of one Update are sent back to back,
// Index 0, 1, ..., the last with Last set; the agent decodes and applies
// the Update only when it has them all, so it never applies part of a
// state. Only agents whose Hello set Chunks receive them.
type Chunk struct {
	// Version is the Update's version, the same in every piece.
	Version uint64 `json:"version"`
	Index   int    `json:"index"`
	Last    bool   `json:"last,omitempty"`
	Data    []byte `json:"data"`
}

// EncodeUpdate returns u's JSON encoding and whether it must travel in
// chunks: when it is longer than chunkSize.
func EncodeUpdate(u *Update, chunkSize int) (data []byte, chunked bool, err error) {
	parts, size, err := updateParts(u)
	if err != nil {
		return nil, false, err
	}
	return bytes.Join(parts, nil), size > chunkSize, nil
}

// EncodeUpdateMessages is what an agent that reassembles chunks is sent
// for u: one message holding u's encoding when it is at most chunkSize
// long, else the Chunks of it. The one message refers to a large group's
// cached encoding instead of copying it (the codec hands gRPC the parts):
// a group every node needs is then held once, not once per stream.
func EncodeUpdateMessages(u *Update, chunkSize int) ([]*ServerMessage, error) {
	parts, size, err := updateParts(u)
	if err != nil {
		return nil, err
	}
	if size <= chunkSize {
		return []*ServerMessage{{encoded: append(append([][]byte{[]byte(updatePrefix)}, parts...), []byte("}"))}}, nil
	}
	var msgs []*ServerMessage
	for _, c := range Chunks(u.Version, bytes.Join(parts, nil), chunkSize) {
		msgs = append(msgs, &ServerMessage{Chunk: c})
	}
	return msgs, nil
}

// updateParts is u's encoding in pieces, and its length: the encoding of
// everything but the address groups, then each group's (a large group's
// from its cache, see AddressGroups) with the punctuation between them.
// The groups are spliced in: through json.Marshal, a Marshaler's output
// is scanned again, which for a large group costs about what encoding it
// does.
func updateParts(u *Update) (parts [][]byte, size int, err error) {
	rest := *u
	rest.AddressGroups = nil
	head, err := json.Marshal(&rest)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding update %d: %w", u.Version, err)
	}
	if len(u.AddressGroups) == 0 {
		return [][]byte{head}, len(head), nil
	}
	// head is a JSON object with at least "epoch" and "version".
	parts = [][]byte{append(head[:len(head)-1], groupsKey+"["...)}
	for i, g := range u.AddressGroups {
		b, err := encodedGroup(g)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding update %d: %w", u.Version, err)
		}
		if i > 0 {
			parts = append(parts, []byte(","))
		}
		parts = append(parts, b)
	}
	parts = append(parts, []byte("]}"))
	for _, p := range parts {
		size += len(p)
	}
	return parts, size, nil
}

// groupsKey is how EncodeUpdate joins the address groups to the rest of
// an Update's encoding.
const groupsKey = `,"addressGroups":`

// DecodeUpdate decodes an Update's JSON encoding into u, which must be
// zero: what json.Unmarshal makes of data, error included. An encoding
// made by EncodeUpdate is read in two parts: the address groups it
// appended last (most of a large update: one member per pod a peer
// selects) by model.ParseAddressGroupsJSON, the rest by encoding/json.
// Any other input goes to encoding/json whole.
func DecodeUpdate(data []byte, u *Update) error {
	cut := lastIndex(data, []byte(groupsKey+"["))
	if cut > 0 && bytes.HasSuffix(data, []byte("]}")) && !bytes.HasSuffix(bytes.TrimRight(data[:cut], " \t\r\n"), []byte("{")) {
		// If data up to the cut, closed, is one JSON object with a member,
		// the cut follows one of data's own members (it is not inside a
		// string or a nested value), so the groups are data's last member.
		if groups, ok := model.ParseAddressGroupsJSON(data[cut+len(groupsKey) : len(data)-1]); ok {
			rest := append(data[:cut:cut], '}') // a copy: data is not written
			// (Groups in the rest too, under any spelling of the key, and
			// encoding/json would merge the last ones into them.)
			if json.Unmarshal(rest, u) == nil && u.AddressGroups == nil {
				u.AddressGroups = groups
				return nil
			}
			*u = Update{}
		}
	}
	return json.Unmarshal(data, u)
}

// lastIndex is bytes.LastIndex, searching forwards: the groups are most
// of a large update, and bytes.Index skips through them several times
// faster than bytes.LastIndex's backward search.
func lastIndex(data, sep []byte) int {
	last := -1
	for from := 0; ; {
		i := bytes.Index(data[from:], sep)
		if i < 0 {
			return last
		}
		last = from + i
		from = last + len(sep)
	}
}

// Chunks cuts an encoded Update into pieces of at most chunkSize bytes
// (sharing data's memory).
func Chunks(version uint64, data []byte, chunkSize int) []*Chunk {
	var out []*Chunk
	for i := 0; len(data) > 0 || i == 0; i++ {
		n := min(chunkSize, len(data))
		out = append(out, &Chunk{Version: version, Index: i, Data: data[:n:n]})
		data = data[n:]
	}
	out[len(out)-1].Last = true
	return out
}

// Assembler puts an Update back together from its Chunks. The zero value
// is ready; it holds at most one Update's pieces at a time.
type Assembler struct {
	// MaxSize bounds an assembled Update's encoding (0: no bound).
	MaxSize int

	buf     []byte
	version uint64
	next    int
}

// Add takes the next piece. It returns the Update when c was its last
// piece, nil while pieces are missing, and an error (and forgets what it
// held) when c does not continue the pieces before it or the Update
// grows past MaxSize.
func (a *Assembler) Add(c *Chunk) (*Update, error) {
	if c.Index != a.next || (c.Index > 0 && c.Version != a.version) {
		want := fmt.Sprintf("piece 0 of a new update or piece %d of update %d", a.next, a.version)
		if a.next == 0 {
			want = "piece 0 of a new update"
		}
		a.Reset()
		return nil, fmt.Errorf("update chunk %d of version %d out of order: want %s", c.Index, c.Version, want)
	}
	if a.MaxSize > 0 && len(a.buf)+len(c.Data) > a.MaxSize {
		a.Reset()
		return nil, fmt.Errorf("update %d exceeds %d bytes", c.Version, a.MaxSize)
	}
	a.buf = append(a.buf, c.Data...)
	a.version, a.next = c.Version, c.Index+1
	if !c.Last {
		return nil, nil
	}
	u := new(Update)
	err := DecodeUpdate(a.buf, u)
	a.Reset()
	if err != nil {
		return nil, fmt.Errorf("decoding chunked update %d: %w", c.Version, err)
	}
	if u.Version != c.Version {
		return nil, fmt.Errorf("chunked update says version %d, its chunks %d", u.Version, c.Version)
	}
	return u, nil
}

// Reset drops any pieces held (a stream ended mid-update).
func (a *Assembler) Reset() {
	a.buf, a.version, a.next = nil, 0, 0
}

// Pending reports whether pieces of an unfinished Update are held.
func (a *Assembler) Pending() bool { return a.next > 0 }
