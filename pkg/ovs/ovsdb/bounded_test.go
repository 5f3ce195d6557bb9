package ovsdb_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// bound is how long the calls below may take: the caller's deadline.
const bound = time.Second

// slack is how much later than its deadline a call may return (a busy
// machine schedules late); a call that ignores its context blocks for
// ever, well past it.
const slack = 5 * time.Second

// boundedCall runs call with a context that ends after bound and fails
// the test unless call returns, with the context's error, by bound+slack.
func boundedCall(t *testing.T, what string, call func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v, want the context's deadline", what, err)
		}
		t.Logf("%s returned after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
	case <-time.After(bound + slack):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%s still blocked %v after its context's deadline; goroutines:\n%s", what, slack, libovsdbStacks(string(buf)))
	}
}

// libovsdbStacks keeps the goroutines of a stack dump that are inside
// this package or libovsdb: where a blocked call waits.
func libovsdbStacks(dump string) string {
	var keep []string
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "pkg/ovs/ovsdb.(*Client)") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}

// TestCallsEndWithContextWhenOVSDBGone: ovsdb-server stops (as it does
// with the agent's pod) while the client is connected; the client keeps
// trying to reconnect, and every change given a deadline returns at that
// deadline with the context's error instead of waiting for a server that
// is not coming back; every read answers at once from the cache.
func TestCallsEndWithContextWhenOVSDBGone(t *testing.T) {
	env, c, br, port := bridgeWithPort(t)
	if err := env.StopOVSDB(); err != nil {
		t.Fatal(err)
	}
	waitDisconnected(t, c)

	readsFromCache(t, c, br, port)
	boundedCall(t, "DeletePort", func(ctx context.Context) error { return c.DeletePort(ctx, br, port) })
	boundedCall(t, "DeleteBridge", func(ctx context.Context) error { return c.DeleteBridge(ctx, br) })
	boundedCall(t, "EnsureBridge", func(ctx context.Context) error {
		_, err := c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: br, DatapathType: "netdev"})
		return err
	})
	boundedCall(t, "SetInterfaceExternalID", func(ctx context.Context) error {
		return c.SetInterfaceExternalID(ctx, port, "tierflow.io/admission", "admitted")
	})
	waitCallsDone(t, c, slack)
}

// TestCallsEndWithContextWhenOVSDBHangs: ovsdb-server hangs (stopped
// with SIGSTOP: connections are accepted, requests never answered). A
// change sent to it, and a change sent while the client reconnects to it
// (each reconnection attempt holds libovsdb's connection lock until its
// 10 s timeout), return at their deadline; a call without a deadline
// returns when the client is closed; and the calls abandoned finish.
// Reads while the client reconnects answer at once from the cache.
func TestCallsEndWithContextWhenOVSDBHangs(t *testing.T) {
	env, c, br, port := bridgeWithPort(t)
	thaw, err := env.FreezeOVSDB()
	if err != nil {
		t.Fatal(err)
	}
	// Connected: the request is sent and never answered.
	boundedCall(t, "SetInterfaceExternalID, connected", func(ctx context.Context) error {
		return c.SetInterfaceExternalID(ctx, port, "tierflow.io/admission", "admitted")
	})
	c.Reconnect()
	time.Sleep(300 * time.Millisecond) // the reconnection attempt has begun
	boundedCall(t, "SetInterfaceExternalID, reconnecting", func(ctx context.Context) error {
		return c.SetInterfaceExternalID(ctx, port, "tierflow.io/admission", "admitted")
	})
	boundedCall(t, "DeletePort, reconnecting", func(ctx context.Context) error { return c.DeletePort(ctx, br, port) })
	readsFromCache(t, c, br, port)

	// No deadline: Close ends it.
	done := make(chan error, 1)
	go func() { done <- c.DeletePort(context.Background(), br, port) }()
	time.Sleep(bound)
	go c.Close() // libovsdb's part waits for the reconnection attempt
	select {
	case err := <-done:
		if !errors.Is(err, ovsdb.ErrClosed) {
			t.Errorf("DeletePort ended by Close: err = %v, want ErrClosed", err)
		}
	case <-time.After(slack):
		t.Fatalf("DeletePort without a deadline still blocked %v after Close", slack)
	}
	thaw()
	// Each abandoned call ends with the reconnection attempt that holds
	// it up (10 s), or at once.
	waitCallsDone(t, c, 10*time.Second+slack)
}

