package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/client"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// retryingReceiver is an agent whose datapath fails chosen policies until
// they are healed, and which retries on its own (as the real agent does
// every RetryInterval), pushing changed outcomes with Client.Report.
type retryingReceiver struct {
	mu       sync.Mutex
	policies map[string]int64  // held policy → generation
	broken   map[string]string // policy → error its realization fails with
	outcome  map[string]wire.PolicyResult
	client   *client.Client
}

func newRetryingReceiver() *retryingReceiver {
	return &retryingReceiver{policies: map[string]int64{}, broken: map[string]string{}, outcome: map[string]wire.PolicyResult{}}
}

func (r *retryingReceiver) Apply(_ *wire.Delta, st *wire.NodeState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.policies)
	for id, p := range st.Policies {
		r.policies[id] = p.Generation
	}
	r.realizeLocked()
	errs := client.PolicyErrors{}
	for id := range r.policies {
		if msg := r.broken[id]; msg != "" {
			errs[id] = errors.New(msg)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// realizeLocked is one realization of everything held; it returns the
// outcomes that changed since the previous one.
func (r *retryingReceiver) realizeLocked() []wire.PolicyResult {
	var changed []wire.PolicyResult
	for id := range r.outcome {
		if _, ok := r.policies[id]; !ok {
			delete(r.outcome, id)
		}
	}
	for id, gen := range r.policies {
		res := wire.PolicyResult{PolicyID: id, Generation: gen, Error: r.broken[id]}
		if r.outcome[id] != res {
			r.outcome[id] = res
			changed = append(changed, res)
		}
	}
	return changed
}

// setBroken changes whether id's realization fails, then runs the agent's
// own retry: no update from the controller is involved.
func (r *retryingReceiver) setBroken(id, msg string) {
	r.mu.Lock()
	if msg == "" {
		delete(r.broken, id)
	} else {
		r.broken[id] = msg
	}
	changed := r.realizeLocked()
	r.mu.Unlock()
	r.client.Report(changed)
}

// TestReportBetweenUpdates: an agent whose realization failed and later
// succeeded on its own retry tells the controller at once, and a later
// failure too, without any update from the controller in between.
func TestReportBetweenUpdates(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)
	id := policyID(t, e, "db-allow") // span n1, n3
	agents := startAgents(e, e.addr, "n3")

	recv := newRetryingReceiver()
	recv.broken[id] = "ovs bundle refused"
	cfg := clientConfig("n1", "tok-n1", e.addr, e.clientTLS)
	cfg.Receiver = recv
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	recv.client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.waitConverged(agents...)

	waitSummary := func(what string, ok func(server.Summary) bool) server.Summary {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, found := e.summary(id)
			if found && ok(s) {
				if sum, _ := e.srv.Summary(id); !ok(sum) {
					t.Fatalf("%s: OnSummary saw %+v, Server.Summary says %+v", what, s, sum)
				}
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("summary never reached %s; last %+v", what, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	s := waitSummary("n1 failed", func(s server.Summary) bool { return s.Failed["n1"] != "" && s.Realized == 1 })
	if !strings.Contains(s.Failed["n1"], "ovs bundle refused") {
		t.Errorf("n1's error %q", s.Failed["n1"])
	}
	epoch, version, _ := c.State()
	stats := c.Stats()

	// The agent's retry succeeds: the summary flips with no new update.
	recv.setBroken(id, "")
	waitSummary("2/2 realized after the retry", func(s server.Summary) bool {
		return s.SpanNodes == 2 && s.Realized == 2 && len(s.Failed) == 0
	})

	// A later failure (say, a port change broke realization) is reported
	// just the same.
	recv.setBroken(id, "port vanished")
	s = waitSummary("n1 failed again", func(s server.Summary) bool { return s.Failed["n1"] != "" && s.Realized == 1 })
	if !strings.Contains(s.Failed["n1"], "port vanished") {
		t.Errorf("n1's error %q", s.Failed["n1"])
	}
	recv.setBroken(id, "")
	waitSummary("realized again", func(s server.Summary) bool { return s.Realized == 2 && len(s.Failed) == 0 })

	if ep, v, _ := c.State(); ep != epoch || v != version {
		t.Errorf("the stream moved from %s/%d to %s/%d: the flips must not need an update", epoch, version, ep, v)
	}
	if st := c.Stats(); st != stats {
		t.Errorf("client stats moved from %+v to %+v", stats, st)
	}

	// A result for a generation the agent does not hold is stale: dropped.
	// The next (valid) push still goes through, and the stale one never
	// counted in between.
	other := policyID(t, e, "web-allow") // span n1 (web-1), n2 (web-2)
	_, _, st := c.State()
	gen := st.Policies[other].Generation
	c.Report([]wire.PolicyResult{{PolicyID: other, Generation: gen - 1, Error: "stale"}})
	c.Report([]wire.PolicyResult{{PolicyID: id, Generation: st.Policies[id].Generation, Error: "late failure"}})
	waitSummary("late failure", func(s server.Summary) bool { return strings.Contains(s.Failed["n1"], "late failure") })
	if sum, _ := e.srv.Summary(other); sum.Failed["n1"] != "" {
		t.Errorf("a stale result counted: %+v", sum)
	}
}
