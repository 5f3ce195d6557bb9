package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/server"
)

// TestAgentQuery: the controller forwards a query to a node's agent over
// its distribution stream and gets the agent's handler's answer; an
// unknown or disconnected node fails at once with ErrNodeUnreachable, an
// agent that does not answer in time with a deadline error, and the
// stream keeps working after both.
func TestAgentQuery(t *testing.T) {
	e := newEnv(t, tokens, server.Options{})
	populate(e)

	started := make(chan struct{}, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "policy": r.URL.Query().Get("policy")})
	})
	mux.HandleFunc("GET /v1/missing", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"no such thing"}`))
	})
	// stuck answers only when released: an agent that does not answer.
	release := make(chan struct{})
	mux.HandleFunc("GET /v1/stuck", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		w.WriteHeader(http.StatusGatewayTimeout)
	})
	// slow answers only when its request ends (the agent's own timeout,
	// or the stream's end).
	mux.HandleFunc("GET /v1/slow", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
		w.WriteHeader(http.StatusGatewayTimeout)
	})
	cfg := e.agentConfig("n1", "tok-n1", e.addr, "")
	cfg.Query = mux
	n1 := e.startAgent(cfg)
	// n2's agent serves no queries (an agent of an older version ignores
	// them; this one says so).
	n2 := e.startAgent(e.agentConfig("n2", "tok-n2", e.addr, ""))
	e.waitConverged(n1, n2)

	ctx := context.Background()
	code, body, err := e.srv.AgentQuery(ctx, "n1", "/v1/echo", "policy=K%2Fns%2Fp")
	if err != nil || code != 200 {
		t.Fatalf("echo: %d %s %v", code, body, err)
	}
	var echo map[string]string
	if err := json.Unmarshal(body, &echo); err != nil || echo["path"] != "/v1/echo" || echo["policy"] != "K/ns/p" {
		t.Errorf("echo answered %s (%v)", body, err)
	}
	if code, body, err := e.srv.AgentQuery(ctx, "n1", "/v1/missing", ""); err != nil || code != 404 || !strings.Contains(string(body), "no such thing") {
		t.Errorf("an agent's error answer is passed on: %d %s %v", code, body, err)
	}
	if code, body, err := e.srv.AgentQuery(ctx, "n2", "/v1/echo", ""); err != nil || code != http.StatusNotImplemented {
		t.Errorf("agent without a query handler: %d %s %v, want 501", code, body, err)
	}

	start := time.Now()
	if _, _, err := e.srv.AgentQuery(ctx, "n9", "/v1/echo", ""); !errors.Is(err, server.ErrNodeUnreachable) || !strings.Contains(err.Error(), "node n9 unreachable") {
		t.Errorf("unknown node: %v, want node n9 unreachable", err)
	}
	// n3 is a node of the cluster (policies span it) without an agent.
	if _, _, err := e.srv.AgentQuery(ctx, "n3", "/v1/echo", ""); !errors.Is(err, server.ErrNodeUnreachable) {
		t.Errorf("node without agent: %v, want ErrNodeUnreachable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("unreachable nodes took %s to fail: must not wait for a timeout", d)
	}

	// Timeout: the agent does not answer within the caller's deadline.
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = e.srv.AgentQuery(tctx, "n1", "/v1/stuck", "")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer in time") {
		t.Errorf("slow agent: %v, want a deadline error", err)
	}
	<-started
	close(release)
	// The late answer is dropped, and the stream still serves queries.
	if code, _, err := e.srv.AgentQuery(ctx, "n1", "/v1/echo", ""); err != nil || code != 200 {
		t.Errorf("after a timeout: %d %v", code, err)
	}

	// The agent disconnects while a query waits: it fails at once.
	errc := make(chan error, 1)
	go func() {
		_, _, err := e.srv.AgentQuery(ctx, "n1", "/v1/slow", "")
		errc <- err
	}()
	<-started
	start = time.Now()
	n1.Stop()
	select {
	case err := <-errc:
		if !errors.Is(err, server.ErrNodeUnreachable) || !strings.Contains(err.Error(), "disconnected") {
			t.Errorf("agent gone while answering: %v, want node unreachable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a query of a disconnected agent still waits after 10s")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("disconnection noticed after %s", d)
	}
	if _, _, err := e.srv.AgentQuery(ctx, "n1", "/v1/echo", ""); !errors.Is(err, server.ErrNodeUnreachable) {
		t.Errorf("after the agent left: %v, want ErrNodeUnreachable", err)
	}
}
