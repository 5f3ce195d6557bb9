package proxy

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// TestRejectFrame: the answer is an ICMP port unreachable from the
// Service's address to the client, with valid checksums, quoting the
// rejected packet; for IPv6 an ICMPv6 port unreachable.
func TestRejectFrame(t *testing.T) {
	clientMAC, serviceMAC := []byte{0x0a, 0x58, 0, 0, 0, 1}, []byte{0x0a, 0x74, 0x66, 0, 0, 1}
	frame := func(ethType uint16, ip []byte) []byte {
		f := append(append(append([]byte(nil), serviceMAC...), clientMAC...), byte(ethType>>8), byte(ethType))
		return append(f, ip...)
	}
	t.Run("IPv4", func(t *testing.T) {
		ip := make([]byte, 20+20)
		ip[0], ip[8], ip[9] = 0x45, 64, 6
		binary.BigEndian.PutUint16(ip[2:4], 40)
		copy(ip[12:16], []byte{10, 0, 0, 1})
		copy(ip[16:20], []byte{10, 96, 0, 9})
		syn := frame(0x0800, ip)
		out, err := RejectFrame(syn)
		if err != nil {
			t.Fatal(err)
		}
		if string(out[0:6]) != string(clientMAC) || string(out[6:12]) != string(serviceMAC) {
			t.Fatal("MAC addresses not swapped")
		}
		rip := out[14:34]
		if rip[9] != 1 || netip.AddrFrom4([4]byte(rip[12:16])).String() != "10.96.0.9" || netip.AddrFrom4([4]byte(rip[16:20])).String() != "10.0.0.1" {
			t.Fatalf("IP header %x", rip)
		}
		if headerChecksum(rip) != 0 || int(binary.BigEndian.Uint16(rip[2:4])) != len(out)-14 {
			t.Fatalf("bad IPv4 header %x", rip)
		}
		msg := out[34:]
		if headerChecksum(msg) != 0 {
			t.Fatal("bad ICMP checksum")
		}
		checkPortUnreachable(t, 1, msg, ipv4.ICMPTypeDestinationUnreachable, 3, ip)
		if _, err := RejectFrame(syn[:30]); err == nil {
			t.Fatal("truncated packet accepted")
		}
	})
	t.Run("IPv6", func(t *testing.T) {
		client, service := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00:96::9")
		ip := make([]byte, 40+20)
		ip[0], ip[6], ip[7] = 0x60, 6, 64
		binary.BigEndian.PutUint16(ip[4:6], 20)
		copy(ip[8:24], client.AsSlice())
		copy(ip[24:40], service.AsSlice())
		out, err := RejectFrame(frame(0x86dd, ip))
		if err != nil {
			t.Fatal(err)
		}
		rip := out[14:54]
		if rip[6] != 58 || string(rip[8:24]) != string(service.AsSlice()) || string(rip[24:40]) != string(client.AsSlice()) {
			t.Fatalf("IPv6 header %x", rip)
		}
		msg := out[54:]
		if int(binary.BigEndian.Uint16(rip[4:6])) != len(msg) {
			t.Fatalf("payload length %d, message %d bytes", binary.BigEndian.Uint16(rip[4:6]), len(msg))
		}
		// The checksum covers the pseudo-header: addresses, length, next header.
		psh := append(append(append([]byte(nil), rip[8:40]...), 0, 0, byte(len(msg)>>8), byte(len(msg))), 0, 0, 0, 58)
		if headerChecksum(append(psh, msg...)) != 0 {
			t.Fatal("bad ICMPv6 checksum")
		}
		checkPortUnreachable(t, 58, msg, ipv6.ICMPTypeDestinationUnreachable, 4, ip)
	})
}

// checkPortUnreachable parses msg as an ICMP message of protocol proto
// and checks its type, code and quoted packet.
func checkPortUnreachable(t *testing.T, proto int, msg []byte, typ icmp.Type, code int, quote []byte) {
	t.Helper()
	m, err := icmp.ParseMessage(proto, msg)
	if err != nil {
		t.Fatal(err)
	}
	du, ok := m.Body.(*icmp.DstUnreach)
	if m.Type != typ || m.Code != code || !ok || string(du.Data) != string(quote) {
		t.Fatalf("ICMP %x", msg)
	}
}
