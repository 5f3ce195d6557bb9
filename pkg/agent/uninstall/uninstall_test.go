package uninstall

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/cni/hostguard"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/config/cniinstall"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestRun leaves a node as tierflow does when its DaemonSet is deleted —
// a userspace-datapath OVS (in a namespace of its own) with the bridge
// and the gateway, stopped the way the DaemonSet's ovs container stops
// (`ovs-appctl exit`, no --cleanup); routes of protocol 0x54; the
// masquerade chain in both families; the pods' host guard table; the CNI
// files; a state directory — next to things that are not tierflow's, and
// checks that Run removes exactly tierflow's, refuses while OVS runs, and
// is idempotent.
func TestRun(t *testing.T) {
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	ns, nsPath := env.Netns(), env.NetnsPath()
	br := env.AddBridge("u")
	gw := "tfu" + env.ID + "gw"
	if _, err := env.Vsctl("add-port", br.Name, gw, "--", "set", "Interface", gw, "type=internal"); err != nil {
		t.Fatal(err)
	}
	ipns := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	waitLink(t, ns, gw)
	ipns("ip", "addr", "add", "10.99.1.1/24", "dev", gw)
	ipns("ip", "link", "set", gw, "up")
	ipns("ip", "route", "add", "10.99.2.0/24", "via", "10.99.1.2", "proto", "0x54")
	// Not tierflow's: a veth with a static route, a nat chain of its own.
	ipns("ip", "link", "add", "other-a", "type", "veth", "peer", "name", "other-b")
	ipns("ip", "addr", "add", "10.98.0.1/24", "dev", "other-a")
	ipns("ip", "link", "set", "other-a", "up")
	ipns("ip", "route", "add", "10.98.5.0/24", "via", "10.98.0.2", "proto", "static")
	for _, ipt := range []string{"iptables", "ip6tables"} {
		ipns(ipt, "-t", "nat", "-N", nodenet.MasqueradeChain)
		ipns(ipt, "-t", "nat", "-A", nodenet.MasqueradeChain, "-j", "MASQUERADE")
		ipns(ipt, "-t", "nat", "-I", "POSTROUTING", "1", "-j", nodenet.MasqueradeChain)
		ipns(ipt, "-t", "nat", "-N", "OTHER-POSTROUTING")
		ipns(ipt, "-t", "nat", "-A", "POSTROUTING", "-j", "OTHER-POSTROUTING")
	}
	if err := hostguard.Install(nsPath, "other-b"); err != nil {
		t.Fatal(err)
	}

	agent := config.DefaultAgent()
	agent.NodeName = "n1"
	agent.BridgeName, agent.NodeNetwork.GatewayName = br.Name, gw
	agent.OVSDBSocket = env.DBSocketPath()
	dir := t.TempDir()
	agent.CNI.ConfDir, agent.CNI.BinDir = filepath.Join(dir, "net.d"), filepath.Join(dir, "bin")
	src := filepath.Join(dir, "image-cni")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{cniinstall.PluginName, "host-local", "loopback"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte("tierflow's "+name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := cniinstall.Install(&agent, []string{"10.99.1.0/24"}, src); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "var-lib-tierflow")
	if err := os.MkdirAll(filepath.Join(state, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Agent: &agent, CNISourceDir: src, OVSDatabase: env.DBPath(), Remove: []string{state}, NetNS: nsPath}

	// While OVS runs, nothing is touched.
	if removed, err := Run(context.Background(), o); !errors.Is(err, ErrOVSRunning) || len(removed) != 0 {
		t.Fatalf("with OVS running: removed %v, %v; want ErrOVSRunning", removed, err)
	}
	if _, err := os.Stat(filepath.Join(agent.CNI.ConfDir, cniinstall.ConflistName)); err != nil {
		t.Fatalf("the refused run touched the CNI configuration: %v", err)
	}

	// The DaemonSet's ovs container stops: start-ovs's `ovs-appctl exit`.
	for _, target := range []string{env.VswitchdCtlPath(), filepath.Join(env.Dir, "ovsdb-server.ctl")} {
		if out, err := exec.Command("ovs-appctl", "-t", target, "exit").CombinedOutput(); err != nil {
			t.Fatalf("ovs-appctl -t %s exit: %v: %s", target, err, out)
		}
	}
	waitRefused(t, env.DBSocketPath())

	removed, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("Run: %v (removed %v)", err, removed)
	}
	t.Logf("removed: %s", strings.Join(removed, "; "))
	for _, link := range []string{br.Name, gw, "ovs-netdev"} {
		if exec.Command("ip", "-n", ns, "link", "show", link).Run() == nil {
			t.Errorf("device %s is still there", link)
		}
	}
	if out := ipns("ip", "route", "show", "table", "all", "proto", "0x54"); strings.TrimSpace(out) != "" {
		t.Errorf("routes of protocol 0x54 left: %s", out)
	}
	if out := ipns("ip", "route", "show", "10.98.5.0/24"); !strings.Contains(out, "via 10.98.0.2") {
		t.Errorf("another route was removed: %q", out)
	}
	for _, ipt := range []string{"iptables-save", "ip6tables-save"} {
		out := ipns(ipt, "-t", "nat")
		if strings.Contains(out, nodenet.MasqueradeChain) {
			t.Errorf("%s still has %s:\n%s", ipt, nodenet.MasqueradeChain, out)
		}
		if !strings.Contains(out, "-A POSTROUTING -j OTHER-POSTROUTING") {
			t.Errorf("%s lost another chain's jump:\n%s", ipt, out)
		}
	}
	if ok, err := hostguard.Present(nsPath, "other-b"); ok || err != nil {
		t.Errorf("the host guard of other-b is still there (%v)", err)
	}
	for _, p := range []string{filepath.Join(agent.CNI.ConfDir, cniinstall.ConflistName), filepath.Join(agent.CNI.BinDir, cniinstall.PluginName),
		filepath.Join(agent.CNI.BinDir, "host-local"), filepath.Join(agent.CNI.BinDir, "loopback"), state} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}

	if removed, err := Run(context.Background(), o); err != nil || len(removed) != 0 {
		t.Errorf("second run: removed %v, %v", removed, err)
	}
	if _, err := Run(context.Background(), Options{Agent: &agent, Remove: []string{"/"}}); err == nil {
		t.Error("Remove / was accepted")
	}
}

func waitLink(t *testing.T, ns, link string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command("ip", "-n", ns, "link", "show", link).Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("device %s did not appear", link)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitRefused(t *testing.T, socket string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("unix", socket)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections", socket)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
