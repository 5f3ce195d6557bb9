package ovsdb_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestWatcherResyncsAfterReconnect: a pod port deleted while the client
// is away from ovsdb-server (the server stopped, the port deleted from
// its database offline, the server started again: it does not know the
// client's last transaction, libovsdb refills its cache without a delete
// event) is reported removed once the client is back; the pod port that
// stayed gets no event.
func TestWatcherResyncsAfterReconnect(t *testing.T) {
	env := ovsenv.Start(t)
	c := connect(t, env)
	ctx := ctxT(t)
	br := env.AddBridge("rs")
	a := br.AddPod("a", nil, netip.MustParsePrefix("10.31.0.1/24"))
	b := br.AddPod("b", nil, netip.MustParsePrefix("10.31.0.2/24"))
	events := make(chan ovsdb.Event, 100)
	w, err := c.WatchPorts(ctx, func(ev ovsdb.Event) { events <- ev })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if pods := w.Pods(); len(pods) != 2 {
		t.Fatalf("pods %v, want a and b", pods)
	}
	uuid := strings.TrimSpace(vsctl(t, env, "get", "Port", a.HostIf, "_uuid"))
	// Drain the events of the start.
	for len(events) > 0 {
		<-events
	}

	if err := env.StopOVSDB(); err != nil {
		t.Fatal(err)
	}
	// a's port leaves the bridge (unreferenced, the Port and Interface
	// rows go with it).
	txn := fmt.Sprintf(`["Open_vSwitch",{"op":"mutate","table":"Bridge","where":[["name","==","%s"]],"mutations":[["ports","delete",["uuid","%s"]]]}]`, br.Name, uuid)
	if out, err := exec.Command("ovsdb-tool", "transact", env.DBPath(), txn).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool transact: %v: %s", err, out)
	}
	if err := env.StartOVSDB(); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for removed := false; !removed; {
		select {
		case ev := <-events:
			if ev.Port.PodName == "b" {
				t.Fatalf("pod b, which stayed: %s %+v", ev.Type, ev.Port)
			}
			removed = ev.Type == ovsdb.PortRemoved && ev.Port.PodName == "a"
		case <-timeout:
			t.Fatalf("no PortRemoved of pod a 30s after ovsdb-server came back; pods %v", w.Pods())
		}
	}
	if pods := w.Pods(); len(pods) != 1 || pods["default/b"].OFPort != b.OFPort {
		t.Fatalf("pods after the resync %v, want b only", pods)
	}
	// Still watching: b's port goes now, with the server there.
	vsctl(t, env, "del-port", br.Name, b.HostIf)
	select {
	case ev := <-events:
		if ev.Type != ovsdb.PortRemoved || ev.Port.PodName != "b" {
			t.Fatalf("after b's del-port: %s %+v", ev.Type, ev.Port)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for b's del-port")
	}
}
