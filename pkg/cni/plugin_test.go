package cni_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// binDir holds the real plugin binaries the tests run: tierflow-cni and the
// host-local IPAM plugin it delegates to.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func pluginBinaries(t *testing.T) string { return pluginBinariesTB(t) }

func pluginBinariesTB(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tierflow-cni-bin-")
		if buildErr != nil {
			return
		}
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		for _, pkg := range []string{
			"github.com/tierflow/tierflow/cmd/tierflow-cni",
			"github.com/containernetworking/plugins/plugins/ipam/host-local",
		} {
			out, err := exec.Command(goBin, "build", "-o", binDir, pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// netnsFixture creates a named network namespace removed at cleanup.
func netnsFixture(t *testing.T, name string) string {
	t.Helper()
	full := fmt.Sprintf("tfcni-%d-%s", os.Getpid(), name)
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", full, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", full).Run() })
	return "/var/run/netns/" + full
}

func netnsName(path string) string { return filepath.Base(path) }

type netConf struct {
	bridge, socket, dataDir string
	defaultRoute            string
	// admission is admissionTimeout; empty: "0s" (no agent runs in
	// these tests unless one says so).
	admission  string
	ranges     [][]map[string]string
	mtu        int
	prevResult json.RawMessage
}

func (c netConf) json() []byte {
	conf := map[string]any{
		"cniVersion":  "1.0.0",
		"name":        "tierflow-test",
		"type":        "tierflow-cni",
		"bridge":      c.bridge,
		"ovsdbSocket": c.socket,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": c.dataDir,
			"ranges":  c.ranges,
		},
	}
	if c.defaultRoute != "" {
		conf["defaultRoute"] = c.defaultRoute
	}
	conf["admissionTimeout"] = "0s"
	if c.admission != "" {
		conf["admissionTimeout"] = c.admission
	}
	if c.mtu != 0 {
		conf["mtu"] = c.mtu
	}
	if c.prevResult != nil {
		conf["prevResult"] = c.prevResult
	}
	b, _ := json.Marshal(conf)
	return b
}

// invocation is one run of the plugin binary under the CNI protocol.
type invocation struct {
	command, containerID, netns, ifName, args string
	stdin                                     []byte
}

type outcome struct {
	stdout []byte
	err    *types.Error // the CNI error the plugin printed, nil on success
}

func run(t *testing.T, inv invocation) outcome {
	t.Helper()
	dir := pluginBinaries(t)
	cmd := exec.Command(filepath.Join(dir, "tierflow-cni"))
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+inv.command,
		"CNI_CONTAINERID="+inv.containerID,
		"CNI_NETNS="+inv.netns,
		"CNI_IFNAME="+inv.ifName,
		"CNI_ARGS="+inv.args,
		"CNI_PATH="+dir,
	)
	cmd.Stdin = bytes.NewReader(inv.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return outcome{stdout: stdout.Bytes()}
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("run tierflow-cni: %v", err)
	}
	cniErr := &types.Error{}
	if jerr := json.Unmarshal(stdout.Bytes(), cniErr); jerr != nil || cniErr.Msg == "" {
		t.Fatalf("tierflow-cni %s failed without a CNI error on stdout: %v\nstdout: %s\nstderr: %s",
			inv.command, err, stdout.String(), stderr.String())
	}
	return outcome{stdout: stdout.Bytes(), err: cniErr}
}

func mustSucceed(t *testing.T, o outcome, what string) {
	t.Helper()
	if o.err != nil {
		t.Fatalf("%s: CNI error %d: %s (%s)", what, o.err.Code, o.err.Msg, o.err.Details)
	}
}

func mustFailWith(t *testing.T, o outcome, code uint, msgPart string) {
	t.Helper()
	if o.err == nil {
		t.Fatalf("expected CNI error %d, got success: %s", code, o.stdout)
	}
	if o.err.Code != code || !strings.Contains(o.err.Msg+" "+o.err.Details, msgPart) {
		t.Fatalf("expected CNI error %d containing %q, got %d: %s (%s)", code, msgPart, o.err.Code, o.err.Msg, o.err.Details)
	}
}

func podArgs(name string) string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name + ";K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID=uid-" + name
}

