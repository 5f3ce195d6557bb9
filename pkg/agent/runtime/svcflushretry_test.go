package runtime_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestServiceFlushRetried puts the agent's OpenFlow connection through a
// relay (ofRelay) in front of the real bridge's management socket, which
// drops the connection under the agent's conntrack flushes, as a switch
// that closes or restarts its connections does:
//
//   - an endpoint leaves and its first flush fails (the connection drops
//     before the switch sees it): its long-lived connection goes on
//     (shown); the agent tries again after the revalidation, that try
//     fails too, the relay refusing the agent's reconnection for a
//     moment; once it can reconnect, a later try ends the connection: no
//     conntrack entry to the endpoint is left, the connection fails;
//   - a flush the switch rejects (the relay answers it with an OpenFlow
//     error, as OVS before 3.1 does) is not tried again.
func TestServiceFlushRetried(t *testing.T) {
	var relay *ofRelay
	bed := startFlushBed(t, func(br *ovsenv.Bridge, opts *runtime.Options) {
		relay = startOFRelay(t, br.MgmtSocketPath())
		opts.Config.OpenFlowSocket = relay.path
	})
	env, a, b, e, vip, setEndpoints, ag, zone := bed.env, bed.a, bed.b, bed.e, bed.vip, bed.setEndpoints, bed.ag, flushZone
	metric := metricReader(t, ag)
	flushes := func(when string) int { return metric("tierflow_agent_service_conntrack_flushes_total", "when", when) }
	flushErrors := func() int { return metric("tierflow_agent_openflow_errors_total", "op", "conntrack-flush") }

	pause, resume := bed.revalidators(t)

	// 1. b leaves; its first flush and the try after the revalidation
	// fail.
	long := bed.dialB(t)
	defer long.Close()
	// Paused revalidators hold the agent's second flush (it waits for
	// them), so the first flush's failure can be looked at.
	pause()
	relay.cutFlushes(2, time.Second)
	bundle0, errs0 := flushes("bundle"), flushErrors()
	setEndpoints(e)
	livecluster.Eventually(t, 10*time.Second, "the first flush fails", func() error {
		if relay.stats().cut == 0 {
			return fmt.Errorf("no flush cut yet")
		}
		if flushErrors() == errs0 {
			return fmt.Errorf("the failed flush is not counted yet")
		}
		return nil
	})
	if n := flushes("bundle"); n != bundle0 {
		t.Fatalf("flushes counted done right after the bundle: %d, want %d (the relay cut the first flush)", n, bundle0)
	}
	// The fail-open: what the agent left before it tried again.
	if ep, state := ctEntry(t, env, zone, long.LocalAddr()); ep != b.IPv4() {
		t.Fatalf("after the failed first flush the connection's conntrack entry is to %v %s, want b (the flush never reached the switch)", ep, state)
	}
	if err := long.Exchange("after the failed flush", 3*time.Second); err != nil {
		t.Fatalf("after the failed first flush the connection to b: %v (want it alive: nothing ended it)", err)
	}
	retried0 := flushes("retried")
	resume()
	livecluster.Eventually(t, 30*time.Second, "the removed endpoint's connection is ended", func() error {
		if left := ctEntriesTo(t, env, zone, b.IPv4()); len(left) != 0 {
			return fmt.Errorf("conntrack entries to the removed endpoint b (flushes cut by the relay: %d):\n%s", relay.stats().cut, strings.Join(left, "\n"))
		}
		return nil
	})
	st := relay.stats()
	t.Logf("relay: %d flushes cut, %d connections refused; agent: %d failed flush tries", st.cut, st.refused, flushErrors()-errs0)
	if st.cut != 2 {
		t.Errorf("the relay cut %d flushes, want 2 (the first and the try after the revalidation)", st.cut)
	}
	if n := flushes("retried"); n <= retried0 {
		t.Errorf("retried flushes: %d, want more than %d", n, retried0)
	}
	if n := flushErrors() - errs0; n < 2 {
		t.Errorf("failed flush tries counted: %d, want at least 2", n)
	}
	if err := long.Exchange("after", 3*time.Second); err == nil {
		t.Errorf("the long-lived connection to the removed endpoint still answers after the flush was retried")
	}
	if err := a.ProbeTCP(vip, 3*time.Second); err != nil {
		t.Errorf("a new connection to the Service (endpoint e): %v", err)
	}

	// 2. A flush the switch rejects is not tried again.
	setEndpoints(b, e)
	if err := env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	relay.rejectFlushes(true)
	seen0, errs0, reval0, retried0 := relay.stats().seen, flushErrors(), flushes("revalidated"), flushes("retried")
	setEndpoints(e)
	livecluster.Eventually(t, 10*time.Second, "the switch rejects the first flush", func() error {
		if flushErrors() == errs0 {
			return fmt.Errorf("no failed flush counted")
		}
		return nil
	})
	// A second flush would come once the revalidators ran (well under a
	// second here), retries within seconds.
	time.Sleep(5 * time.Second)
	relay.rejectFlushes(false)
	if n := relay.stats().seen - seen0; n != 1 {
		t.Errorf("the agent sent %d conntrack flushes after a rejected one, want 1 (the rejected one)", n)
	}
	if n := flushErrors() - errs0; n != 1 {
		t.Errorf("failed flush tries counted: %d, want 1", n)
	}
	if r, q := flushes("revalidated")-reval0, flushes("retried")-retried0; r != 0 || q != 0 {
		t.Errorf("flushes after a rejected one: %d revalidated, %d retried; want none", r, q)
	}
}

