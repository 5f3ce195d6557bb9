package wire

import (
	"bytes"
	"encoding/json"
	"runtime"
	"sync"
	"weak"

	"github.com/tierflow/tierflow/pkg/model"
)

// AddressGroups is an Update's address groups. The same group (an
// immutable model object) goes to every node that needs it — a group of
// a policy every node holds goes to every node, hundreds of times in one
// dispatch round — so the JSON encoding of a large group is made once and
// reused while the group object lives.
type AddressGroups []*model.AddressGroup

// cachedGroupMembers is the size from which a group's encoding is kept:
// smaller groups encode faster than a cache lookup pays for.
const cachedGroupMembers = 256

// groupJSON maps a group object (weakly: the cache keeps no group alive)
// to its JSON encoding; an entry goes when its group is collected.
var groupJSON sync.Map // weak.Pointer[model.AddressGroup] -> []byte

// encodedGroup returns g's JSON encoding, from the cache for a large group.
func encodedGroup(g *model.AddressGroup) ([]byte, error) {
	if g == nil || len(g.Members) < cachedGroupMembers {
		return json.Marshal(g)
	}
	key := weak.Make(g)
	if b, ok := groupJSON.Load(key); ok {
		return b.([]byte), nil
	}
	b, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	if _, loaded := groupJSON.LoadOrStore(key, b); !loaded {
		runtime.AddCleanup(g, func(k weak.Pointer[model.AddressGroup]) { groupJSON.Delete(k) }, key)
	}
	return b, nil
}

// MarshalJSON encodes the groups as a JSON array, each group as
// json.Marshal would (large ones from the cache).
func (gs AddressGroups) MarshalJSON() ([]byte, error) {
	if gs == nil {
		return []byte("null"), nil
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, g := range gs {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := encodedGroup(g)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}
