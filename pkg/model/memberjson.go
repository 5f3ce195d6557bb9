package model

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"unicode/utf8"
)

// Group members are most of what the controller sends its agents (an
// address group of a policy every node holds goes to every node, with one
// member per pod it selects), and decoding them with encoding/json's
// reflection was most of an agent's work on a large update: about 5 µs a
// member. GroupMember.UnmarshalJSON and ParseAddressGroupsJSON read the
// form json.Marshal writes (fields in order, strings without escapes)
// directly and leave anything else to encoding/json, so what a member or
// group decodes to never depends on which path read it
// (FuzzGroupMemberJSON and FuzzAddressGroupsJSON check that).

// UnmarshalJSON decodes a member into a zero GroupMember (a JSON null
// leaves it as it is, as encoding/json does).
func (m *GroupMember) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	if fast, ok := parseMember(data); ok {
		*m = fast
		return nil
	}
	// The member's own fields, without this method.
	type plain GroupMember
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*m = GroupMember(p)
	return nil
}

// parseMember reads data if it is exactly what json.Marshal writes for a
// GroupMember whose strings need no escape; ok is false for anything else.
func parseMember(data []byte) (GroupMember, bool) {
	r := memberReader{data: data}
	m, ok := r.member()
	return m, ok && r.pos == len(r.data)
}

// member reads one member as parseMember does.
func (r *memberReader) member() (m GroupMember, ok bool) {
	if !r.lit(`{`) {
		return m, false
	}
	if r.lit(`"pod":{"namespace":`) {
		ns, ok1 := r.name()
		ok2 := r.lit(`,"name":`)
		name, ok3 := r.str()
		if !ok1 || !ok2 || !ok3 || !r.lit(`},`) {
			return m, false
		}
		m.Pod = r.podRef(PodRef{Namespace: ns, Name: name})
	}
	if !r.lit(`"node":`) {
		return m, false
	}
	if m.Node, ok = r.name(); !ok || !r.lit(`,"ips":`) {
		return m, false
	}
	if !r.lit(`null`) {
		start := len(r.ips)
		ok := r.lit(`[`) && r.elements(func() bool {
			s, ok := r.str()
			var a netip.Addr
			if ok && s != "" { // netip.Addr's UnmarshalText: "" is the zero Addr
				var err error
				a, err = netip.ParseAddr(s)
				ok = err == nil
			}
			r.ips = append(r.ips, a)
			return ok
		})
		if !ok {
			return m, false
		}
		// Members' addresses share one array (a member's capacity ends at
		// its last address, so appending to it copies).
		m.IPs = r.ips[start:len(r.ips):len(r.ips)]
		if len(m.IPs) == 0 {
			m.IPs = []netip.Addr{} // what encoding/json makes of []
		}
		if r.slabs && cap(r.ips)-len(r.ips) < 4 {
			r.ips = make([]netip.Addr, 0, slab)
		}
	}
	if r.lit(`,"ports":[`) {
		ok := r.elements(func() bool {
			ok1 := r.lit(`{"name":`)
			name, ok2 := r.str()
			ok3 := r.lit(`,"protocol":`)
			proto, ok4 := r.str()
			ok5 := r.lit(`,"port":`)
			port, ok6 := r.integer(32)
			m.Ports = append(m.Ports, NamedPort{Name: name, Protocol: Protocol(proto), Port: int32(port)})
			return ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && r.lit(`}`)
		})
		if !ok || len(m.Ports) == 0 { // json.Marshal omits empty ports: leave [] to encoding/json
			return m, false
		}
	}
	return m, r.lit(`}`)
}

// ParseAddressGroupsJSON reads a JSON array of address groups if it is
// exactly what json.Marshal writes for a []*AddressGroup without nil
// groups whose strings need no escape (the form the controller sends);
// ok is false for anything else, which encoding/json must read instead.
// It reads the controller's large address groups several times faster
// than encoding/json, which scans every byte more than once before
// decoding it by reflection.
func ParseAddressGroupsJSON(data []byte) (groups []*AddressGroup, ok bool) {
	r := memberReader{data: data, slabs: true, names: map[string]string{}}
	groups = []*AddressGroup{}
	ok = r.lit(`[`) && r.elements(func() bool {
		g, ok := r.addressGroup()
		groups = append(groups, g)
		return ok
	})
	if !ok || r.pos != len(r.data) {
		return nil, false
	}
	return groups, true
}