// ofRelay passes OpenFlow messages between the agent and a bridge's
// management socket. Told to, it drops the agent's connection at the next
// conntrack flush (NXT_CT_FLUSH) the agent sends, before the switch gets
// it, and refuses the agent's reconnections for a while (a connection
// that breaks, a switch that closes its connections); or it answers
// flushes with the OpenFlow error a switch without NXT_CT_FLUSH sends.
type ofRelay struct {
	path   string
	target string
	ln     net.Listener

	mu          sync.Mutex
	toCut       int
	refuseFor   time.Duration
	refuseUntil time.Time
	reject      bool
	st          relayStats
	conns       map[net.Conn]bool
}

type relayStats struct {
	seen    int // conntrack flushes the agent sent
	cut     int // of them, cut
	refused int // connections refused
}

func startOFRelay(t *testing.T, target string) *ofRelay {
	t.Helper()
	r := &ofRelay{path: filepath.Join(t.TempDir(), "of.sock"), target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("unix", r.path)
	if err != nil {
		t.Fatal(err)
	}
	r.ln = ln
	go r.serve()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for c := range r.conns {
			c.Close()
		}
	})
	return r
}

// cutFlushes makes the relay cut the next n connections on which the
// agent sends a flush, refusing new connections for refuse after each.
func (r *ofRelay) cutFlushes(n int, refuse time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.toCut, r.refuseFor = n, refuse
}

// rejectFlushes makes the relay answer every flush with an OpenFlow error
// instead of passing it on.
func (r *ofRelay) rejectFlushes(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reject = on
}

func (r *ofRelay) stats() relayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func (r *ofRelay) serve() {
	for {
		agent, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		refuse := time.Now().Before(r.refuseUntil)
		if refuse {
			r.st.refused++
		}
		r.mu.Unlock()
		if refuse {
			agent.Close()
			continue
		}
		go r.relay(agent)
	}
}

// isCtFlush reports whether msg is a Nicira NXT_CT_FLUSH request.
func isCtFlush(msg []byte) bool {
	const ofptExperimenter, nxVendorID, nxtCtFlush = 4, 0x00002320, 32
	return len(msg) >= 16 && msg[1] == ofptExperimenter &&
		binary.BigEndian.Uint32(msg[8:12]) == nxVendorID && binary.BigEndian.Uint32(msg[12:16]) == nxtCtFlush
}

func (r *ofRelay) relay(agent net.Conn) {
	sw, err := net.Dial("unix", r.target)
	if err != nil {
		agent.Close()
		return
	}
	r.mu.Lock()
	r.conns[agent], r.conns[sw] = true, true
	r.mu.Unlock()
	defer func() {
		agent.Close()
		sw.Close()
		r.mu.Lock()
		delete(r.conns, agent)
		delete(r.conns, sw)
		r.mu.Unlock()
	}()
	var wmu sync.Mutex // the agent's side: the switch's messages and our errors
	go func() {
		defer agent.Close()
		for {
			msg, err := openflow.ReadMessage(sw)
			if err != nil {
				return
			}
			wmu.Lock()
			_, err = agent.Write(msg)
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		msg, err := openflow.ReadMessage(agent)
		if err != nil {
			return
		}
		if isCtFlush(msg) {
			r.mu.Lock()
			r.st.seen++
			cut, reject := r.toCut > 0, r.reject
			if cut {
				r.toCut--
				r.st.cut++
				r.refuseUntil = time.Now().Add(r.refuseFor)
			}
			r.mu.Unlock()
			if cut {
				return // closes both sides; the switch never sees the flush
			}
			if reject {
				// OFPT_ERROR, OFPET_BAD_REQUEST / OFPBRC_BAD_EXP_TYPE (an
				// unknown Nicira subtype), the request's first 64 bytes.
				data := msg[:min(len(msg), 64)]
				rep := make([]byte, 12, 12+len(data))
				rep[0], rep[1] = msg[0], 1
				binary.BigEndian.PutUint16(rep[2:4], uint16(12+len(data)))
				copy(rep[4:8], msg[4:8])
				binary.BigEndian.PutUint16(rep[8:10], 1)
				binary.BigEndian.PutUint16(rep[10:12], 4)
				wmu.Lock()
				_, err := agent.Write(append(rep, data...))
				wmu.Unlock()
				if err != nil {
					return
				}
				continue
			}
		}
		if _, err := sw.Write(msg); err != nil {
			return
		}
	}
}
