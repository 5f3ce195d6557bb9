package cni_test

import (
	"crypto/rand"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/pkg/cni/hostguard"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestHostGuard proves that on a userspace-datapath bridge the host's own
// stack never receives what a pod sends: the bridge has no flows (it drops
// everything, as a deny-all policy would), the host holds an address on
// the bridge's interface with a UDP server behind it, and the pod's
// datagrams to it must not arrive, neither after the pod's own ARP nor
// sent straight to the MAC of its veth's host end. Without the guard they
// do arrive (checked too, so the test can tell). CHECK reports a missing
// guard and DEL removes it.
func TestHostGuard(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("g")
	hostIP := randomTestNetAddr(t)
	for _, args := range [][]string{
		{"addr", "add", hostIP.String() + "/32", "dev", br.Name},
		{"link", "set", br.Name, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	server, err := net.ListenUDP("udp4", &net.UDPAddr{IP: hostIP, Port: 7171})
	if err != nil {
		t.Fatalf("listen on the host address: %v", err)
	}
	defer server.Close()

	conf := netConf{bridge: br.Name, socket: env.DBSocketPath(), dataDir: t.TempDir(), ranges: dualStackRanges(), defaultRoute: "on-link"}
	podNS := netnsFixture(t, "guard")
	inv := invocation{command: "ADD", containerID: "ctr-guard", netns: podNS, ifName: "eth0", args: podArgs("pod-guard"), stdin: conf.json()}
	out := run(t, inv)
	mustSucceed(t, out, "ADD")
	hostName := cni.HostVethName(inv.containerID, inv.ifName)
	if ok, err := hostguard.Present("", hostName); err != nil || !ok {
		t.Fatalf("after ADD on a netdev bridge: guard present = %v, %v", ok, err)
	}

	// The pod resolves the address itself (on-link default route): only
	// the host's stack could answer, straight from the veth.
	if got := udpFromPod(t, podNS, server, hostIP); got != "" {
		t.Errorf("the host stack received %q from the pod after its ARP (the pod's neighbour entry: %s)", got, podNeighbour(t, podNS, hostIP))
	}
	// A pod that knows (or guesses) the MAC of its veth's host end.
	hostMAC, err := net.InterfaceByName(hostName)
	if err != nil {
		t.Fatalf("host veth: %v", err)
	}
	if out, err := inNetns(t, podNS, "ip", "neigh", "replace", hostIP.String(), "lladdr", hostMAC.HardwareAddr.String(), "dev", "eth0", "nud", "permanent"); err != nil {
		t.Fatalf("set the pod's neighbour entry: %v: %s", err, out)
	}
	if got := udpFromPod(t, podNS, server, hostIP); got != "" {
		t.Errorf("the host stack received %q sent to the host veth's MAC", got)
	}

	// CHECK notices a missing guard; without it the datagram arrives,
	// which shows the probe above can see a leak.
	if err := hostguard.Remove("", hostName); err != nil {
		t.Fatalf("remove guard: %v", err)
	}
	check := inv
	withPrev := conf
	withPrev.prevResult = out.stdout
	check.command, check.stdin = "CHECK", withPrev.json()
	checked := run(t, check)
	if checked.err == nil || !strings.Contains(checked.err.Msg, "no host guard") {
		t.Errorf("CHECK without the guard: %+v", checked.err)
	}
	if got := udpFromPod(t, podNS, server, hostIP); got == "" {
		t.Errorf("without the guard the datagram to the host veth's MAC did not arrive either: the test cannot tell a leak")
	}
	if err := hostguard.Install("", hostName); err != nil {
		t.Fatalf("reinstall guard: %v", err)
	}
	mustSucceed(t, run(t, check), "CHECK with the guard")

	inv.command = "DEL"
	mustSucceed(t, run(t, inv), "DEL")
	if ok, err := hostguard.Present("", hostName); err != nil || ok {
		t.Errorf("after DEL: guard present = %v, %v", ok, err)
	}
	mustSucceed(t, run(t, inv), "DEL again")
}

// udpFromPod sends one datagram from the pod to addr:7171 and returns what
// server received within a second ("" for nothing).
func udpFromPod(t *testing.T, podNS string, server *net.UDPConn, addr net.IP) string {
	t.Helper()
	payload := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	err := ns.WithNetNSPath(podNS, func(ns.NetNS) error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: addr, Port: 7171})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	})
	if err != nil {
		t.Fatalf("send from the pod: %v", err)
	}
	buf := make([]byte, 64)
	deadline := time.Now().Add(time.Second)
	for {
		_ = server.SetReadDeadline(deadline)
		n, _, err := server.ReadFromUDP(buf)
		if err != nil {
			return ""
		}
		if string(buf[:n]) == payload {
			return payload
		}
	}
}

func podNeighbour(t *testing.T, podNS string, addr net.IP) string {
	out, _ := inNetns(t, podNS, "ip", "neigh", "show", addr.String())
	return strings.TrimSpace(out)
}

// randomTestNetAddr picks an address of TEST-NET-2 (198.51.100.0/24), so
// concurrent test processes and the host's own addresses do not collide.
func randomTestNetAddr(t *testing.T) net.IP {
	b := make([]byte, 1)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return net.IPv4(198, 51, 100, 1+b[0]%250)
}
