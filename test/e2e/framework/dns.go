package framework

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/tierflow/tierflow/test/ovsenv"
)

// QueryDNS asks server, from src's network namespace, for the A record of
// name over UDP or TCP (one query, no retries, no search domains) and
// returns the first address of the answer.
func QueryDNS(src Pod, server netip.AddrPort, tcp bool, name string, timeout time.Duration) (netip.Addr, error) {
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: uint16(time.Now().UnixNano()), RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	req, err := q.Pack()
	if err != nil {
		return netip.Addr{}, err
	}
	var resp []byte
	err = ovsenv.InNetns("/run/netns/"+src.Netns, func() error {
		network := "udp"
		if tcp {
			network = "tcp"
		}
		c, err := net.DialTimeout(network, server.String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if tcp {
			if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(req))), req...)); err != nil {
				return err
			}
			var n uint16
			if err := binary.Read(c, binary.BigEndian, &n); err != nil {
				return err
			}
			resp = make([]byte, n)
			_, err = io.ReadFull(c, resp)
			return err
		}
		if _, err := c.Write(req); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		resp = buf[:n]
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return netip.Addr{}, fmt.Errorf("DNS answer: %w", err)
	}
	if m.ID != q.ID {
		return netip.Addr{}, fmt.Errorf("DNS answer for query %d, want %d", m.ID, q.ID)
	}
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			return netip.AddrFrom4(r.A), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("DNS answer without an A record (rcode %v)", m.RCode)
}
