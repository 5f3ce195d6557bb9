package policyflows

import (
	"net/netip"
	"sort"
)

// subtract returns cidr minus the excepts as a set of disjoint prefixes: the
// exact masked split of an ipBlock with exceptions.
func subtract(cidr netip.Prefix, excepts []netip.Prefix) []netip.Prefix {
	cidr = cidr.Masked()
	var relevant []netip.Prefix
	for _, e := range excepts {
		e = e.Masked()
		if e.Addr().BitLen() != cidr.Addr().BitLen() || !e.Overlaps(cidr) {
			continue
		}
		if e.Bits() <= cidr.Bits() {
			return nil // the exception covers the whole block
		}
		relevant = append(relevant, e)
	}
	if len(relevant) == 0 {
		return []netip.Prefix{cidr}
	}
	lo, hi := halves(cidr)
	return append(subtract(lo, relevant), subtract(hi, relevant)...)
}

// halves splits a prefix into its two children.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	idx := p.Bits()
	b[idx/8] |= 0x80 >> (idx % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, bits)
}

// normalize sorts prefixes and drops those contained in another one.
func normalize(ps []netip.Prefix) []netip.Prefix {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Addr().BitLen() != ps[j].Addr().BitLen() {
			return ps[i].Addr().BitLen() < ps[j].Addr().BitLen()
		}
		if ps[i].Bits() != ps[j].Bits() {
			return ps[i].Bits() < ps[j].Bits()
		}
		return ps[i].Addr().Less(ps[j].Addr())
	})
	var out []netip.Prefix
	for _, p := range ps {
		covered := false
		for _, q := range out {
			if q.Addr().BitLen() == p.Addr().BitLen() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr() != out[j].Addr() {
			return out[i].Addr().Less(out[j].Addr())
		}
		return out[i].Bits() < out[j].Bits()
	})
	return out
}

// portMasks covers [lo, hi] with the minimal set of value/mask pairs.
func portMasks(lo, hi uint16) [][2]uint16 {
	var out [][2]uint16
	l, h := uint32(lo), uint32(hi)
	for l <= h {
		// The largest aligned block starting at l that fits in [l, h].
		size := uint32(1)
		for l&(size*2-1) == 0 && l+size*2-1 <= h && size*2 <= 0x10000 {
			size *= 2
		}
		out = append(out, [2]uint16{uint16(l), uint16(0xffff &^ (size - 1))})
		l += size
	}
	return out
}