func inNetns(t *testing.T, path string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", netnsName(path)}, args...)...).CombinedOutput()
	return string(out), err
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

func txChecksumOff(t *testing.T, netnsPath, ifName string) {
	t.Helper()
	args := []string{"ethtool", "-k", ifName}
	var out []byte
	var err error
	if netnsPath == "" {
		out, err = exec.Command(args[0], args[1:]...).CombinedOutput()
	} else {
		var s string
		s, err = inNetns(t, netnsPath, args...)
		out = []byte(s)
	}
	if err != nil {
		t.Fatalf("ethtool -k %s: %v: %s", ifName, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "tx-checksum") && strings.Contains(line, ": on") {
			t.Errorf("%s: %s", ifName, line)
		}
	}
}

// tcpRoundTrip listens inside server's namespace and dials from client's.
func tcpRoundTrip(t *testing.T, clientNS, serverNS string, serverIP net.IP) {
	t.Helper()
	var l net.Listener
	err := ns.WithNetNSPath(serverNS, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(serverIP.String(), "7070"))
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", serverNS, err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, io.LimitReader(c, 5))
	}()
	var conn net.Conn
	err = ns.WithNetNSPath(clientNS, func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", net.JoinHostPort(serverIP.String(), "7070"), 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s: %v", serverIP, clientNS, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo over TCP to %s: %q, %v", serverIP, buf, err)
	}
}

func dualStackRanges() [][]map[string]string {
	return [][]map[string]string{
		{{"subnet": "10.77.0.0/24", "gateway": "10.77.0.1"}},
		{{"subnet": "fd77::/64", "gateway": "fd77::1"}},
	}
}

func parseResult(t *testing.T, out []byte) *current.Result {
	t.Helper()
	res := &current.Result{}
	if err := json.Unmarshal(out, res); err != nil {
		t.Fatalf("decode result %s: %v", out, err)
	}
	return res
}

func ipOf(res *current.Result, v4 bool) net.IP {
	for _, ipc := range res.IPs {
		if (ipc.Address.IP.To4() != nil) == v4 {
			return ipc.Address.IP
		}
	}
	return nil
}

// allocations lists the addresses host-local holds in dataDir.
func allocations(t *testing.T, dataDir string) []string {
	t.Helper()
	var ips []string
	_ = filepath.Walk(dataDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && net.ParseIP(info.Name()) != nil {
			ips = append(ips, info.Name())
		}
		return nil
	})
	return ips
}

func ovsPorts(t *testing.T, env *ovsenv.Env, bridge string) []string {
	t.Helper()
	out, err := env.Vsctl("list-ports", bridge)
	if err != nil {
		t.Fatalf("list-ports: %v", err)
	}
	return strings.Fields(out)
}

