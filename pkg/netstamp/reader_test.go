package netstamp_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/netstamp"
)

// loopbackPair is a connected pair of loopback TCP connections.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// TestStampIsArrivalNotRead: bytes read 100 ms after they were sent carry
// the kernel's stamp of their arrival, within the send's own time, not the
// time of the read.
func TestStampIsArrivalNotRead(t *testing.T) {
	client, server := loopbackPair(t)
	r, err := netstamp.NewReader(server)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel turns its receive stamps on from a worker after the
	// first socket asks: what arrives before that has none.
	for tries := 0; r.Last().IsZero(); tries++ {
		if tries == 100 {
			t.Fatal("no receive stamp after 100 messages")
		}
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		before := time.Now()
		if _, err := client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		time.Sleep(100 * time.Millisecond)
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
		read := time.Now()
		if at := r.Last(); at.Before(before) || at.After(after) {
			t.Fatalf("stamp %v: want between the send's start %v and end %v (read at %v)", at, before, after, read)
		}
	}
	// Closed by the peer: EOF.
	client.Close()
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want EOF", err)
	}
}

// TestUnixRefused: a unix socket gets no stamps, so no Reader.
func TestUnixRefused(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := netstamp.NewReader(a); err == nil {
		t.Fatal("NewReader accepted a connection that is not TCP")
	}
}
