package openflow

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// encodeNAT builds ct's nat action.
func encodeNAT(n NAT, commit bool, ethType uint16) (*of13.NXActionCTNAT, error) {
	nat := of13.NewNXActionCTNAT()
	if n.Src && n.Dst {
		return nil, errors.New("NAT: Src and Dst are exclusive")
	}
	if !n.Src && !n.Dst {
		if n.Addr.IsValid() || n.Port != 0 {
			return nil, errors.New("NAT: an address or port needs Src or Dst")
		}
		return nat, nil
	}
	if !commit {
		// OVS sets up a translation only for a connection being committed.
		return nil, errors.New("NAT with an address needs Commit")
	}
	if !n.Addr.IsValid() || n.Addr.Is4In6() || n.Addr.Zone() != "" {
		return nil, fmt.Errorf("NAT: invalid address %v", n.Addr)
	}
	if n.Addr.Is4() != (ethType == ethTypeIPv4) {
		return nil, fmt.Errorf("NAT: address %v does not match the flow's EthType %#04x", n.Addr, ethType)
	}
	if n.Src {
		_ = nat.SetSNAT()
	} else {
		_ = nat.SetDNAT()
	}
	ip := net.IP(n.Addr.AsSlice())
	if n.Addr.Is4() {
		nat.SetRangeIPv4Min(ip)
	} else {
		nat.SetRangeIPv6Min(ip)
	}
	if n.Port != 0 {
		// libOpenflow writes the maximum whenever the minimum is set: give
		// both (a one-port range, as OVS reads a single port).
		lo, hi := n.Port, n.Port
		nat.SetRangeProtoMin(&lo)
		nat.SetRangeProtoMax(&hi)
	}
	return nat, nil
}

// appendNATText renders nat, nat(dst=10.0.0.2:8080) or
// nat(dst=[fd00::2]:8080) as ovs-ofctl reads it.
func appendNATText(b []byte, n NAT) []byte {
	b = append(b, "nat"...)
	if !n.Src && !n.Dst {
		return b
	}
	if n.Src {
		b = append(b, "(src="...)
	} else {
		b = append(b, "(dst="...)
	}
	if n.Addr.Is6() && n.Port != 0 {
		b = append(b, '[')
		b = n.Addr.AppendTo(b)
		b = append(b, ']')
	} else {
		b = n.Addr.AppendTo(b)
	}
	if n.Port != 0 {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(n.Port), 10)
	}
	return append(b, ')')
}
