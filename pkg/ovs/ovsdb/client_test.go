package ovsdb_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/test/ovsenv"
)

func connect(t *testing.T, env *ovsenv.Env) *ovsdb.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ovsdb.Connect(ctx, env.DBEndpoint(), ovsdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func vsctl(t *testing.T, env *ovsenv.Env, args ...string) string {
	t.Helper()
	out, err := env.Vsctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// veth creates a veth pair in the host namespace, removed on cleanup.
func veth(t *testing.T, a, b string) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("ip link add %s: %v: %s", a, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", a).Run() })
	for _, l := range []string{a, b} {
		if out, err := exec.Command("ip", "link", "set", l, "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s up: %v: %s", l, err, out)
		}
	}
}

// TestEnsureBridgeCreateAndAdopt: creating is idempotent, the bridge gets
// the wanted datapath type, fail_mode=secure and OpenFlow13, an existing
// bridge with other settings is adopted, and the openflow client can talk
// to the result.
func TestEnsureBridgeCreateAndAdopt(t *testing.T) {
	env := ovsenv.Start(t)
	c := connect(t, env)
	ctx := ctxT(t)
	name := "tf" + env.ID + "x"
	created, err := c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: name, DatapathType: "netdev", ExternalIDs: map[string]string{"owner": "tierflow"}})
	if err != nil || !created {
		t.Fatalf("EnsureBridge: created=%v err=%v", created, err)
	}
	created, err = c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: name, DatapathType: "netdev"})
	if err != nil || created {
		t.Fatalf("second EnsureBridge: created=%v err=%v", created, err)
	}
	if got := vsctl(t, env, "list-br"); got != name {
		t.Fatalf("bridges: %q", got)
	}
	check := func(br string) {
		t.Helper()
		if got := vsctl(t, env, "get", "Bridge", br, "datapath_type"); got != "netdev" {
			t.Errorf("%s datapath_type %s", br, got)
		}
		if got := vsctl(t, env, "get", "Bridge", br, "fail_mode"); got != "secure" {
			t.Errorf("%s fail_mode %s", br, got)
		}
		if got := vsctl(t, env, "get", "Bridge", br, "protocols"); got != `[OpenFlow13]` {
			t.Errorf("%s protocols %s", br, got)
		}
		if got := vsctl(t, env, "list-ports", br); got != "" {
			t.Errorf("%s has ports %q (the internal port is not listed)", br, got)
		}
		if got := vsctl(t, env, "get", "Interface", br, "type"); got != "internal" {
			t.Errorf("%s local interface type %s", br, got)
		}
	}
	check(name)
	if got := vsctl(t, env, "get", "Bridge", name, "external_ids:owner"); got != "tierflow" {
		t.Errorf("external_ids:owner = %s", got)
	}

	// Adopt a bridge someone else created with forwarding settings.
	other := "tf" + env.ID + "y"
	vsctl(t, env, "add-br", other, "--", "set", "Bridge", other, "datapath_type=netdev", "fail_mode=standalone", "protocols=OpenFlow10")
	created, err = c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: other, DatapathType: "netdev"})
	if err != nil || created {
		t.Fatalf("adopt: created=%v err=%v", created, err)
	}
	check(other)

	// The bridge is usable over OpenFlow 1.3.
	of, err := openflow.Dial(ctx, "unix:"+env.Dir+"/"+name+".mgmt", openflow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	if err := of.AddFlows(ctx, openflow.Flow{Table: 0, Priority: 1, Cookie: 0x77}); err != nil {
		t.Fatal(err)
	}

	if _, err := c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: "tf" + env.ID + "z", DatapathType: "dpdk"}); err == nil {
		t.Error("EnsureBridge accepted datapath type dpdk")
	}
	if _, err := c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: "tf" + env.ID + "z", Protocols: []string{"OpenFlow10"}}); err == nil {
		t.Error("EnsureBridge accepted OpenFlow10")
	}
	if err := c.DeleteBridge(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteBridge(ctx, other); err != nil {
		t.Fatalf("deleting a missing bridge: %v", err)
	}
	if got := vsctl(t, env, "list-br"); got != name {
		t.Fatalf("bridges after delete: %q", got)
	}
}

