package runtime_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/ovsenv"
)

// trafficWatch probes connections continuously while a test changes
// something (an agent restart), so that a gap shows even when it is over
// before the change completes. Each probe runs in its own goroutine until
// stop; every failure is recorded with its time.
type trafficWatch struct {
	start time.Time
	stopc chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	failures []string
	probes   map[string]int
}

// watchedFlow is one probed connection: from a pod, or from a node's host
// stack (fromNode), to dst:port over TCP.
type watchedFlow struct {
	name     string
	src      *ovsenv.Pod
	fromNode *simNode
	dst      *ovsenv.Pod
	port     uint16
	// allowed: every probe must succeed; otherwise every one must fail
	// with no reply.
	allowed bool
	// established: one long-lived connection exchanges a line every
	// interval (redialled after a failure); otherwise a new connection
	// per probe.
	established bool
}

const (
	watchInterval = 50 * time.Millisecond
	watchTimeout  = time.Second
)

func watchTraffic(t *testing.T, flows ...watchedFlow) *trafficWatch {
	t.Helper()
	w := &trafficWatch{start: time.Now(), stopc: make(chan struct{}), probes: map[string]int{}}
	for _, f := range flows {
		w.wg.Add(1)
		go w.run(f)
	}
	t.Cleanup(w.stop)
	return w
}

func (w *trafficWatch) stopped() bool {
	select {
	case <-w.stopc:
		return true
	default:
		return false
	}
}

func (w *trafficWatch) record(f watchedFlow, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probes[f.name]++
	var why string
	switch {
	case f.allowed && err != nil:
		why = err.Error()
	case !f.allowed && err == nil:
		why = "allowed, want blocked"
	case !f.allowed && !errors.Is(err, ovsenv.ErrNoReply):
		why = fmt.Sprintf("%v, want no reply", err)
	default:
		return
	}
	w.failures = append(w.failures, fmt.Sprintf("%v %s: %s", time.Since(w.start).Round(time.Millisecond), f.name, why))
}

func (w *trafficWatch) run(f watchedFlow) {
	defer w.wg.Done()
	dst := netip.AddrPortFrom(f.dst.IPv4(), f.port)
	var conn lineConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for n := 0; !w.stopped(); n++ {
		next := time.Now().Add(watchInterval)
		var err error
		switch {
		case f.established:
			if conn == nil {
				conn, err = f.dial(dst)
			}
			if err == nil {
				err = conn.Exchange(fmt.Sprintf("%s %d", f.name, n), watchTimeout)
			}
			if err != nil && conn != nil {
				conn.Close()
				conn = nil
			}
		default:
			var c lineConn
			if c, err = f.dial(dst); err == nil {
				err = c.Exchange("probe", watchTimeout)
				c.Close()
			}
		}
		if w.stopped() {
			return // a probe cut short by the end of the watch proves nothing
		}
		w.record(f, err)
		time.Sleep(time.Until(next))
	}
}

// lineConn is a TCP connection to an echo server (ovsenv's or a host
// stack's socket).
type lineConn interface {
	Exchange(msg string, timeout time.Duration) error
	Close() error
}

func (f watchedFlow) dial(dst netip.AddrPort) (lineConn, error) {
	if f.src != nil {
		c, err := f.src.DialTCP(dst, watchTimeout)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return c, nil
	}
	var c net.Conn
	err := inNetNS(f.fromNode.env.NetnsPath(), func() error {
		var err error
		c, err = net.DialTimeout("tcp", dst.String(), watchTimeout)
		return err
	})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%w: %v", ovsenv.ErrNoReply, err)
		}
		return nil, err
	}
	return &hostConn{c: c, r: bufio.NewReader(c)}, nil
}

// hostConn is a connection from a node's host stack.
type hostConn struct {
	c net.Conn
	r *bufio.Reader
}

func (h *hostConn) Exchange(msg string, timeout time.Duration) error {
	_ = h.c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(h.c, msg+"\n"); err != nil {
		return err
	}
	line, err := h.r.ReadString('\n')
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%w: %v", ovsenv.ErrNoReply, err)
		}
		return err
	}
	if line != msg+"\n" {
		return fmt.Errorf("echo %q, want %q", line, msg)
	}
	return nil
}

func (h *hostConn) Close() error { return h.c.Close() }

// stop ends the probes and waits for them.
func (w *trafficWatch) stop() {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	w.wg.Wait()
}

// check stops the watch and fails the test for every failed probe, and
// for a flow that was hardly probed (the watch proves nothing about it).
func (w *trafficWatch) check(t *testing.T, step string, flows ...watchedFlow) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		max := len(w.failures)
		if max > 20 {
			max = 20
		}
		t.Errorf("%s: %d failed probes (first %d):\n  %s", step, len(w.failures), max, strings.Join(w.failures[:max], "\n  "))
	}
	for _, f := range flows {
		min := 5
		if !f.allowed {
			min = 1 // each takes watchTimeout
		}
		if w.probes[f.name] < min {
			t.Errorf("%s: %s probed only %d times", step, f.name, w.probes[f.name])
		}
	}
}