// addressGroup reads one group as ParseAddressGroupsJSON does.
func (r *memberReader) addressGroup() (*AddressGroup, bool) {
	g := &AddressGroup{}
	var ok1, ok2, ok3, ok4 bool
	ok1 = r.lit(`{"id":`)
	g.ID, ok2 = r.str()
	ok3 = r.lit(`,"generation":`)
	g.Generation, ok4 = r.integer(64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, false
	}
	if r.lit(`,"span":[`) {
		ok := r.elements(func() bool {
			s, ok := r.str()
			g.Span = append(g.Span, s)
			return ok
		})
		if !ok || len(g.Span) == 0 { // json.Marshal omits an empty span
			return nil, false
		}
	}
	var ok bool
	if !r.lit(`,"selector":`) {
		return nil, false
	}
	if g.Selector, ok = r.str(); !ok || !r.lit(`,"members":`) {
		return nil, false
	}
	if !r.lit(`null`) {
		g.Members = []GroupMember{}
		ok := r.lit(`[`) && r.elements(func() bool {
			m, ok := r.member()
			g.Members = append(g.Members, m)
			return ok
		})
		if !ok {
			return nil, false
		}
	}
	return g, r.lit(`}`)
}

// elements reads the elements of an array whose '[' was read, each with
// read, and the closing ']'.
func (r *memberReader) elements(read func() bool) bool {
	for i := 0; !r.lit(`]`); i++ {
		if (i > 0 && !r.lit(`,`)) || !read() {
			return false
		}
	}
	return true
}

// memberReader walks a member's JSON for parseMember, and groups' for
// ParseAddressGroupsJSON.
type memberReader struct {
	data []byte
	pos  int
	// ips and pods are where members' addresses and pod names go: with
	// slabs (reading many members), a slab at a time rather than one
	// allocation each.
	slabs bool
	ips   []netip.Addr
	pods  []PodRef
	// names holds the node and namespace names read so far (each is
	// shared by many members), when set.
	names map[string]string
}

// slab is how many addresses or pod names memberReader allocates at once.
const slab = 512

// podRef returns p in the reader's slab of pod names.
func (r *memberReader) podRef(p PodRef) *PodRef {
	if !r.slabs {
		return &p
	}
	if len(r.pods) == cap(r.pods) {
		r.pods = make([]PodRef, 0, slab)
	}
	r.pods = append(r.pods, p)
	return &r.pods[len(r.pods)-1]
}

// lit consumes s if the input continues with it.
func (r *memberReader) lit(s string) bool {
	if len(r.data)-r.pos < len(s) || string(r.data[r.pos:r.pos+len(s)]) != s {
		return false
	}
	r.pos += len(s)
	return true
}

// str consumes a JSON string that has no escape and no control character
// and is valid UTF-8 (a string encoding/json reads as it is written).
func (r *memberReader) str() (string, bool) {
	b, ok := r.strBytes()
	return string(b), ok
}

// name is str for a node or namespace name: interned when the reader
// interns.
func (r *memberReader) name() (string, bool) {
	b, ok := r.strBytes()
	if !ok || r.names == nil {
		return string(b), ok
	}
	if held, found := r.names[string(b)]; found {
		return held, true
	}
	s := string(b)
	r.names[s] = s
	return s, true
}

// strBytes is str's text, in the input.
func (r *memberReader) strBytes() ([]byte, bool) {
	if !r.lit(`"`) {
		return nil, false
	}
	start := r.pos
	for ; r.pos < len(r.data); r.pos++ {
		switch c := r.data[r.pos]; {
		case c == '"':
			b := r.data[start:r.pos]
			r.pos++
			return b, utf8.Valid(b)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// integer consumes a JSON integer as json.Marshal writes one that fits
// in bits.
func (r *memberReader) integer(bits int) (int64, bool) {
	start := r.pos
	if r.pos < len(r.data) && r.data[r.pos] == '-' {
		r.pos++
	}
	digits := r.pos
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		r.pos++
	}
	n := r.pos - digits
	if n == 0 || (n > 1 && r.data[digits] == '0') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(r.data[start:r.pos]), 10, bits)
	return v, err == nil
}
