package realizer_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// udpStream sends numbered datagrams from a pod to an echo server at a
// steady rate and counts the echoes: a packet dropped by a flow change shows
// up as a missing echo, which TCP's retransmissions would hide.
type udpStream struct {
	conn     net.Conn
	sent     atomic.Int64
	received atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	seen     sync.Map
}

func startUDPStream(t *testing.T, src *testPod, dst netip.AddrPort, interval time.Duration) *udpStream {
	t.Helper()
	var c net.Conn
	if err := src.InNetns(func() error {
		var err error
		c, err = net.Dial("udp", dst.String())
		return err
	}); err != nil {
		t.Fatalf("udp stream from %s: %v", src.ref, err)
	}
	s := &udpStream{conn: c, stop: make(chan struct{})}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				select {
				case <-s.stop:
					return
				default:
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue
				}
				time.Sleep(10 * time.Millisecond) // ICMP errors: keep reading
				continue
			}
			if n == 8 {
				if _, dup := s.seen.LoadOrStore(binary.BigEndian.Uint64(buf[:8]), true); !dup {
					s.received.Add(1)
				}
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		var seq uint64
		for {
			select {
			case <-s.stop:
				return
			case <-tk.C:
				var b [8]byte
				binary.BigEndian.PutUint64(b[:], seq)
				seq++
				if _, err := c.Write(b[:]); err == nil {
					s.sent.Add(1)
				}
			}
		}
	}()
	return s
}

// finish stops sending, waits for late echoes and returns the counts.
func (s *udpStream) finish() (sent, received int64) {
	close(s.stop)
	time.Sleep(300 * time.Millisecond)
	_ = s.conn.SetReadDeadline(time.Now())
	s.wg.Wait()
	s.conn.Close()
	return s.sent.Load(), s.received.Load()
}
