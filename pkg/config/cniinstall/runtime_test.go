package cniinstall

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestInstalledConfigurationAttachesAPod installs the real plugins and the
// conflist as the init container does, then lets libcni — what container
// runtimes use — load the installed file and run ADD, CHECK and DEL on a
// real network namespace against a real OVS bridge.
func TestInstalledConfigurationAttachesAPod(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("ci")

	src := t.TempDir()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, pkg := range []string{
		"github.com/tierflow/tierflow/cmd/tierflow-cni",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/main/loopback",
	} {
		if out, err := exec.Command(goBin, "build", "-o", src+"/", pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	// host-local keeps its allocations under /var/lib/cni/networks/NAME;
	// remove what this test leaves there.
	dataDir := filepath.Join("/var/lib/cni/networks", NetworkName)
	if _, err := os.Stat(dataDir); os.IsNotExist(err) {
		t.Cleanup(func() { os.RemoveAll(dataDir) })
	}

	a := config.DefaultAgent()
	a.NodeName = "node-1"
	a.BridgeName = br.Name
	a.OVSDBSocket = env.DBSocketPath()
	a.CNI.ConfDir, a.CNI.BinDir = t.TempDir(), t.TempDir()
	a.CNI.MTU = 1400
	if err := Install(&a, []string{"10.250.3.0/24"}, src); err != nil {
		t.Fatal(err)
	}

	netnsName := fmt.Sprintf("tfinst%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", netnsName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", netnsName).Run() })

	list, err := libcni.ConfListFromFile(filepath.Join(a.CNI.ConfDir, ConflistName))
	if err != nil {
		t.Fatal(err)
	}
	cninet := libcni.NewCNIConfig([]string{a.CNI.BinDir}, nil)
	rt := &libcni.RuntimeConf{
		ContainerID: "c0ffee",
		NetNS:       "/var/run/netns/" + netnsName,
		IfName:      "eth0",
		Args:        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "team-a"}, {"K8S_POD_NAME", "web-0"}, {"K8S_POD_UID", "uid-web-0"}},
	}
	ctx := context.Background()
	// ADD waits for the agent to admit the pod: the test plays the agent,
	// admitting the port once it carries the pod's UID.
	go func() {
		for i := 0; i < 600; i++ {
			out, err := env.Vsctl("--columns=name", "--bare", "find", "Interface", `external_ids:"tierflow.io/pod-uid"=uid-web-0`)
			if name := strings.TrimSpace(out); err == nil && name != "" {
				_, _ = env.Vsctl("set", "Interface", name, `external_ids:"tierflow.io/admission"=admitted`)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	res, err := cninet.AddNetworkList(ctx, list, rt)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	t.Cleanup(func() { _ = cninet.DelNetworkList(ctx, list, rt) })
	result, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(result.IPs) != 1 {
		t.Fatalf("result IPs %v", result.IPs)
	}
	ip, _ := netip.AddrFromSlice(result.IPs[0].Address.IP.To4())
	if !netip.MustParsePrefix("10.250.3.0/24").Contains(ip) || result.IPs[0].Gateway.String() != "10.250.3.1" {
		t.Errorf("address %v gateway %v", result.IPs[0].Address, result.IPs[0].Gateway)
	}
	out, err := exec.Command("ip", "netns", "exec", netnsName, "ip", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), ip.String()+"/24") {
		t.Errorf("pod interface: %v\n%s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", netnsName, "ip", "link", "show", "dev", "eth0").CombinedOutput(); err != nil || !strings.Contains(string(out), "mtu 1400") {
		t.Errorf("pod MTU: %v\n%s", err, out)
	}
	// The OVS port carries the pod's identity for the agent.
	ports, err := env.Vsctl("--columns=name,external_ids", "find", "Interface", "external_ids:"+cni.ExternalIDPodName+"=web-0")
	if err != nil || !strings.Contains(ports, "team-a") {
		t.Errorf("OVS interface of the pod: %v\n%s", err, ports)
	}
	if err := cninet.CheckNetworkList(ctx, list, rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := cninet.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if ports, _ := env.Vsctl("--columns=name", "find", "Interface", "external_ids:"+cni.ExternalIDPodName+"=web-0"); strings.TrimSpace(ports) != "" {
		t.Errorf("OVS port left after DEL:\n%s", ports)
	}
}