// TestPortsAndExternalIDs: internal, patch and veth-attached system ports
// get ofports; external_ids round-trip; adding again updates; deleting
// removes.
func TestPortsAndExternalIDs(t *testing.T) {
	env := ovsenv.Start(t)
	c := connect(t, env)
	ctx := ctxT(t)
	br1, br2 := "tf"+env.ID+"p1", "tf"+env.ID+"p2"
	for _, br := range []string{br1, br2} {
		if _, err := c.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: br, DatapathType: "netdev"}); err != nil {
			t.Fatal(err)
		}
	}
	hostEnd, peerEnd := "tf"+env.ID+"va", "tf"+env.ID+"vb"
	veth(t, hostEnd, peerEnd)
	ids := map[string]string{ovsdb.KeyPodNamespace: "ns1", ovsdb.KeyPodName: "web-0", ovsdb.KeyPodIPs: "10.1.0.5,fd00::5", ovsdb.KeyPodMAC: "0a:58:0a:01:00:05"}
	ports := []struct {
		bridge string
		cfg    ovsdb.PortConfig
	}{
		{br1, ovsdb.PortConfig{Name: "tf" + env.ID + "in", Type: ovsdb.PortInternal, OFPortRequest: 42}},
		{br1, ovsdb.PortConfig{Name: "tf" + env.ID + "pa", Type: ovsdb.PortPatch, Peer: "tf" + env.ID + "pb"}},
		{br2, ovsdb.PortConfig{Name: "tf" + env.ID + "pb", Type: ovsdb.PortPatch, Peer: "tf" + env.ID + "pa"}},
		{br1, ovsdb.PortConfig{Name: hostEnd, ExternalIDs: ids}},
	}
	for _, p := range ports {
		if err := c.AddPort(ctx, p.bridge, p.cfg); err != nil {
			t.Fatalf("AddPort %s: %v", p.cfg.Name, err)
		}
	}
	for _, p := range ports {
		ofport, err := c.WaitOFPort(ctx, p.cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		if p.cfg.OFPortRequest != 0 && ofport != uint32(p.cfg.OFPortRequest) {
			t.Errorf("%s: ofport %d, requested %d", p.cfg.Name, ofport, p.cfg.OFPortRequest)
		}
		if got := vsctl(t, env, "get", "Interface", p.cfg.Name, "ofport"); got != itoa(ofport) {
			t.Errorf("%s: ovs-vsctl says ofport %s, client %d", p.cfg.Name, got, ofport)
		}
	}
	if got := vsctl(t, env, "get", "Interface", "tf"+env.ID+"pa", "options:peer"); got != "tf"+env.ID+"pb" {
		t.Errorf("patch peer: %s", got)
	}
	if got := vsctl(t, env, "get", "Interface", hostEnd, `external_ids:"tierflow.io/pod-ips"`); got != `"10.1.0.5,fd00::5"` {
		t.Errorf("pod-ips via ovs-vsctl: %s", got)
	}
	// external_ids written by ovs-vsctl are read back by the client...
	vsctl(t, env, "set", "Interface", hostEnd, `external_ids:"extra"="x y"`)
	waitFor(t, func() bool {
		iface, err := c.Interface(ctx, hostEnd)
		return err == nil && iface.ExternalIDs["extra"] == "x y" && iface.ExternalIDs[ovsdb.KeyPodName] == "web-0"
	}, "client cache to see ovs-vsctl's external_ids")
	// One key is set (and set again) without touching the others.
	for _, v := range []string{"pending: why", ovsdb.AdmissionAdmitted} {
		if err := c.SetInterfaceExternalID(ctx, hostEnd, ovsdb.KeyAdmission, v); err != nil {
			t.Fatal(err)
		}
		if got := vsctl(t, env, "get", "Interface", hostEnd, `external_ids:"tierflow.io/admission"`); got != `"`+v+`"` && got != v {
			t.Errorf("admission after setting %q: %s", v, got)
		}
	}
	if got := vsctl(t, env, "get", "Interface", hostEnd, `external_ids:"extra"`); got != `"x y"` {
		t.Errorf("extra after SetInterfaceExternalID: %s", got)
	}
	// ...and replaced by SetInterfaceExternalIDs.
	if err := c.SetInterfaceExternalIDs(ctx, hostEnd, map[string]string{ovsdb.KeyRole: ovsdb.RoleUplink}); err != nil {
		t.Fatal(err)
	}
	if got := vsctl(t, env, "get", "Interface", hostEnd, "external_ids"); got != `{"tierflow.io/role"=uplink}` {
		t.Errorf("external_ids after replace: %s", got)
	}
	// Adding an existing port updates it.
	if err := c.AddPort(ctx, br1, ovsdb.PortConfig{Name: hostEnd, ExternalIDs: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if got := vsctl(t, env, "get", "Interface", hostEnd, "external_ids"); got != `{k=v}` {
		t.Errorf("external_ids after re-add: %s", got)
	}
	if n := strings.Count(vsctl(t, env, "list-ports", br1), "\n") + 1; n != 3 {
		t.Errorf("%s has %d ports, want 3", br1, n)
	}
	if err := c.DeletePort(ctx, br1, hostEnd); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePort(ctx, br1, hostEnd); err != nil {
		t.Fatalf("deleting a missing port: %v", err)
	}
	if out, err := env.Vsctl("get", "Interface", hostEnd, "ofport"); err == nil {
		t.Errorf("interface %s still exists: %s", hostEnd, out)
	}
	if err := c.AddPort(ctx, br1, ovsdb.PortConfig{Name: "x", Type: ovsdb.PortPatch}); err == nil {
		t.Error("patch port without peer accepted")
	}
	if err := c.AddPort(ctx, "nosuchbridge", ovsdb.PortConfig{Name: "x"}); err == nil {
		t.Error("port on a missing bridge accepted")
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWatcherMapsPodsToOFPorts: the watcher reports pods attached by the
// CNI contract (here by ovsenv, through ovs-vsctl), ofport assignment,
// address changes, invalid keys (dropped, fail closed), the uplink, and
// removals.
func TestWatcherMapsPodsToOFPorts(t *testing.T) {
	env := ovsenv.Start(t)
	c := connect(t, env)
	ctx := ctxT(t)
	br := env.AddBridge("w")
	// A pod attached before the watcher starts is reported as added.
	a := br.AddPod("a", nil, netip.MustParsePrefix("10.30.0.1/24"), netip.MustParsePrefix("fd00:30::1/64"))

	events := make(chan ovsdb.Event, 100)
	w, err := c.WatchPorts(ctx, func(ev ovsdb.Event) { events <- ev })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func(what string, ok func(ovsdb.Event) bool) ovsdb.Event {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if ok(ev) {
					return ev
				}
				t.Logf("skipping event %s %+v", ev.Type, ev.Port)
			case <-timeout:
				t.Fatalf("no event: %s", what)
			}
		}
	}
	// The cache may see the interface before its ofport: wait for both.
	ev := next("pod a with ofport", func(ev ovsdb.Event) bool {
		return ev.Type != ovsdb.PortRemoved && ev.Port.PodName == "a" && ev.Port.OFPort != 0
	})
	if ev.Port.OFPort != a.OFPort || ev.Port.PodNamespace != "default" || ev.Port.MAC.String() != a.MAC.String() ||
		len(ev.Port.IPs) != 2 || ev.Port.IPs[0] != netip.MustParseAddr("10.30.0.1") || ev.Port.IPs[1] != netip.MustParseAddr("fd00:30::1") {
		t.Fatalf("pod a: %+v (ofport %d, mac %s)", ev.Port, a.OFPort, a.MAC)
	}

	// A new pod port through the client: added, then its ofport assigned.
	hostEnd, peerEnd := "tf"+env.ID+"wa", "tf"+env.ID+"wb"
	veth(t, hostEnd, peerEnd)
	ids := map[string]string{ovsdb.KeyPodNamespace: "ns2", ovsdb.KeyPodName: "b", ovsdb.KeyPodIPs: "10.30.0.2", ovsdb.KeyPodMAC: "0a:00:00:00:30:02"}
	if err := c.AddPort(ctx, br.Name, ovsdb.PortConfig{Name: hostEnd, ExternalIDs: ids}); err != nil {
		t.Fatal(err)
	}
	ev = next("pod b ofport", func(ev ovsdb.Event) bool { return ev.Port.PodName == "b" && ev.OFPortAssigned() })
	ofport, err := c.WaitOFPort(ctx, hostEnd)
	if err != nil || ev.Port.OFPort != ofport {
		t.Fatalf("pod b ofport: event %d, interface %d (%v)", ev.Port.OFPort, ofport, err)
	}
	if p, ok := w.Pod("ns2", "b"); !ok || p.OFPort != ofport || p.Interface != hostEnd {
		t.Fatalf("Pod(ns2, b) = %+v, %v", p, ok)
	}
	if got := len(w.Pods()); got != 2 {
		t.Fatalf("Pods: %+v", w.Pods())
	}

	// Address change.
	ids[ovsdb.KeyPodIPs] = "10.30.0.22"
	if err := c.SetInterfaceExternalIDs(ctx, hostEnd, ids); err != nil {
		t.Fatal(err)
	}
	ev = next("pod b updated", func(ev ovsdb.Event) bool { return ev.Type == ovsdb.PortUpdated && ev.Port.PodName == "b" })
	if ev.Old.IPs[0] != netip.MustParseAddr("10.30.0.2") || ev.Port.IPs[0] != netip.MustParseAddr("10.30.0.22") {
		t.Fatalf("address change: %+v -> %+v", ev.Old.IPs, ev.Port.IPs)
	}

	// Invalid keys: the pod disappears and is listed as invalid.
	ids[ovsdb.KeyPodIPs] = "10.30.0.300"
	if err := c.SetInterfaceExternalIDs(ctx, hostEnd, ids); err != nil {
		t.Fatal(err)
	}
	next("pod b removed for bad IP", func(ev ovsdb.Event) bool { return ev.Type == ovsdb.PortRemoved && ev.Port.PodName == "b" })
	if _, ok := w.Pod("ns2", "b"); ok {
		t.Fatal("pod with an invalid IP is still mapped")
	}
	if err := w.Invalid()[hostEnd]; err == nil || !strings.Contains(err.Error(), "10.30.0.300") {
		t.Fatalf("Invalid() = %v", w.Invalid())
	}

	// The uplink.
	if err := c.SetInterfaceExternalIDs(ctx, hostEnd, map[string]string{ovsdb.KeyRole: ovsdb.RoleUplink}); err != nil {
		t.Fatal(err)
	}
	next("uplink added", func(ev ovsdb.Event) bool { return ev.Type == ovsdb.PortAdded && ev.Port.IsUplink() })
	if up, ok := w.Uplink(); !ok || up.Interface != hostEnd || up.OFPort != ofport {
		t.Fatalf("Uplink() = %+v, %v", up, ok)
	}
	if len(w.Invalid()) != 0 {
		t.Fatalf("Invalid() after fix: %v", w.Invalid())
	}

	// Removal of a port.
	if err := c.DeletePort(ctx, br.Name, a.HostIf); err != nil {
		t.Fatal(err)
	}
	next("pod a removed", func(ev ovsdb.Event) bool { return ev.Type == ovsdb.PortRemoved && ev.Port.PodName == "a" })
	if len(w.Pods()) != 0 {
		t.Fatalf("Pods after removals: %+v", w.Pods())
	}
}

// TestBridgeInterfaces: each bridge's own interfaces, read from the cache
// (which follows the database as ovs-vsctl changes it); an unknown bridge
// is ErrNotFound.
func TestBridgeInterfaces(t *testing.T) {
	env := ovsenv.Start(t)
	c := connect(t, env)
	ctx := ctxT(t)
	b1, b2 := env.AddBridge("i1"), env.AddBridge("i2")
	p1, p2, p3 := "tf"+env.ID+"p1", "tf"+env.ID+"p2", "tf"+env.ID+"p3"
	vsctl(t, env, "add-port", b1.Name, p1, "--", "set", "Interface", p1, "type=patch", "options:peer="+p3,
		"--", "add-port", b1.Name, p2, "--", "set", "Interface", p2, "type=patch", "options:peer="+p3,
		"--", "add-port", b2.Name, p3, "--", "set", "Interface", p3, "type=patch", "options:peer="+p1)
	want := map[string]map[string]bool{
		// Every bridge has its own internal interface, named after it.
		b1.Name: {b1.Name: true, p1: true, p2: true},
		b2.Name: {b2.Name: true, p3: true},
	}
	await := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for br, w := range want {
			for {
				got, err := c.BridgeInterfaces(ctx, br)
				if err == nil && maps.Equal(got, w) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("BridgeInterfaces(%s) = %v, %v; want %v", br, got, err, w)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	await()
	// The answers are kept while the tables are unchanged; a port that
	// comes, one that goes and one that moves to the other bridge are
	// seen all the same.
	p4 := "tf" + env.ID + "p4"
	vsctl(t, env, "add-port", b1.Name, p4, "--", "set", "Interface", p4, "type=patch", "options:peer="+p3,
		"--", "del-port", b1.Name, p2, "--", "del-port", b1.Name, p1, "--", "add-port", b2.Name, p1, "--", "set", "Interface", p1, "type=patch", "options:peer="+p3)
	want[b1.Name] = map[string]bool{b1.Name: true, p4: true}
	want[b2.Name] = map[string]bool{b2.Name: true, p3: true, p1: true}
	await()
	if _, err := c.BridgeInterfaces(ctx, "tf"+env.ID+"none"); !errors.Is(err, ovsdb.ErrNotFound) {
		t.Fatalf("unknown bridge: %v, want ErrNotFound", err)
	}
}

// BenchmarkBridgeInterfaces: what an agent with 333 pods (the end-to-end
// bench's nodes) pays at a realization to know its bridge's ports:
// "scan" after a change of the tables (every row read), "unchanged" when
// nothing changed since the last call (the kept answer).
func BenchmarkBridgeInterfaces(b *testing.B) {
	env := ovsenv.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ovsdb.Connect(ctx, env.DBEndpoint(), ovsdb.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := env.AddBridge("bi")
	const ports = 333
	var args []string
	for i := 0; i < ports; i++ {
		p := fmt.Sprintf("tf%sb%d", env.ID, i)
		args = append(args, "--", "add-port", br.Name, p, "--", "set", "Interface", p, "type=patch", "options:peer=none",
			`external_ids:"tierflow.io/pod"=ns/pod`+strconv.Itoa(i))
	}
	if out, err := env.Vsctl(args[1:]...); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.BridgeInterfaces(ctx, br.Name)
		if err == nil && len(got) == ports+1 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d interfaces, %v", len(got), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() { // as long as it takes: no deadline
			if _, err := c.BridgeInterfaces(context.Background(), br.Name); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, err := ovsdb.ScanBridgeInterfaces(c, context.Background(), br.Name); err != nil {
				b.Fatal(err)
			}
		}
	})
}
