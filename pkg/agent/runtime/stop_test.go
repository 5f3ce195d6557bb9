package runtime_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/test/livecluster"
)

// TestEncapAgentStopsWithItsOVS: an agent whose pod is deleted finds its
// OVSDB gone (ovsdb-server stops with the pod) when it moves the node's
// interface back from the underlay bridge at stop. It still stops within
// the bound the revert gets (3 s), the node's link has its addresses
// back, and the bridge it could not remove is logged as what it is, a
// consequence of the stop (WARN), not a fault: nothing at ERROR.
func TestEncapAgentStopsWithItsOVS(t *testing.T) {
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	bed := newRoutedBed(t)
	n := bed.addNode(c, 1, 1500)
	cniConfig(t, c, n)
	c.StartController(t)
	opts := encapConfig(c, n, kubeconfig, 1, config.NodeNetworkEncap, config.TunnelGeneve)
	opts.KeepUnderlay = false // as a real agent
	logs := &logRecords{}
	opts.Logger = slog.New(logs)
	ag := livecluster.StartAgent(t, n.name, opts)
	ag.RealizedOn(t)
	if err := underlayErr(n); err != nil {
		t.Fatalf("before the stop: %v", err)
	}
	if err := n.env.StopOVSDB(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ag.Stop()
	if took, bound := time.Since(start), 3*time.Second; took > bound+5*time.Second {
		t.Errorf("the agent took %v to stop, want about %v (its revert's bound)", took.Round(time.Millisecond), bound)
	}
	if err := linkBackErr(n); err != nil {
		t.Errorf("after the stop: %v", err)
	}
	var warned bool
	for _, r := range logs.all() {
		switch {
		case r.Level >= slog.LevelError:
			t.Errorf("logged at ERROR: %s %s", r.Message, attrs(r))
		case r.Level == slog.LevelWarn && strings.Contains(r.Message, "the underlay bridge stays"):
			warned = true
			t.Logf("WARN %s %s", r.Message, attrs(r))
		}
	}
	if !warned {
		t.Error("no WARN that the underlay bridge stays")
	}
}

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

func (l *logRecords) all() []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]slog.Record(nil), l.recs...)
}

// attrs renders a record's attributes key=value.
func attrs(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	return b.String()
}