func TestAddConnectCheckDel(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("c")
	// No agent runs here: a NORMAL flow makes the bridge a learning switch.
	if _, err := br.Ofctl("add-flow", "priority=0,actions=NORMAL"); err != nil {
		t.Fatal(err)
	}
	conf := netConf{bridge: br.Name, socket: env.DBSocketPath(), dataDir: t.TempDir(), ranges: dualStackRanges(), mtu: 1400}
	nsA, nsB := netnsFixture(t, "a"), netnsFixture(t, "b")
	invA := invocation{containerID: "ctr-a", netns: nsA, ifName: "eth0", args: podArgs("pod-a"), stdin: conf.json()}
	invB := invocation{containerID: "ctr-b", netns: nsB, ifName: "eth0", args: podArgs("pod-b"), stdin: conf.json()}

	invA.command, invB.command = "ADD", "ADD"
	outA, outB := run(t, invA), run(t, invB)
	mustSucceed(t, outA, "ADD a")
	mustSucceed(t, outB, "ADD b")
	resA, resB := parseResult(t, outA.stdout), parseResult(t, outB.stdout)

	if len(resA.IPs) != 2 || len(resA.Interfaces) != 2 {
		t.Fatalf("ADD a: want 2 IPs and 2 interfaces, got %s", outA.stdout)
	}
	hostA := cni.HostVethName("ctr-a", "eth0")
	if resA.Interfaces[0].Name != hostA || resA.Interfaces[1].Name != "eth0" || resA.Interfaces[1].Sandbox != nsA {
		t.Errorf("ADD a interfaces: %+v %+v", resA.Interfaces[0], resA.Interfaces[1])
	}
	for _, ipc := range resA.IPs {
		if ipc.Interface == nil || *ipc.Interface != 1 {
			t.Errorf("IP %s not bound to the sandbox interface", ipc.Address.String())
		}
	}

	// Addresses, MTU and default routes inside the namespace.
	addrOut, err := inNetns(t, nsA, "ip", "addr", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, ipc := range resA.IPs {
		if !strings.Contains(addrOut, ipc.Address.String()) {
			t.Errorf("eth0 in a lacks %s:\n%s", ipc.Address.String(), addrOut)
		}
	}
	if !strings.Contains(addrOut, "mtu 1400") {
		t.Errorf("eth0 in a: want mtu 1400:\n%s", addrOut)
	}
	if out, _ := inNetns(t, nsA, "ip", "-4", "route", "show", "default"); !strings.Contains(out, "via 10.77.0.1 dev eth0") {
		t.Errorf("a: IPv4 default route: %q", out)
	}
	if out, _ := inNetns(t, nsA, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "via fd77::1 dev eth0") {
		t.Errorf("a: IPv6 default route: %q", out)
	}
	txChecksumOff(t, "", hostA)
	txChecksumOff(t, nsA, "eth0")

	// The OVS port and the external_ids the agent reads.
	if ports := ovsPorts(t, env, br.Name); len(ports) != 2 {
		t.Errorf("bridge ports: %v", ports)
	}
	for key, want := range map[string]string{
		cni.ExternalIDPodNamespace: "default",
		cni.ExternalIDPodName:      "pod-a",
		cni.ExternalIDPodIPs:       ipOf(resA, true).String() + "," + ipOf(resA, false).String(),
		cni.ExternalIDPodMAC:       resA.Interfaces[1].Mac,
		cni.ExternalIDContainerID:  "ctr-a",
	} {
		got, err := env.Vsctl("get", "Interface", hostA, fmt.Sprintf("external_ids:%q", key))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Trim(strings.TrimSpace(got), `"`) != want {
			t.Errorf("external_ids:%s = %s, want %s", key, got, want)
		}
	}
	if _, err := br.OFPort(hostA); err != nil {
		t.Fatal(err)
	}

	// Real packets between the two pods through the bridge.
	tcpRoundTrip(t, nsA, nsB, ipOf(resB, true))
	tcpRoundTrip(t, nsB, nsA, ipOf(resA, false))

	// CHECK passes on the intact attachment and fails once it is damaged.
	withPrev := conf
	withPrev.prevResult = outA.stdout
	check := invA
	check.command, check.stdin = "CHECK", withPrev.json()
	mustSucceed(t, run(t, check), "CHECK a")
	if out, err := inNetns(t, nsA, "ip", "addr", "del", resA.IPs[0].Address.String(), "dev", "eth0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	mustFailWith(t, run(t, check), types.ErrInternal, "")
	if _, err := env.Vsctl("remove", "Interface", hostA, "external_ids", fmt.Sprintf("%q", cni.ExternalIDPodName)); err != nil {
		t.Fatal(err)
	}

	// DEL removes the veth pair, the port and the allocation; twice is fine.
	del := invA
	del.command = "DEL"
	mustSucceed(t, run(t, del), "DEL a")
	if linkExists(hostA) {
		t.Errorf("host veth %s still exists after DEL", hostA)
	}
	if out, err := inNetns(t, nsA, "ip", "link", "show", "eth0"); err == nil {
		t.Errorf("eth0 still in a after DEL: %s", out)
	}
	if ports := ovsPorts(t, env, br.Name); len(ports) != 1 {
		t.Errorf("bridge ports after DEL a: %v", ports)
	}
	if ips := allocations(t, conf.dataDir); len(ips) != 2 {
		t.Errorf("allocations after DEL a: %v (want only b's two)", ips)
	}
	mustSucceed(t, run(t, del), "second DEL a")

	// DEL after the namespace is gone still cleans up.
	if out, err := exec.Command("ip", "netns", "del", netnsName(nsB)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	delB := invB
	delB.command = "DEL"
	mustSucceed(t, run(t, delB), "DEL b without namespace")
	if ports := ovsPorts(t, env, br.Name); len(ports) != 0 {
		t.Errorf("bridge ports after DEL b: %v", ports)
	}
	if ips := allocations(t, conf.dataDir); len(ips) != 0 {
		t.Errorf("allocations after DEL b: %v", ips)
	}
	if linkExists(cni.HostVethName("ctr-b", "eth0")) {
		t.Error("host veth of b still exists")
	}
}

// assertNothingAttached checks that a failed ADD left no trace.
func assertNothingAttached(t *testing.T, env *ovsenv.Env, bridge, netnsPath, containerID, dataDir string, wantAllocs int) {
	t.Helper()
	if linkExists(cni.HostVethName(containerID, "eth0")) {
		t.Errorf("host veth of %s left behind", containerID)
	}
	if netnsPath != "" {
		if out, err := inNetns(t, netnsPath, "ip", "link", "show", "eth0"); err == nil {
			t.Errorf("eth0 left in namespace: %s", out)
		}
	}
	if ports := ovsPorts(t, env, bridge); len(ports) != wantAllocs {
		t.Errorf("bridge ports: %v, want %d", ports, wantAllocs)
	}
	if ips := allocations(t, dataDir); len(ips) != wantAllocs {
		t.Errorf("allocations: %v, want %d", ips, wantAllocs)
	}
}

func TestAddErrors(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("e")
	good := netConf{bridge: br.Name, socket: env.DBSocketPath(), dataDir: t.TempDir(), ranges: dualStackRanges()}
	nsA := netnsFixture(t, "ea")

	add := func(conf []byte, netns, id string) outcome {
		return run(t, invocation{command: "ADD", containerID: id, netns: netns, ifName: "eth0", args: podArgs(id), stdin: conf})
	}

	t.Run("malformed JSON", func(t *testing.T) {
		mustFailWith(t, add([]byte(`{"cniVersion":"1.0.0","name":"x","type":"tierflow-cni","bridge":`), nsA, "m1"), types.ErrDecodingFailure, "")
	})
	t.Run("no bridge", func(t *testing.T) {
		c := good
		c.bridge = ""
		mustFailWith(t, add(c.json(), nsA, "m2"), types.ErrInvalidNetworkConfig, `"bridge" is required`)
	})
	t.Run("bad mtu", func(t *testing.T) {
		c := good
		c.mtu = 20
		mustFailWith(t, add(c.json(), nsA, "m3"), types.ErrInvalidNetworkConfig, "mtu 20")
	})
	t.Run("no ipam", func(t *testing.T) {
		conf := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"x","type":"tierflow-cni","bridge":%q,"ovsdbSocket":%q}`, br.Name, env.DBSocketPath()))
		mustFailWith(t, add(conf, nsA, "m4"), types.ErrInvalidNetworkConfig, `"ipam"`)
	})
	t.Run("bridge absent", func(t *testing.T) {
		c := good
		c.bridge = "tfnosuchbr"
		mustFailWith(t, add(c.json(), nsA, "m5"), types.ErrTryAgainLater, `bridge "tfnosuchbr" does not exist`)
	})
	t.Run("ovsdb unreachable", func(t *testing.T) {
		c := good
		c.socket = filepath.Join(t.TempDir(), "nothing.sock")
		mustFailWith(t, add(c.json(), nsA, "m6"), cni.ErrOVS, "cannot query OVSDB")
	})
	t.Run("missing netns", func(t *testing.T) {
		mustFailWith(t, add(good.json(), "/var/run/netns/tfcni-does-not-exist", "m7"), types.ErrInvalidNetNS, "tfcni-does-not-exist")
	})
	assertNothingAttached(t, env, br.Name, nsA, "m1", good.dataDir, 0)

	t.Run("DEL without OVS", func(t *testing.T) {
		// No database socket means no OVS, hence no port: DEL succeeds
		// instead of blocking the runtime forever.
		c := good
		c.socket = filepath.Join(t.TempDir(), "gone.sock")
		mustSucceed(t, run(t, invocation{command: "DEL", containerID: "never", netns: nsA, ifName: "eth0", stdin: c.json()}), "DEL without OVS")
	})

	t.Run("IPAM exhausted", func(t *testing.T) {
		// A /30 has one usable address besides the gateway.
		small := good
		small.dataDir = t.TempDir()
		small.ranges = [][]map[string]string{{{"subnet": "10.78.0.0/30", "gateway": "10.78.0.1"}}}
		mustSucceed(t, add(small.json(), nsA, "x1"), "first ADD in /30")
		nsB := netnsFixture(t, "eb")
		mustFailWith(t, add(small.json(), nsB, "x2"), cni.ErrIPAM, "no IP addresses available")
		assertNothingAttached(t, env, br.Name, nsB, "x2", small.dataDir, 1)
		mustSucceed(t, run(t, invocation{command: "DEL", containerID: "x1", netns: nsA, ifName: "eth0", stdin: small.json()}), "DEL x1")
		assertNothingAttached(t, env, br.Name, nsA, "x1", small.dataDir, 0)
	})

	t.Run("repeated ADD keeps the first attachment", func(t *testing.T) {
		mustSucceed(t, add(good.json(), nsA, "r1"), "ADD r1")
		mustFailWith(t, add(good.json(), nsA, "r1"), types.ErrInternal, "already exists")
		if ips := allocations(t, good.dataDir); len(ips) != 2 {
			t.Errorf("allocations after repeated ADD: %v", ips)
		}
		if ports := ovsPorts(t, env, br.Name); len(ports) != 1 {
			t.Errorf("ports after repeated ADD: %v", ports)
		}
		mustSucceed(t, run(t, invocation{command: "DEL", containerID: "r1", netns: nsA, ifName: "eth0", stdin: good.json()}), "DEL r1")
	})

	t.Run("no pod identity", func(t *testing.T) {
		// Without K8S_POD_* the port carries no pod keys, so the agent
		// ignores it rather than mapping it to a pod.
		mustSucceed(t, run(t, invocation{command: "ADD", containerID: "anon", netns: nsA, ifName: "eth0", args: "", stdin: good.json()}), "ADD without CNI_ARGS")
		host := cni.HostVethName("anon", "eth0")
		out, err := env.Vsctl("get", "Interface", host, "external_ids")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, cni.ExternalIDPodName) || strings.Contains(out, cni.ExternalIDPodNamespace) || !strings.Contains(out, cni.ExternalIDPodIPs) {
			t.Errorf("external_ids without pod identity: %s", out)
		}
		mustSucceed(t, run(t, invocation{command: "DEL", containerID: "anon", netns: nsA, ifName: "eth0", stdin: good.json()}), "DEL anon")
	})

	t.Run("pod without UID", func(t *testing.T) {
		args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=nouid"
		mustFailWith(t, run(t, invocation{command: "ADD", containerID: "nouid", netns: nsA, ifName: "eth0", args: args, stdin: good.json()}),
			types.ErrInvalidEnvironmentVariables, "K8S_POD_UID")
		assertNothingAttached(t, env, br.Name, nsA, "nouid", good.dataDir, 0)
	})

	t.Run("waits for the pod's admission", func(t *testing.T) {
		// The agent (here the test) admits the port a while after it
		// appears: ADD returns only then, and the port carries the UID
		// the agent admits it by.
		conf := good
		conf.admission = "20s"
		host := cni.HostVethName("w1", "eth0")
		admitted := make(chan time.Time, 1)
		go func() {
			for i := 0; i < 400; i++ {
				if out, err := env.Vsctl("get", "Interface", host, `external_ids:"tierflow.io/pod-uid"`); err == nil && strings.Contains(out, "uid-w1") {
					time.Sleep(500 * time.Millisecond)
					admitted <- time.Now()
					_, _ = env.Vsctl("set", "Interface", host, `external_ids:"tierflow.io/admission"=admitted`)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		mustSucceed(t, add(conf.json(), nsA, "w1"), "ADD w1")
		select {
		case at := <-admitted:
			if time.Now().Before(at) {
				t.Errorf("ADD returned before the admission")
			}
		default:
			t.Fatal("ADD returned before the port was admitted")
		}
		mustSucceed(t, run(t, invocation{command: "DEL", containerID: "w1", netns: nsA, ifName: "eth0", stdin: good.json()}), "DEL w1")
	})

	t.Run("not admitted in time rolls back", func(t *testing.T) {
		// The agent says why it does not admit the pod: ADD fails with
		// that, after the timeout, and leaves nothing behind (the runtime
		// retries, as for any failed ADD).
		conf := good
		conf.admission = "1s"
		host := cni.HostVethName("n1", "eth0")
		go func() {
			for i := 0; i < 100; i++ {
				if _, err := env.Vsctl("set", "Interface", host, `external_ids:"tierflow.io/admission"="pending: the controller's state for this node does not list the pod (yet)"`); err == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		start := time.Now()
		mustFailWith(t, add(conf.json(), nsA, "n1"), cni.ErrNotAdmitted, "does not list the pod")
		if d := time.Since(start); d < time.Second {
			t.Errorf("ADD failed after %v, before its admission timeout", d)
		}
		assertNothingAttached(t, env, br.Name, nsA, "n1", good.dataDir, 0)
		// Nobody answers at all: said so.
		mustFailWith(t, add(conf.json(), nsA, "n2"), cni.ErrNotAdmitted, "is tierflow-agent running")
		assertNothingAttached(t, env, br.Name, nsA, "n2", good.dataDir, 0)
	})

	t.Run("bad admission timeout", func(t *testing.T) {
		conf := good
		conf.admission = "soon"
		mustFailWith(t, add(conf.json(), nsA, "bt"), types.ErrInvalidNetworkConfig, "admissionTimeout")
	})

	t.Run("OVS failure rolls back", func(t *testing.T) {
		// A port of the same name on another bridge makes add-port fail
		// after the veth exists and the addresses are allocated.
		other := env.AddBridge("o")
		host := cni.HostVethName("o1", "eth0")
		if _, err := env.Vsctl("add-port", other.Name, host); err != nil {
			t.Fatal(err)
		}
		mustFailWith(t, add(good.json(), nsA, "o1"), cni.ErrOVS, "failed to add port")
		assertNothingAttached(t, env, br.Name, nsA, "o1", good.dataDir, 0)
		if ports := ovsPorts(t, env, other.Name); len(ports) != 1 {
			t.Errorf("rollback touched the other bridge's port: %v", ports)
		}
	})
}

func TestOnLinkDefaultRoute(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("l")
	conf := netConf{bridge: br.Name, socket: env.DBSocketPath(), dataDir: t.TempDir(), ranges: dualStackRanges(), defaultRoute: "on-link"}
	nsA := netnsFixture(t, "la")
	inv := invocation{command: "ADD", containerID: "ctr-l", netns: nsA, ifName: "eth0", args: podArgs("pod-l"), stdin: conf.json()}
	out := run(t, inv)
	mustSucceed(t, out, "ADD on-link")
	res := parseResult(t, out.stdout)
	for _, ipc := range res.IPs {
		if ipc.Gateway != nil {
			t.Errorf("on-link result carries gateway %s", ipc.Gateway)
		}
	}
	if got, _ := inNetns(t, nsA, "ip", "-4", "route", "show", "default"); strings.TrimSpace(got) != "default dev eth0 scope link" {
		t.Errorf("IPv4 default route: %q", got)
	}
	if got, _ := inNetns(t, nsA, "ip", "-6", "route", "show", "default"); !strings.HasPrefix(strings.TrimSpace(got), "default dev eth0") || strings.Contains(got, "via") {
		t.Errorf("IPv6 default route: %q", got)
	}
	if got, _ := inNetns(t, nsA, "ip", "-6", "addr", "show", "dev", "eth0", "tentative"); strings.TrimSpace(got) != "" {
		t.Errorf("IPv6 address still tentative after ADD: %s", got)
	}
	withPrev := conf
	withPrev.prevResult = out.stdout
	check := inv
	check.command, check.stdin = "CHECK", withPrev.json()
	mustSucceed(t, run(t, check), "CHECK on-link")
	inv.command = "DEL"
	mustSucceed(t, run(t, inv), "DEL on-link")

	bad := conf
	bad.defaultRoute = "sideways"
	inv.command, inv.stdin = "ADD", bad.json()
	mustFailWith(t, run(t, inv), types.ErrInvalidNetworkConfig, `defaultRoute "sideways"`)
}

func TestStatus(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("s")
	conf := netConf{bridge: br.Name, socket: env.DBSocketPath(), dataDir: t.TempDir(), ranges: dualStackRanges()}
	st := func(c netConf) outcome {
		o := run(t, invocation{command: "STATUS", stdin: bytes.Replace(c.json(), []byte(`"1.0.0"`), []byte(`"1.1.0"`), 1)})
		return o
	}
	mustSucceed(t, st(conf), "STATUS")
	conf.bridge = "tfnosuchbr"
	mustFailWith(t, st(conf), types.ErrPluginNotAvailable, "does not exist")
}

// BenchmarkAddDel measures one pod attachment and detachment through the
// real plugin binary (ADD then DEL), as a runtime drives it.
func BenchmarkAddDel(b *testing.B) {
	env := ovsenv.Start(b)
	br := env.AddBridge("b")
	conf := netConf{bridge: br.Name, socket: env.DBSocketPath(), dataDir: b.TempDir(), ranges: dualStackRanges()}
	name := fmt.Sprintf("tfcni-%d-bench", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	dir := pluginBinariesTB(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, cmd := range []string{"ADD", "DEL"} {
			c := exec.Command(filepath.Join(dir, "tierflow-cni"))
			c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID=bench", "CNI_NETNS=/var/run/netns/"+name,
				"CNI_IFNAME=eth0", "CNI_PATH="+dir, "CNI_ARGS="+podArgs("bench"))
			c.Stdin = bytes.NewReader(conf.json())
			if out, err := c.CombinedOutput(); err != nil {
				b.Fatalf("%s: %v: %s", cmd, err, out)
			}
		}
	}
}
