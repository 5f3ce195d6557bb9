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

// normalize sorts prefixes and drops those contained in another one. Sorted
// by family, address, then length, a prefix contained in another kept one
// is contained in the last kept one of its family (kept prefixes are
// disjoint), so one pass suffices.
func normalize(ps []netip.Prefix) []netip.Prefix {
	for i, p := range ps {
		ps[i] = p.Masked()
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Addr() != ps[j].Addr() {
			return ps[i].Addr().Less(ps[j].Addr()) // v4 sorts before v6
		}
		return ps[i].Bits() < ps[j].Bits()
	})
	out := ps[:0:0]
	for _, p := range ps {
		if n := len(out); n > 0 {
			last := out[n-1]
			if last.Addr().BitLen() == p.Addr().BitLen() && last.Contains(p.Addr()) {
				continue
			}
		}
		out = append(out, p)
	}
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