// readsFromCache checks that the reads answer at once from the cache,
// as it was before the client lost ovsdb-server (bridge br with the
// uplink port), while the client reconnects: an agent's realization and
// lookups go on with the ports ovs-vswitchd still has. libovsdb's own
// List waits for the new cache and, given no deadline, waited for ever
// (PortBridge and WatchPorts did).
func readsFromCache(t *testing.T, c *ovsdb.Client, br, port string) {
	t.Helper()
	read := func(what string, call func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v, want the cached answer", what, err)
			}
		case <-time.After(bound + slack):
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%s still blocked %v after its context's deadline; goroutines:\n%s", what, slack, libovsdbStacks(string(buf)))
		}
	}
	read("Bridge", func(ctx context.Context) error {
		b, err := c.Bridge(ctx, br)
		if err == nil && b.Name != br {
			err = fmt.Errorf("bridge %s", b.Name)
		}
		return err
	})
	read("Interface", func(ctx context.Context) error {
		i, err := c.Interface(ctx, port)
		if err == nil && i.Name != port {
			err = fmt.Errorf("interface %s", i.Name)
		}
		return err
	})
	read("BridgeInterfaces", func(ctx context.Context) error {
		ifaces, err := c.BridgeInterfaces(ctx, br)
		if err == nil && !ifaces[port] {
			err = fmt.Errorf("interfaces %v, without %s", ifaces, port)
		}
		return err
	})
	read("PortBridge", func(ctx context.Context) error {
		b, err := c.PortBridge(ctx, port)
		if err == nil && b != br {
			err = fmt.Errorf("bridge %q", b)
		}
		return err
	})
	read("WatchPorts", func(ctx context.Context) error {
		w, err := c.WatchPorts(ctx, nil)
		if err != nil {
			return err
		}
		defer w.Stop()
		if p, ok := w.Uplink(); !ok || p.Interface != port {
			return fmt.Errorf("ports %v, want the uplink %s", w.Ports(), port)
		}
		return nil
	})
}

// waitCallsDone fails the test unless every call c started, abandoned
// ones included, finished within d.
func waitCallsDone(t *testing.T, c *ovsdb.Client, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for c.InFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d abandoned calls still running after %v", c.InFlight(), d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bridgeWithPort starts an OVS and a client, and creates a bridge with
// an internal port marked as the uplink (so a Watcher reports it).
func bridgeWithPort(t *testing.T) (env *ovsenv.Env, c *ovsdb.Client, br, port string) {
	t.Helper()
	env = ovsenv.Start(t)
	c = connect(t, env)
	ctx := ctxT(t)
	br, port = "tf"+env.ID+"b", "tf"+env.ID+"p"
	if _, err := c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: br, DatapathType: "netdev"}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddPort(ctx, br, ovsdb.PortConfig{Name: port, Type: ovsdb.PortInternal,
		ExternalIDs: map[string]string{ovsdb.KeyRole: ovsdb.RoleUplink}}); err != nil {
		t.Fatal(err)
	}
	return env, c, br, port
}

func waitDisconnected(t *testing.T, c *ovsdb.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice that ovsdb-server stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Past the first reconnection attempt: the cache is marked stale.
	time.Sleep(300 * time.Millisecond)
}

// TestConnectionLost: the errors of calls that ovsdb-server, gone,
// could not answer are ConnectionLost; an answer of the server and a
// caller's mistake are not.
func TestConnectionLost(t *testing.T) {
	env, c, br, _ := bridgeWithPort(t)
	ctx := ctxT(t)
	// Refused by the server: its schema allows ofport requests up to
	// 65279.
	if err := c.SetOFPortRequestForTest(ctx, br, 70000); err == nil || ovsdb.ConnectionLost(err) {
		t.Errorf("a transaction the server refused: err = %v, want an error that is not ConnectionLost", err)
	} else {
		t.Logf("a transaction the server refused: %v", err)
	}
	if err := c.DeletePort(ctx, "nosuchbridge", "p"); err == nil || ovsdb.ConnectionLost(err) {
		t.Errorf("a missing bridge: err = %v, want an error that is not ConnectionLost", err)
	}
	// Sent, and the server dies before it answers.
	if _, err := env.FreezeOVSDB(); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() { sent <- c.SetBridgeExternalIDs(ctx, br, map[string]string{"k": "v"}) }()
	time.Sleep(300 * time.Millisecond)
	if err := env.KillOVSDB(); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; !ovsdb.ConnectionLost(err) {
		t.Errorf("a transaction the server died under: err = %v, want ConnectionLost", err)
	} else {
		t.Logf("a transaction the server died under: %v", err)
	}
	c.Close()
	if err := c.DeleteBridge(ctx, br); !ovsdb.ConnectionLost(err) {
		t.Errorf("a call after Close: err = %v, want ConnectionLost", err)
	}
}
