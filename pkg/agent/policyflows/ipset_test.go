package policyflows

import (
	"fmt"
	"math/rand"
	"net/netip"
	"testing"
)

func TestPortMasksCoverExactly(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	cases := [][2]uint16{{0, 65535}, {1, 65535}, {80, 80}, {1000, 1999}, {8080, 8089}, {65535, 65535}, {0, 0}}
	for i := 0; i < 200; i++ {
		a, b := uint16(r.Intn(65536)), uint16(r.Intn(65536))
		if a > b {
			a, b = b, a
		}
		cases = append(cases, [2]uint16{a, b})
	}
	for _, c := range cases {
		ms := portMasks(c[0], c[1])
		if c == [2]uint16{0, 65535} && len(ms) != 1 {
			t.Fatalf("full range: %v", ms)
		}
		for p := 0; p < 65536; p++ {
			hits := 0
			for _, m := range ms {
				if uint16(p)&m[1] == m[0] {
					hits++
				}
			}
			in := p >= int(c[0]) && p <= int(c[1])
			if (in && hits != 1) || (!in && hits != 0) {
				t.Fatalf("range %v: port %d matched %d masks %v", c, p, hits, ms)
			}
		}
	}
	if n := len(portMasks(1, 65534)); n != 30 {
		t.Errorf("1-65534 needs 30 masks, got %d", n)
	}
}

func TestSubtractExact(t *testing.T) {
	cidr := netip.MustParsePrefix("10.0.0.0/16")
	ex := []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24"), netip.MustParsePrefix("10.0.200.7/32"), netip.MustParsePrefix("192.168.0.0/16")}
	got := subtract(cidr, ex)
	for i := 0; i < 1<<16; i++ {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		want := !ex[0].Contains(a) && !ex[1].Contains(a)
		hits := 0
		for _, p := range got {
			if p.Contains(a) {
				hits++
			}
		}
		if (want && hits != 1) || (!want && hits != 0) {
			t.Fatalf("%v: hits %d, want in=%v (%v)", a, hits, want, got)
		}
	}
	if s := subtract(cidr, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); len(s) != 0 {
		t.Fatalf("except covering the block: %v", s)
	}
	if s := subtract(netip.MustParsePrefix("2001:db8::/32"), []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}); len(s) != 96 {
		t.Fatalf("v6 split: %d prefixes", len(s))
	}
}

func TestNormalizeDropsContained(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.5/32"), netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.1.0/24"),
		netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::1/128"), netip.MustParsePrefix("10.1.0.0/24"),
		netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("11.0.0.0/8"), netip.MustParsePrefix("11.0.0.1/32"),
	}
	got := normalize(in)
	want := "[10.0.0.0/16 10.1.0.0/24 11.0.0.0/8 fd00::/64]"
	if s := fmt.Sprint(got); s != want {
		t.Fatalf("normalize = %s, want %s", s, want)
	}
}
