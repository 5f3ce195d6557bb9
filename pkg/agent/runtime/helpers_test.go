package runtime_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/ovsenv"
)

// The control plane, controller and agents of these tests are
// test/livecluster's; this file holds what only they use.

// connection is one expected verdict.
type connection struct {
	src     *ovsenv.Pod
	dst     *ovsenv.Pod
	port    uint16
	allowed bool
}

// checkConnections probes each connection with real TCP. Allowed ones are
// retried for a while (a first SYN may race ARP); denied ones must fail
// every time.
func checkConnections(t *testing.T, env *ovsenv.Env, step string, conns ...connection) {
	t.Helper()
	if err := env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		dst := netip.AddrPortFrom(c.dst.IPv4(), c.port)
		var err error
		if c.allowed {
			for i := 0; i < 3; i++ {
				if err = c.src.ProbeTCP(dst, 2*time.Second); err == nil {
					break
				}
			}
			if err != nil {
				t.Errorf("%s: %s -> %s %s: blocked (%v), want allowed", step, c.src.Name, c.dst.Name, dst, err)
			}
			continue
		}
		if err = c.src.ProbeTCP(dst, 700*time.Millisecond); err == nil {
			t.Errorf("%s: %s -> %s %s: allowed, want blocked", step, c.src.Name, c.dst.Name, dst)
		} else if !errors.Is(err, ovsenv.ErrNoReply) {
			t.Errorf("%s: %s -> %s %s: %v, want no reply", step, c.src.Name, c.dst.Name, dst, err)
		}
	}
}
