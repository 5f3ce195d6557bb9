package ovsenv

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPodsTalkThroughFlows: pods reach each other (TCP and UDP, IPv4 and
// IPv6) only when the bridge has flows that forward; a drop flow blocks a
// long-lived connection; dump-flows and trace see the flows.
func TestPodsTalkThroughFlows(t *testing.T) {
	env := Start(t)
	br := env.AddBridge("br")
	a := br.AddPod("a", mustMAC(t, "0a:00:00:00:00:01"), netip.MustParsePrefix("10.9.0.1/24"), netip.MustParsePrefix("fd00:9::1/64"))
	b := br.AddPod("b", mustMAC(t, "0a:00:00:00:00:02"), netip.MustParsePrefix("10.9.0.2/24"), netip.MustParsePrefix("fd00:9::2/64"))
	if a.OFPort == 0 || b.OFPort == 0 || a.OFPort == b.OFPort {
		t.Fatalf("ofports: a=%d b=%d", a.OFPort, b.OFPort)
	}
	b.ListenTCP(8080)
	b.ListenUDP(5353)
	tcp4 := netip.AddrPortFrom(b.IPv4(), 8080)
	tcp6 := netip.AddrPortFrom(b.IPv6(), 8080)
	udp4 := netip.AddrPortFrom(b.IPv4(), 5353)

	// fail_mode=secure and no flows: nothing passes.
	if err := a.ProbeTCP(tcp4, 500*time.Millisecond); !errors.Is(err, ErrNoReply) {
		t.Fatalf("probe without flows: got %v, want ErrNoReply", err)
	}
	if _, err := br.Ofctl("add-flow", "table=0,priority=10,actions=NORMAL"); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.AddrPort{tcp4, tcp6} {
		if err := a.ProbeTCP(dst, 3*time.Second); err != nil {
			t.Fatalf("tcp %s with NORMAL flow: %v", dst, err)
		}
	}
	if err := a.ProbeUDP(udp4, 3*time.Second); err != nil {
		t.Fatalf("udp with NORMAL flow: %v", err)
	}
	if err := a.ProbeUDP(netip.AddrPortFrom(b.IPv6(), 5353), 3*time.Second); err != nil {
		t.Fatalf("udp6 with NORMAL flow: %v", err)
	}

	conn, err := a.DialTCP(tcp4, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exchange("first", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	flows, err := br.DumpFlows(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 || flows[0] != "cookie=0x0, table=0, priority=10 actions=NORMAL" {
		t.Fatalf("dump-flows: %q", flows)
	}
	stats, err := br.DumpFlowsWithStats(0)
	if err != nil || len(stats) != 1 || strings.Contains(stats[0], "n_packets=0,") {
		t.Fatalf("dump-flows with stats: %q %v", stats, err)
	}

	// A higher-priority drop for a→b TCP cuts the open connection.
	drop := "table=0,priority=20,tcp,nw_src=10.9.0.1,nw_dst=10.9.0.2,actions=drop"
	if _, err := br.Ofctl("add-flow", drop); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exchange("second", 500*time.Millisecond); !errors.Is(err, ErrNoReply) {
		t.Fatalf("exchange after drop flow: got %v, want ErrNoReply", err)
	}
	tr, err := br.Trace("in_port=" + strconv.Itoa(int(a.OFPort)) + ",tcp,nw_src=10.9.0.1,nw_dst=10.9.0.2,tp_dst=8080")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr, "Datapath actions: drop") {
		t.Fatalf("trace does not end in drop:\n%s", tr)
	}
	// UDP is still forwarded.
	if err := a.ProbeUDP(udp4, 3*time.Second); err != nil {
		t.Fatalf("udp after tcp drop flow: %v", err)
	}
	out, err := a.Exec("ip", "-4", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "10.9.0.1/24") {
		t.Fatalf("exec in pod: %q %v", out, err)
	}
	ids, err := env.Vsctl("get", "Interface", a.HostIf, "external_ids")
	if err != nil || !strings.Contains(ids, `"tierflow.io/pod-ips"="10.9.0.1,fd00:9::1"`) {
		t.Fatalf("external_ids: %q %v", ids, err)
	}
}

// TestRestartAndCleanup: ovs-vswitchd restarts keep the bridge (its
// management socket comes back), and cleanup leaves no process, namespace,
// interface or directory behind.
func TestRestartAndCleanup(t *testing.T) {
	var env *Env
	var br *Bridge
	var pod *Pod
	t.Run("env", func(t *testing.T) {
		env = Start(t)
		br = env.AddBridge("br")
		pod = br.AddPod("p", nil, netip.MustParsePrefix("10.9.1.1/24"))
		if _, err := br.Ofctl("add-flow", "priority=1,actions=drop"); err != nil {
			t.Fatal(err)
		}
		if err := env.RestartVswitchd(); err != nil {
			t.Fatal(err)
		}
		if err := waitForSocket(br.MgmtSocketPath(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		flows, err := br.DumpFlows(-1)
		if err != nil {
			t.Fatal(err)
		}
		if len(flows) != 0 {
			t.Fatalf("flows survived an ovs-vswitchd restart: %q", flows)
		}
		if port, err := br.OFPort(pod.HostIf); err != nil || port == 0 {
			t.Fatalf("pod port after restart: %d %v", port, err)
		}
	})
	if env == nil || pod == nil {
		t.Fatal("setup failed")
	}
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("run directory %s still exists", env.Dir)
	}
	if _, err := os.Stat(pod.NetnsPath); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists", pod.Netns)
	}
	for _, link := range []string{br.Name, pod.HostIf} {
		if exec.Command("ip", "link", "show", link).Run() == nil {
			t.Errorf("interface %s still exists", link)
		}
	}
	out, _ := exec.Command("pgrep", "-f", env.Dir).Output()
	if len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("processes still running for %s: %s", env.Dir, out)
	}
}

// TestOwnNetns: two Envs in namespaces of their own run at once without
// the host lock; each one's ovs-netdev tap and internal ports live in its
// namespace, and its pods talk through its bridge.
func TestOwnNetns(t *testing.T) {
	e1 := Start(t, WithOwnNetns())
	e2 := Start(t, WithOwnNetns())
	for _, e := range []*Env{e1, e2} {
		br := e.AddBridge("br")
		if _, err := e.Vsctl("add-port", br.Name, "tf"+e.ID+"gw", "--", "set", "Interface", "tf"+e.ID+"gw", "type=internal"); err != nil {
			t.Fatal(err)
		}
		if _, err := br.OFPort("tf" + e.ID + "gw"); err != nil {
			t.Fatal(err)
		}
		for _, link := range []string{"ovs-netdev", br.Name, "tf" + e.ID + "gw"} {
			if out, err := exec.Command("ip", "-n", e.Netns(), "link", "show", link).CombinedOutput(); err != nil {
				t.Fatalf("%s not in %s: %v: %s", link, e.Netns(), err, out)
			}
			if link != "ovs-netdev" && exec.Command("ip", "link", "show", link).Run() == nil {
				t.Fatalf("%s is in the test's namespace", link)
			}
		}
		a := br.AddPod("a", nil, netip.MustParsePrefix("10.9.0.1/24"))
		b := br.AddPod("b", nil, netip.MustParsePrefix("10.9.0.2/24"))
		if exec.Command("ip", "link", "show", a.HostIf).Run() == nil {
			t.Fatalf("pod veth %s is in the test's namespace", a.HostIf)
		}
		b.ListenTCP(8080)
		if _, err := br.Ofctl("add-flow", "priority=10,actions=NORMAL"); err != nil {
			t.Fatal(err)
		}
		if err := a.ProbeTCP(netip.MustParseAddrPort("10.9.0.2:8080"), 3*time.Second); err != nil {
			t.Fatalf("env %s: %v", e.ID, err)
		}
	}
}
