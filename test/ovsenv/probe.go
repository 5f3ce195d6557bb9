package ovsenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// InNetns runs fn with the calling OS thread switched into the pod's network
// namespace. Sockets created inside fn stay in that namespace after it
// returns, so they can be used from any goroutine. fn must not start
// goroutines that create sockets (they would run on other threads).
func (p *Pod) InNetns(fn func() error) error {
	return InNetns(p.NetnsPath, fn)
}

// InNetns is Pod.InNetns for the network namespace at path (a bind mount
// such as /run/netns/NAME).
func InNetns(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", path, err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime ends a locked thread when its
		// goroutine exits, so no other goroutine runs in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("setns back: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Server is an echo server inside a pod: TCP servers echo every line back
// on the same connection; UDP servers echo every datagram.
type Server struct {
	Addr netip.AddrPort // the listening address ([::]:port: every address)

	tcp     net.Listener
	udp     net.PacketConn
	mu      sync.Mutex
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
	peersMu sync.Mutex
	peers   []netip.Addr
}

// ListenTCP starts a TCP echo server on every address of the pod (IPv4 and
// IPv6) and stops it on test cleanup.
func (p *Pod) ListenTCP(port uint16) *Server {
	t := p.bridge.env.t
	t.Helper()
	s := &Server{Addr: netip.AddrPortFrom(netip.IPv6Unspecified(), port), conns: map[net.Conn]bool{}}
	err := p.InNetns(func() error {
		var err error
		s.tcp, err = net.Listen("tcp", s.Addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("ovsenv: pod %s: listen tcp %d: %v", p.Name, port, err)
	}
	s.wg.Add(1)
	go s.serveTCP()
	t.Cleanup(s.Close)
	return s
}

// ListenUDP starts a UDP echo server on every address of the pod and stops
// it on test cleanup.
func (p *Pod) ListenUDP(port uint16) *Server {
	t := p.bridge.env.t
	t.Helper()
	s := &Server{Addr: netip.AddrPortFrom(netip.IPv6Unspecified(), port), conns: map[net.Conn]bool{}}
	err := p.InNetns(func() error {
		var err error
		s.udp, err = net.ListenPacket("udp", s.Addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("ovsenv: pod %s: listen udp %d: %v", p.Name, port, err)
	}
	s.wg.Add(1)
	go s.serveUDP()
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.notePeer(c.RemoteAddr())
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
		}()
	}
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		s.notePeer(from)
		_, _ = s.udp.WriteTo(buf[:n], from)
	}
}

func (s *Server) notePeer(a net.Addr) {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	s.peersMu.Lock()
	s.peers = append(s.peers, ap.Addr().Unmap())
	s.peersMu.Unlock()
}

// Peers returns the source addresses of the connections (TCP) or datagrams
// (UDP) the server received, in arrival order.
func (s *Server) Peers() []netip.Addr {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	return append([]netip.Addr(nil), s.peers...)
}

// Close stops the server and closes its open connections.
func (s *Server) Close() {
	if s.tcp != nil {
		s.tcp.Close()
	}
	if s.udp != nil {
		s.udp.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// ErrNoReply is wrapped by probe errors when the peer did not answer in time
// (the typical result of a drop flow).
var ErrNoReply = errors.New("no reply")

// ProbeTCP connects from the pod to dst, sends one line and waits for the
// echo, all within timeout. It returns nil when the connection works.
func (p *Pod) ProbeTCP(dst netip.AddrPort, timeout time.Duration) error {
	c, err := p.DialTCP(dst, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Exchange("probe", timeout)
}

// ProbeUDP sends one datagram from the pod to dst and waits for the echo
// within timeout.
func (p *Pod) ProbeUDP(dst netip.AddrPort, timeout time.Duration) error {
	var conn net.Conn
	err := p.InNetns(func() error {
		var err error
		conn, err = net.Dial("udp", dst.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("pod %s: udp %s: %w", p.Name, dst, err)
	}
	defer conn.Close()
	msg := fmt.Sprintf("probe from %s at %d", p.Name, time.Now().UnixNano())
	deadline := time.Now().Add(timeout)
	_ = conn.SetDeadline(deadline)
	buf := make([]byte, 2048)
	// Resend every 200ms: the first datagram may be lost while the pods
	// resolve each other's MAC addresses.
	var lastErr error
	for time.Now().Before(deadline) {
		if _, err := conn.Write([]byte(msg)); err != nil {
			lastErr = err
		}
		_ = conn.SetReadDeadline(minTime(deadline, time.Now().Add(200*time.Millisecond)))
		n, err := conn.Read(buf)
		if err == nil && string(buf[:n]) == msg {
			return nil
		}
		if err != nil && !isTimeout(err) {
			// An ICMP error (port unreachable) reported on the socket.
			lastErr = err
			time.Sleep(50 * time.Millisecond)
		}
	}
	if lastErr != nil {
		return fmt.Errorf("pod %s: udp %s: %w within %v (last error: %v)", p.Name, dst, ErrNoReply, timeout, lastErr)
	}
	return fmt.Errorf("pod %s: udp %s: %w within %v", p.Name, dst, ErrNoReply, timeout)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Conn is a TCP connection from a pod, kept open so that a test can send on
// it again after changing flows (e.g. to check that an established
// connection is cut or kept).
type Conn struct {
	pod *Pod
	c   net.Conn
	r   *bufio.Reader
}

// DialTCP opens a TCP connection from the pod to dst within timeout.
func (p *Pod) DialTCP(dst netip.AddrPort, timeout time.Duration) (*Conn, error) {
	var c net.Conn
	err := p.InNetns(func() error {
		var err error
		// Dial runs socket() and connect() on this goroutine's (locked)
		// thread: the socket is created in the pod's namespace.
		c, err = net.DialTimeout("tcp", dst.String(), timeout)
		return err
	})
	if err != nil {
		if isTimeout(err) {
			return nil, fmt.Errorf("pod %s: connect %s: %w (%v)", p.Name, dst, ErrNoReply, err)
		}
		return nil, fmt.Errorf("pod %s: connect %s: %w", p.Name, dst, err)
	}
	return &Conn{pod: p, c: c, r: bufio.NewReader(c)}, nil
}

// LocalAddr is the connection's source address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.c.LocalAddr().(*net.TCPAddr).AddrPort() }

// Exchange sends msg (a line) and waits for the server's echo within
// timeout.
func (c *Conn) Exchange(msg string, timeout time.Duration) error {
	if strings.Contains(msg, "\n") {
		return errors.New("message must be one line")
	}
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c.c, msg+"\n"); err != nil {
		return fmt.Errorf("pod %s: send to %s: %w", c.pod.Name, c.c.RemoteAddr(), err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		if isTimeout(err) {
			return fmt.Errorf("pod %s: echo from %s: %w within %v", c.pod.Name, c.c.RemoteAddr(), ErrNoReply, timeout)
		}
		return fmt.Errorf("pod %s: echo from %s: %w", c.pod.Name, c.c.RemoteAddr(), err)
	}
	if line != msg+"\n" {
		return fmt.Errorf("pod %s: echo from %s: got %q, want %q", c.pod.Name, c.c.RemoteAddr(), line, msg)
	}
	return nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }
