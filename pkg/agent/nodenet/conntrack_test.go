package nodenet

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestMoveAddressesKeepsMasqueradedConnections moves a node's addresses
// from its interface onto a bridge, as the underlay does, while the node
// holds connections through a Service address that its kube-proxy (here
// its rules: DNAT, then MASQUERADE --random-fully) translated: they go on
// after the move (without keepMasqueraded the kernel drops their entries
// as the address leaves the interface, and the server resets them). Real
// network namespaces, veths, iptables and conntrack; a Linux bridge stands
// in for OVS's underlay bridge (what matters is the kernel's address
// move).
func TestMoveAddressesKeepsMasqueradedConnections(t *testing.T) {
	for _, tool := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (this test needs root, iproute2 and iptables)", tool, err)
		}
	}
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	node, server := "tfct-node-"+id, "tfct-srv-"+id
	nic, peer, bridge := "tfct"+id, "tfcp"+id, "tfcb"+id
	for _, ns := range []string{node, server} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "link", "add", nic, "netns", node, "type", "veth", "peer", "name", peer, "netns", server)
	in := func(ns string, args ...string) { run(t, append([]string{"ip", "netns", "exec", ns}, args...)...) }
	for _, c := range []struct{ ns, link, v4, v6 string }{
		{node, nic, "10.123.0.1/24", "fd12:3::1/64"},
		{server, peer, "10.123.0.2/24", "fd12:3::2/64"},
	} {
		in(c.ns, "ip", "link", "set", "lo", "up")
		in(c.ns, "ip", "addr", "add", c.v4, "dev", c.link)
		in(c.ns, "ip", "addr", "add", c.v6, "dev", c.link, "nodad")
		in(c.ns, "ip", "link", "set", c.link, "up")
	}

	type conn struct {
		name string
		c    net.Conn
	}
	var conns []conn
	for _, fam := range []struct {
		name, iptables, service, backend string
	}{
		{"IPv4", "iptables", "10.96.123.1", "10.123.0.2"},
		{"IPv6", "ip6tables", "fd96::1", "fd12:3::2"},
	} {
		ln := listenIn(t, server, net.JoinHostPort(fam.backend, "0"))
		go echo(ln)
		port := ln.Addr().(*net.TCPAddr).Port
		in(node, fam.iptables, "-t", "nat", "-A", "OUTPUT", "-d", fam.service, "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", net.JoinHostPort(fam.backend, fmt.Sprint(port)))
		in(node, fam.iptables, "-t", "nat", "-A", "POSTROUTING", "-d", fam.backend, "-p", "tcp",
			"-j", "MASQUERADE", "--random-fully")
		in(node, "ip", "route", "add", fam.service, "via", fam.backend)
		c := dialIn(t, node, net.JoinHostPort(fam.service, "443"))
		t.Cleanup(func() { c.Close() })
		conns = append(conns, conn{fam.name, c})
	}
	roundTrip := func(when string) {
		t.Helper()
		for _, c := range conns {
			if err := ping(c.c); err != nil {
				t.Fatalf("%s connection through the Service address %s: %v", c.name, when, err)
			}
		}
	}
	roundTrip("before the move")

	// The underlay's move: the bridge takes the interface's MAC address,
	// addresses and routes; the interface becomes its port.
	in(node, "ip", "link", "add", bridge, "type", "bridge")
	mac, err := exec.Command("ip", "netns", "exec", node, "cat", "/sys/class/net/"+nic+"/address").Output()
	if err != nil {
		t.Fatal(err)
	}
	in(node, "ip", "link", "set", bridge, "address", strings.TrimSpace(string(mac)))
	h, err := openHost("/run/netns/" + node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	var logged strings.Builder
	h.log = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, &logged), nil))
	rec := &underlayRecord{Interface: nic, Addresses: []string{"10.123.0.1/24", "fd12:3::1/64"},
		Routes: []underlayRoute{{Dst: "10.96.123.1/32", Via: "10.123.0.2"}, {Dst: "fd96::1/128", Via: "fd12:3::2"}}}
	if err := h.moveAddresses(bridge, nic, rec); err != nil {
		t.Fatal(err)
	}
	in(node, "ip", "link", "set", nic, "master", bridge)
	roundTrip("after the move onto the bridge")
	if !strings.Contains(logged.String(), "connections=2") {
		t.Errorf("the move did not say it kept both connections:\n%s", logged.String())
	}
	logged.Reset()

	// And back, as a stopping agent moves them.
	in(node, "ip", "link", "set", nic, "nomaster")
	if err := h.moveAddresses(nic, bridge, rec); err != nil {
		t.Fatal(err)
	}
	roundTrip("after the move back")
	if !strings.Contains(logged.String(), "connections=2") {
		t.Errorf("the move back did not say it kept both connections:\n%s", logged.String())
	}
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNamedNS runs fn on a thread in the network namespace named ns.
func inNamedNS(t *testing.T, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread must not run anything else in ns
		}
	}()
	fn()
}

// listenIn and dialIn make sockets in ns: a socket stays in the namespace
// it was made in.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	inNamedNS(t, ns, func() { ln, err = net.Listen("tcp", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func dialIn(t *testing.T, ns, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	inNamedNS(t, ns, func() { c, err = net.DialTimeout("tcp", addr, 5*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { _, _ = io.Copy(c, c); c.Close() }()
	}
}

func ping(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("echo %q", buf)
	}
	return nil
}

type testWriter struct{ t *testing.T }

// Write logs p, and fails the test on a warning (a connection not kept).
func (w testWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
		w.t.Error(line)
	} else {
		w.t.Log(line)
	}
	return len(p), nil
}
