package openflow

import (
	"net/netip"
	"testing"
)

// The tunnel destination fields replace encap's former SetTunDst: a host
// address of the field's family, never the unspecified one (OVS would
// encapsulate to 0.0.0.0). Their encoding against a real switch is in
// TestRoundTripEveryFieldAndAction.
func TestSetFieldTunnelDestination(t *testing.T) {
	f := &Flow{Table: 13}
	for _, c := range []struct {
		field Field
		addr  string
		ok    bool
		text  string
	}{
		{FieldTunDst, "192.168.1.3", true, "set_field:192.168.1.3->tun_dst"},
		{FieldTunIPv6Dst, "fd00::3", true, "set_field:fd00::3->tun_ipv6_dst"},
		{FieldTunDst, "0.0.0.0", false, ""},
		{FieldTunIPv6Dst, "::", false, ""},
		{FieldTunIPv6Dst, "fe80::1%eth0", false, ""},
		{FieldTunDst, "fd00::3", false, ""},
		{FieldTunIPv6Dst, "192.168.1.3", false, ""},
		{FieldTunIPv6Dst, "::ffff:192.168.1.3", false, ""},
	} {
		a := SetField{Field: c.field, Addr: netip.MustParseAddr(c.addr)}
		_, err := f.encodeSetField(a)
		if (err == nil) != c.ok {
			t.Errorf("%v %s: err %v, want ok=%v", c.field, c.addr, err, c.ok)
		}
		if c.ok {
			if got := ActionsString([]Action{a}); got != c.text {
				t.Errorf("%v %s: text %q, want %q", c.field, c.addr, got, c.text)
			}
		}
	}
}
