package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

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
		if len(pkt) < 20 || pkt[0]>>4 != 4 {
			return nil, errors.New("reject: not an IPv4 packet")
		}
		ihl := int(pkt[0]&0x0f) * 4
		if ihl < 20 || len(pkt) < ihl+8 {
			return nil, errors.New("reject: IPv4 packet truncated")
		}
		if binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
			return nil, errors.New("reject: not the first fragment")
		}
		src := netip.AddrFrom4([4]byte(pkt[12:16]))
		if !unicast(src) {
			return nil, fmt.Errorf("reject: source %v is not unicast", src)
		}
		// RFC 1812: as much of the packet as fits in 576 bytes.
		quote := quoted(pkt, 576-20-8)
		icmp := make([]byte, 8, 8+len(quote))
		icmp[0], icmp[1] = 3, 3 // destination unreachable, port unreachable
		icmp = append(icmp, quote...)
		binary.BigEndian.PutUint16(icmp[2:4], checksum(icmp, 0))
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:4], uint16(20+len(icmp)))
		ip[8], ip[9] = 64, 1
		copy(ip[12:16], pkt[16:20]) // from the address it was sent to
		copy(ip[16:20], pkt[12:16])
		binary.BigEndian.PutUint16(ip[10:12], checksum(ip, 0))
		out = binary.BigEndian.AppendUint16(out, 0x0800)
		out = append(out, ip...)
		return append(out, icmp...), nil
	case 0x86dd:
		if len(pkt) < 48 || pkt[0]>>4 != 6 {
			return nil, errors.New("reject: IPv6 packet truncated")
		}
		src := netip.AddrFrom16([16]byte(pkt[8:24]))
		if !unicast(src) {
			return nil, fmt.Errorf("reject: source %v is not unicast", src)
		}
		// RFC 4443: as much as fits in the minimum MTU.
		quote := quoted(pkt, 1280-40-8)
		icmp := make([]byte, 8, 8+len(quote))
		icmp[0], icmp[1] = 1, 4 // destination unreachable, port unreachable
		icmp = append(icmp, quote...)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:6], uint16(len(icmp)))
		ip[6], ip[7] = 58, 64
		copy(ip[8:24], pkt[24:40])
		copy(ip[24:40], pkt[8:24])
		// The pseudo-header: addresses, length, next header.
		var sum uint32
		sum = sumWords(ip[8:40], sum)
		sum += uint32(len(icmp)) + 58
		binary.BigEndian.PutUint16(icmp[2:4], checksum(icmp, sum))
		out = binary.BigEndian.AppendUint16(out, 0x86dd)
		out = append(out, ip...)
		return append(out, icmp...), nil
	}
	return nil, fmt.Errorf("reject: EtherType %#04x is not IP", eth)
}

// quoted is the start of the rejected packet, at most max bytes.
func quoted(pkt []byte, max int) []byte {
	if len(pkt) > max {
		pkt = pkt[:max]
	}
	return append([]byte(nil), pkt...)
}

func unicast(a netip.Addr) bool {
	return !a.IsMulticast() && !a.IsUnspecified() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// sumWords adds b's 16-bit words to sum (the Internet checksum's sum).
func sumWords(b []byte, sum uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

// checksum is the Internet checksum of b over an initial sum.
func checksum(b []byte, sum uint32) uint16 {
	sum = sumWords(b, sum)
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
