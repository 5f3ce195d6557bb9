package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/time/rate"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// RejectFrame builds the answer to a new connection to a Service without
// usable endpoints, as kube-proxy's REJECT does: an ICMP destination
// unreachable, port unreachable (ICMPv6 type 1 code 4 for IPv6) from the
// Service's address to the client, quoting the rejected packet. frame is
// the rejected packet from its Ethernet header (possibly truncated; its IP
// header and 8 bytes of its payload are needed). The answer goes back to
// the MAC address it came from, from the MAC address it was sent to.
//
// The ICMP message and its checksum come from golang.org/x/net/icmp; the
// Ethernet and IP headers around it are written here, because a
// packet-out carries the whole frame.
func RejectFrame(frame []byte) ([]byte, error) {
	if len(frame) < 14 {
		return nil, errors.New("reject: frame too short")
	}
	dstMAC, srcMAC := frame[0:6], frame[6:12]
	eth := binary.BigEndian.Uint16(frame[12:14])
	pkt := frame[14:]
	out := make([]byte, 0, 128)
	out = append(out, srcMAC...)
	out = append(out, dstMAC...)
	switch eth {
	case 0x0800:
		if len(pkt) < ipv4.HeaderLen || pkt[0]>>4 != 4 {
			return nil, errors.New("reject: not an IPv4 packet")
		}
		ihl := int(pkt[0]&0x0f) * 4
		if ihl < ipv4.HeaderLen || len(pkt) < ihl+8 {
			return nil, errors.New("reject: IPv4 packet truncated")
		}
		if binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
			return nil, errors.New("reject: not the first fragment")
		}
		client, service := pkt[12:16], pkt[16:20]
		if a := netip.AddrFrom4([4]byte(client)); !unicast(a) {
			return nil, fmt.Errorf("reject: source %v is not unicast", a)
		}
		// RFC 1812: as much of the packet as fits in 576 bytes.
		msg, err := portUnreachable(ipv4.ICMPTypeDestinationUnreachable, 3, quoted(pkt, 576-ipv4.HeaderLen-8), nil)
		if err != nil {
			return nil, err
		}
		ip := make([]byte, ipv4.HeaderLen)
		ip[0] = 4<<4 | ipv4.HeaderLen/4
		binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4.HeaderLen+len(msg)))
		ip[8], ip[9] = 64, 1 // TTL, ICMP
		copy(ip[12:16], service)
		copy(ip[16:20], client)
		binary.BigEndian.PutUint16(ip[10:12], headerChecksum(ip))
		out = binary.BigEndian.AppendUint16(out, 0x0800)
		out = append(out, ip...)
		return append(out, msg...), nil
	case 0x86dd:
		if len(pkt) < ipv6.HeaderLen+8 || pkt[0]>>4 != 6 {
			return nil, errors.New("reject: IPv6 packet truncated")
		}
		client, service := pkt[8:24], pkt[24:40]
		if a := netip.AddrFrom16([16]byte(client)); !unicast(a) {
			return nil, fmt.Errorf("reject: source %v is not unicast", a)
		}
		// RFC 4443: as much as fits in the minimum MTU.
		msg, err := portUnreachable(ipv6.ICMPTypeDestinationUnreachable, 4, quoted(pkt, 1280-ipv6.HeaderLen-8),
			icmp.IPv6PseudoHeader(net.IP(service), net.IP(client)))
		if err != nil {
			return nil, err
		}
		ip := make([]byte, ipv6.HeaderLen)
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:6], uint16(len(msg)))
		ip[6], ip[7] = 58, 64 // ICMPv6, hop limit
		copy(ip[8:24], service)
		copy(ip[24:40], client)
		out = binary.BigEndian.AppendUint16(out, 0x86dd)
		out = append(out, ip...)
		return append(out, msg...), nil
	}
	return nil, fmt.Errorf("reject: EtherType %#04x is not IP", eth)
}

// portUnreachable is the ICMP (or ICMPv6, with its pseudo-header psh)
// destination unreachable message quoting pkt, checksum included.
func portUnreachable(typ icmp.Type, code int, pkt, psh []byte) ([]byte, error) {
	m := icmp.Message{Type: typ, Code: code, Body: &icmp.DstUnreach{Data: pkt}}
	b, err := m.Marshal(psh)
	if err != nil {
		return nil, fmt.Errorf("reject: %w", err)
	}
	return b, nil
}

// quoted is the start of the rejected packet, at most max bytes.
func quoted(pkt []byte, max int) []byte {
	if len(pkt) > max {
		pkt = pkt[:max]
	}
	return pkt
}

func unicast(a netip.Addr) bool {
	return !a.IsMulticast() && !a.IsUnspecified() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// headerChecksum is the Internet checksum of an IPv4 header (x/net/ipv4
// marshals headers in the host's socket byte order, and not their
// checksum, so the header is written here).
func headerChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Rejecter answers the packets the bridge sends for rejection (new
// connections to frontends without usable endpoints, a Controller action in
// ServiceLB) with RejectFrame, out of the port they came in on, at most
// Rate per second (bursts of as many): a client retrying in a loop cannot
// make the agent flood.
type Rejecter struct {
	// Send sends frame out of port (the OpenFlow client's PacketOut).
	Send func(port uint32, frame []byte) error
	// Logf receives what could not be answered; nil discards it.
	Logf func(format string, args ...any)

	limit *rate.Limiter
}

// RejectRate bounds the answers per second.
const RejectRate = 100

// NewRejecter returns a rejecter sending through send.
func NewRejecter(send func(port uint32, frame []byte) error, logf func(string, ...any)) *Rejecter {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Rejecter{Send: send, Logf: logf, limit: rate.NewLimiter(RejectRate, RejectRate)}
}

// Handle answers a packet-in if it came from ServiceLB; it ignores others.
func (r *Rejecter) Handle(pi openflow.PacketIn) {
	if pi.Table != pipeline.ServiceLB.ID() {
		return
	}
	if !r.limit.Allow() {
		return
	}
	frame, err := RejectFrame(pi.Data)
	if err != nil {
		r.Logf("service reject: %v", err)
		return
	}
	if err := r.Send(pi.InPort, frame); err != nil {
		r.Logf("service reject: sending to port %d: %v", pi.InPort, err)
	}
}
