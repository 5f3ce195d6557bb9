package agnhost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

var netnsCount int

// blackholeNetns is a namespace whose only route leads into a veth whose
// peer (in the same namespace) has no address: connections to 10.123.0.2
// get no answer at all.
func blackholeNetns(t *testing.T) string {
	t.Helper()
	netnsCount++
	name := fmt.Sprintf("tfagn-%d-%d", os.Getpid(), netnsCount)
	for _, args := range [][]string{
		{"netns", "add", name},
		{"-n", name, "link", "add", "a0", "type", "veth", "peer", "name", "b0"},
		{"-n", name, "addr", "add", "10.123.0.1/24", "dev", "a0"},
		{"-n", name, "link", "set", "a0", "up"},
		{"-n", name, "link", "set", "b0", "up"},
		{"-n", name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return "/var/run/netns/" + name
}

func inNetns(t *testing.T, path string, f func()) {
	t.Helper()
	if err := ns.WithNetNSPath(path, func(ns.NetNS) error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestConnectOutcomes(t *testing.T) {
	netns := blackholeNetns(t)
	logger := log.New(io.Discard, "", 0)
	var servers *Servers
	inNetns(t, netns, func() {
		var err error
		servers, err = Start([]Endpoint{
			{Kind: KindRawTCP, Port: 8080, Body: "pod-a"},
			{Kind: KindUDP, Port: 8081, Body: "pod-a"},
		}, "pod-a", logger)
		if err != nil {
			t.Error(err)
		}
	})
	if servers == nil {
		t.FailNow()
	}
	defer servers.Close()

	cases := []struct {
		name, dest, proto string
		timeout           time.Duration
		wantCode          int
		wantStderr        string // prefix
	}{
		{"tcp success", "127.0.0.1:8080", "tcp", time.Second, 0, ""},
		{"tcp success ipv6", "[::1]:8080", "tcp", time.Second, 0, ""},
		{"tcp refused", "127.0.0.1:9", "tcp", time.Second, 1, "REFUSED\n"},
		{"tcp timeout", "10.123.0.2:80", "tcp", 500 * time.Millisecond, 1, "TIMEOUT\n"},
		{"tcp no port", "10.123.0.2", "tcp", time.Second, 1, "UNKNOWN: address 10.123.0.2: missing port in address\n"},
		{"udp success", "127.0.0.1:8081", "udp", time.Second, 0, ""},
		{"udp refused", "127.0.0.1:9", "udp", time.Second, 1, "REFUSED: read udp "},
		{"udp timeout", "10.123.0.2:80", "udp", 500 * time.Millisecond, 1, "TIMEOUT: read udp "},
		{"unsupported protocol", "127.0.0.1:8080", "icmp", time.Second, 1, "Unsupported protocol\nicmp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			var code int
			start := time.Now()
			inNetns(t, netns, func() { code = Connect(c.dest, c.proto, c.timeout, "hostname", &stderr) })
			if code != c.wantCode || !strings.HasPrefix(stderr.String(), c.wantStderr) || (c.wantStderr == "" && stderr.Len() > 0) {
				t.Errorf("exit %d, stderr %q; want exit %d, stderr starting %q", code, stderr.String(), c.wantCode, c.wantStderr)
			}
			if strings.HasPrefix(c.wantStderr, "TIMEOUT") && time.Since(start) < c.timeout {
				t.Errorf("timed out after %v, before %v", time.Since(start), c.timeout)
			}
		})
	}
}

func TestMainCommandLine(t *testing.T) {
	netns := blackholeNetns(t)
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		var code int
		inNetns(t, netns, func() { code = Main(context.Background(), args, "pod-a", &stdout, &stderr) })
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := run("connect", "10.123.0.2:80", "--timeout=300ms", "--protocol=tcp"); code != 1 || out != "" || errOut != "TIMEOUT\n" {
		t.Errorf("connect timeout: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run("connect", "10.123.0.2:80", "--timeout", "300ms"); code != 1 || errOut != "TIMEOUT\n" {
		t.Errorf("connect with separate flag value: %d %q", code, errOut)
	}
	if code, _, errOut := run("connect"); code != 1 || !strings.Contains(errOut, "accepts 1 arg") {
		t.Errorf("connect without destination: %d %q", code, errOut)
	}
	if code, _, errOut := run("no-such-command"); code != 1 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("unknown subcommand: %d %q", code, errOut)
	}
}

func TestIsAgnhost(t *testing.T) {
	for _, c := range []struct {
		image         string
		command, args []string
		want          string
		ok            bool
	}{
		{"agnhost:2.53", []string{"/agnhost", "serve-hostname"}, []string{"--tcp", "--http=false"}, "serve-hostname --tcp --http=false", true},
		{"agnhost:2.53", nil, []string{"porter"}, "porter", true},
		{"agnhost:2.53", nil, nil, "", true},
		{"agnhost:2.45", []string{"/bin/bash", "-c", "/agnhost serve-hostname --tcp --http=false --port 80"}, nil, "serve-hostname --tcp --http=false --port 80", true},
		{"agnhost:2.45", []string{"sh", "-c", "echo hi; exec /agnhost porter"}, nil, "porter", true},
		{"busybox", []string{"sh", "-c", "sleep 3600"}, nil, "", false},
		{"nginx", nil, nil, "", false},
	} {
		argv, ok := IsAgnhost(c.image, c.command, c.args)
		if ok != c.ok || strings.Join(argv, " ") != c.want {
			t.Errorf("IsAgnhost(%q, %q, %q) = %q, %v; want %q, %v", c.image, c.command, c.args, argv, ok, c.want, c.ok)
		}
	}
}

func TestServersAnswer(t *testing.T) {
	logger := log.New(io.Discard, "", 0)
	eps, warnings, err := Plan([]string{"porter", "--json-response=false"}, map[string]string{
		"SERVE_PORT_18080": "foo", "SERVE_UDP_PORT_18081": "bar", "SERVE_TLS_PORT_18443": "baz", "SERVE_SCTP_PORT_9003": "x", "HOME": "/"}, "h")
	if err != nil || len(eps) != 3 || len(warnings) != 1 || !strings.Contains(warnings[0], "SERVE_SCTP_PORT_9003") {
		t.Fatalf("porter plan: %v %v %v", eps, warnings, err)
	}
	more, _, err := Plan([]string{"serve-hostname", "--tcp", "--http=false", "--port", "18082"}, nil, "pod-x")
	if err != nil || len(more) != 1 || more[0].Kind != KindRawTCP || more[0].Body != "pod-x" {
		t.Fatalf("serve-hostname plan: %v %v", more, err)
	}
	netexec, _, err := Plan([]string{"netexec", "--http-port=18090", "--udp-port=18091", "--delay-shutdown=5"}, nil, "pod-x")
	if err != nil || len(netexec) != 2 {
		t.Fatalf("netexec plan: %v %v", netexec, err)
	}
	if _, _, err := Plan([]string{"serve-hostname", "--tcp"}, nil, "h"); err == nil {
		t.Error("serve-hostname --tcp with --http (default true) must be refused, as agnhost does")
	}
	if _, _, err := Plan([]string{"porter"}, map[string]string{"SERVE_PORT_x": "v"}, "h"); err == nil {
		t.Error("porter with a non-numeric port must fail")
	}
	eps = append(append(eps, more...), netexec...)
	netns := blackholeNetns(t)
	var s *Servers
	inNetns(t, netns, func() { s, err = Start(eps, "pod-x", logger) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Binding the same port again fails and names the endpoint.
	inNetns(t, netns, func() { _, err = Start(more, "pod-x", logger) })
	if err == nil || !strings.Contains(err.Error(), "tcp/18082") {
		t.Errorf("second bind of 18082: %v", err)
	}

	inNetns(t, netns, func() {
		expect := func(what, got, want string) {
			if got != want {
				t.Errorf("%s: got %q, want %q", what, got, want)
			}
		}
		expect("porter http", httpBody(t, "http", "127.0.0.1:18080", "/"), "foo")
		expect("porter tls", httpBody(t, "https", "127.0.0.1:18443", "/"), "baz")
		expect("porter udp", udpAsk(t, "[::1]:18081", "x"), "bar")
		expect("serve-hostname tcp", rawRead(t, "[::1]:18082"), "pod-x")
		expect("netexec /hostname", httpBody(t, "http", "127.0.0.1:18090", "/hostname"), "pod-x")
		expect("netexec /echo", httpBody(t, "http", "127.0.0.1:18090", "/echo?msg=hi"), "hi")
		expect("netexec udp hostname", udpAsk(t, "127.0.0.1:18091", "hostname"), "pod-x")
		expect("netexec udp echo", udpAsk(t, "127.0.0.1:18091", "echo yo"), "yo")
	})
}

// TestServersListenIPs: with listen addresses (a hostNetwork pod of the
// test bed binds only its node's), a server answers on them and the same
// port stays free on every other address of the namespace.
func TestServersListenIPs(t *testing.T) {
	logger := log.New(io.Discard, "", 0)
	netns := blackholeNetns(t)
	eps := []Endpoint{{Kind: KindRawTCP, Port: 18100, Body: "node-a"}}
	var a, b *Servers
	var errA, errB error
	inNetns(t, netns, func() {
		a, errA = Start(eps, "a", logger, "127.0.0.1")
		b, errB = Start([]Endpoint{{Kind: KindRawTCP, Port: 18100, Body: "node-b"}}, "b", logger, "127.0.0.2")
	})
	if errA != nil || errB != nil {
		t.Fatalf("bind 18100 on two addresses: %v, %v", errA, errB)
	}
	defer a.Close()
	defer b.Close()
	inNetns(t, netns, func() {
		if got := rawRead(t, "127.0.0.1:18100"); got != "node-a" {
			t.Errorf("127.0.0.1:18100 answered %q, want node-a", got)
		}
		if got := rawRead(t, "127.0.0.2:18100"); got != "node-b" {
			t.Errorf("127.0.0.2:18100 answered %q, want node-b", got)
		}
	})
}
