package testbed

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/ovsenv"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

// NodeLabel marks the Node objects of the test bed; kwok manages exactly
// the nodes carrying it.
const NodeLabel = "tierflow.io/testbed-node"

// AgnhostPath is where `kubectl exec POD -- /agnhost ...` finds agnhost.
const AgnhostPath = "/agnhost"

// Options configures Start.
type Options struct {
	// Nodes is the number of kwok nodes (default 3).
	Nodes int
	// IPv6 gives pods an IPv6 address besides the IPv4 one.
	IPv6 bool
	// NormalFlows installs a NORMAL flow in every node bridge, for tests
	// that run no agent.
	NormalFlows bool
	// PodCIDRBits is the prefix length of each node's IPv4 pod range,
	// 16..24 (default 24: node i gets 10.244.i.0/24, about 250 pods); a
	// shorter one holds more pods (22: node i gets 10.244.4i.0/22).
	PodCIDRBits int
	// Dir holds binaries, configuration, state and logs; default: a
	// temporary directory removed at cleanup.
	Dir string
	// Encap brings the bed up for tierflow's encap node network (see
	// encap.go): every node its own network namespace with its own OVS,
	// each on its own subnet behind a router namespace that drops every
	// packet with a pod address; no fabric, no uplinks. Pods get the
	// gateway as default route and the MTU tierflow-install-cni would
	// give them. Not with NormalFlows.
	Encap bool
}

// Node is one simulated node.
type Node struct {
	Name string
	// IP is the node's InternalIP: on the fabric bridge's interface, or
	// with Encap on the node's link to the router, in its own namespace.
	IP string
	// IPv6 is its IPv6 InternalIP (Encap with IPv6 only).
	IPv6 string
	// ExternalIP (Encap only) is where kube-apiserver reaches kwok for
	// the node: an address of the test process's namespace.
	ExternalIP string
	// OVS is the node's Open vSwitch: the bed's shared one, or with Encap
	// its own, in its own network namespace (OVS.Netns).
	OVS *ovsenv.Env
	// Bridge is the node's OVS bridge; UplinkPort the name of its patch
	// port to the fabric bridge.
	Bridge     *ovsenv.Bridge
	UplinkPort string
	// PodCIDRs are the node's pod ranges (IPv4 first).
	PodCIDRs []string
	// CNIConfig is the tierflow-cni network configuration file the node's
	// runtime uses; StateDir its per-pod state and IPAM data.
	CNIConfig string
	StateDir  string
	runtime   *supervisor
}

// Testbed is a running simulated cluster.
type Testbed struct {
	Cluster *kubeapi.Cluster
	// OVS and Fabric: the Open vSwitch every node bridge is on, and the
	// bridge joining them (nil with Encap: see Node.OVS and Router).
	OVS *ovsenv.Env
	// Fabric joins the node bridges.
	Fabric *ovsenv.Bridge
	// Router (Encap only) is the network namespace joining the nodes'.
	Router string
	// Encap: the bed is brought up for the encap node network.
	Encap bool
	Nodes []*Node
	// Dir is the test bed's directory; BinDir holds tierflow-cni,
	// host-local and tierflow-podrunner.
	Dir, BinDir string
	// KwokPort is the port kwok serves the kubelet API on, on every node IP.
	KwokPort int
	// NodeInterface holds the node addresses kube-apiserver reaches kwok
	// on (the fabric bridge's own interface; with Encap one end of a
	// veth pair).
	NodeInterface string

	kwok *supervisor
	tb   testing.TB
}

// Start brings up the test bed; everything stops at tb's cleanup.
// Missing prerequisites fail tb.
func Start(tb testing.TB, opts Options) *Testbed {
	tb.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 1 || opts.Nodes > 200 {
		tb.Fatalf("testbed: %d nodes: want 1..200", opts.Nodes)
	}
	if opts.Encap && opts.NormalFlows {
		tb.Fatalf("testbed: Encap needs tierflow's agents (no NormalFlows)")
	}
	dir := opts.Dir
	if dir == "" {
		dir = tb.TempDir()
	}
	tbed := &Testbed{Dir: dir, BinDir: filepath.Join(dir, "bin"), Encap: opts.Encap, tb: tb}
	if err := os.MkdirAll(tbed.BinDir, 0o755); err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	root, err := kubeapi.RepoRoot()
	if err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	if err := buildBinaries(root, tbed.BinDir); err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	kwokBin, kwokModule, err := EnsureKwok(root)
	if err != nil {
		tb.Fatalf("testbed: %v", err)
	}

	// kube-apiserver reaches kwok (exec, logs) at each node's InternalIP
	// (with Encap its ExternalIP: the InternalIP is in the node's own
	// namespace): the default preference starts with Hostname, which does
	// not resolve.
	preferred := "--kubelet-preferred-address-types=InternalIP"
	if opts.Encap {
		preferred = "--kubelet-preferred-address-types=ExternalIP,InternalIP"
	}
	kopts := []kubeapi.Option{kubeapi.WithControllerManager(), kubeapi.WithScheduler(), kubeapi.WithCRDs(),
		kubeapi.WithAPIServerArgs(preferred)}
	if opts.IPv6 {
		// Dual-stack pods, dual-stack Services.
		kopts = append(kopts, kubeapi.WithDualStackServices())
	}
	tbed.Cluster = kubeapi.Start(tb, kopts...)
	tbed.Cluster.Kubectl(tb, "apply", "-f", filepath.Join(kwokModule, "kustomize", "crd", "bases", "kwok.x-k8s.io_execs.yaml"))

	if opts.Encap {
		if err := tbed.startUnderlay(); err != nil {
			tb.Fatalf("testbed: %v", err)
		}
	} else {
		tbed.OVS = ovsenv.Start(tb)
		tbed.Fabric = tbed.OVS.AddBridge("fab")
		if _, err := tbed.Fabric.Ofctl("add-flow", "priority=0,actions=NORMAL"); err != nil {
			tb.Fatalf("testbed: %v", err)
		}
		// The node addresses live on the fabric bridge's own (tap)
		// interface: local to the host, so kube-apiserver reaches kwok
		// on them, and gone with the bridge.
		tbed.NodeInterface = tbed.Fabric.Name
	}
	subnet, err := randomByte()
	if err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	var nodeIPs []string
	for i := 1; i <= opts.Nodes; i++ {
		nodeIPs = append(nodeIPs, fmt.Sprintf("172.31.%d.%d", subnet, 10+i))
	}
	if err := addAddresses(tbed.NodeInterface, nodeIPs); err != nil {
		tb.Fatalf("testbed: %v", err)
	}

	if err := installAgnhost(tb, filepath.Join(tbed.BinDir, "tierflow-podrunner")); err != nil {
		tb.Fatalf("testbed: %v", err)
	}

	if err := tbed.startKwok(kwokBin, kwokModule, nodeIPs); err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	for i := 1; i <= opts.Nodes; i++ {
		n, err := tbed.addNode(i, nodeIPs[i-1], opts)
		if err != nil {
			tb.Fatalf("testbed: node %d: %v", i, err)
		}
		tbed.Nodes = append(tbed.Nodes, n)
		if opts.Encap {
			continue
		}
		// The host's namespace holds the node addresses (and hostNetwork
		// pods' servers): it reaches each node's IPv4 pod CIDR on-link
		// through the fabric, so pods can talk to node addresses, as
		// Kubernetes requires (and network policy node peers probe).
		for _, cidr := range n.PodCIDRs {
			if ip, _, err := net.ParseCIDR(cidr); err == nil && ip.To4() != nil {
				if err := run("ip", "route", "replace", cidr, "dev", tbed.NodeInterface); err != nil {
					tb.Fatalf("testbed: node %d: route to its pods: %v", i, err)
				}
			}
		}
	}
	if err := tbed.waitNodesReady(90 * time.Second); err != nil {
		tb.Fatalf("testbed: %v\nkwok log: %s", err, tbed.kwok.logTail(20))
	}
	if err := tbed.startClusterDNS(); err != nil {
		tb.Fatalf("testbed: cluster DNS: %v", err)
	}
	return tbed
}

// ClusterDNS is the cluster DNS Service's address (kube-system/kube-dns),
// in every pod's resolv.conf.
const ClusterDNS = "10.96.0.10"

// startClusterDNS creates the cluster DNS as a kubeadm cluster has it: the
// Service kube-system/kube-dns at ClusterDNS (UDP and TCP 53) in front of
// a CoreDNS pod (k8s-app=kube-dns) on the first node, which the node
// runtime serves with the agnhost package's DNS stand-in (Service names,
// from a watch of the Services). Pods reach it through the pod network like any
// Service, so DNS works on the bed only where a Service implementation
// (tierflow's proxy) does.
func (t *Testbed) startClusterDNS() error {
	ctx := context.Background()
	kube := t.Cluster.Kube
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{NodeName: t.Nodes[0].Name, Containers: []corev1.Container{{
			Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.11.3", Args: []string{"-conf", "/etc/coredns/Corefile"},
			Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}},
		}}},
	}
	if _, err := kube.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{ClusterIP: ClusterDNS, Selector: map[string]string{"k8s-app": "kube-dns"}, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("dns-tcp")}}},
	}
	_, err := kube.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

// buildBinaries builds the test bed's own commands and the host-local IPAM
// plugin into binDir.
func buildBinaries(root, binDir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(goBin, "build", "-o", binDir+"/",
		"./cmd/tierflow-cni", "./test/testbed/cmd/tierflow-podrunner",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build test bed binaries: %v\n%s", err, out)
	}
	return nil
}

// KwokVersion is the kwok release the test bed runs.
const KwokVersion = "v0.8.0"

// kwokTTYPatch fixes a crash of kwok v0.8.0: an exec with a TTY and without
// stdin (how cyclonus probes: client-go exec, TTY true, Stdin false) makes
// the server copy from a nil reader, and the panic kills the whole kwok
// process. The patch gives such an exec an empty input stream.
var kwokTTYPatch = struct{ file, old, new string }{
	file: "pkg/kwok/server/debugging_exec_other.go",
	old: `		stm := struct {
			io.Reader
			io.Writer
		}{in, out}`,
	new: `		// tierflow test bed patch: a TTY exec without stdin has no input.
		if in == nil {
			in = io.MultiReader()
		}
		stm := struct {
			io.Reader
			io.Writer
		}{in, out}`,
}

// kwokBuildID names the source and patch of the kwok binary; a binary built
// otherwise (e.g. a plain go install) is rebuilt.
const kwokBuildID = "sigs.k8s.io/kwok@" + KwokVersion + "+tierflow-tty-stdin-patch-1"

// EnsureKwok returns the kwok binary, _output/bin/kwok, and the kwok
// module's source directory (for its CRDs and stages). The binary is built
// once (cached, rebuilt when kwokBuildID changes) from the module source of
// KwokVersion with kwokTTYPatch applied; the module comes from the Go
// module proxy the first time.
func EnsureKwok(root string) (bin, moduleDir string, err error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(goBin, "mod", "download", "-json", "sigs.k8s.io/kwok@"+KwokVersion).Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download sigs.k8s.io/kwok@%s (needs the Go module proxy the first time): %v", KwokVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", "", fmt.Errorf("go mod download sigs.k8s.io/kwok@%s: no module directory in %s", KwokVersion, out)
	}
	bin = filepath.Join(root, "_output", "bin", "kwok")
	stamp := bin + ".build-id"
	fresh := func() bool {
		id, err := os.ReadFile(stamp)
		_, binErr := os.Stat(bin)
		return err == nil && binErr == nil && string(id) == kwokBuildID
	}
	if fresh() {
		return bin, mod.Dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, "_output", ".kwok.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if fresh() {
		return bin, mod.Dir, nil
	}
	src := filepath.Join(root, "_output", "kwok-src")
	_ = os.RemoveAll(src)
	if err := run("cp", "-r", mod.Dir, src); err != nil {
		return "", "", err
	}
	if err := run("chmod", "-R", "u+w", src); err != nil {
		return "", "", err
	}
	target := filepath.Join(src, kwokTTYPatch.file)
	code, err := os.ReadFile(target)
	if err != nil {
		return "", "", err
	}
	if !bytes.Contains(code, []byte(kwokTTYPatch.old)) {
		return "", "", fmt.Errorf("kwok patch: %s does not contain the code to patch", kwokTTYPatch.file)
	}
	if err := os.WriteFile(target, bytes.Replace(code, []byte(kwokTTYPatch.old), []byte(kwokTTYPatch.new), 1), 0o644); err != nil {
		return "", "", err
	}
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/kwok")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build kwok %s: %v\n%s", KwokVersion, err, out)
	}
	if err := os.WriteFile(stamp, []byte(kwokBuildID), 0o644); err != nil {
		return "", "", err
	}
	_ = os.RemoveAll(src)
	return bin, mod.Dir, nil
}

// installAgnhost makes /agnhost the test bed's agnhost: a symlink to
// tierflow-podrunner, removed at cleanup if this call created it.
func installAgnhost(tb testing.TB, podrunner string) error {
	target, err := os.Readlink(AgnhostPath)
	switch {
	case err == nil && filepath.Base(target) == "tierflow-podrunner":
		if _, err := os.Stat(target); err == nil {
			return nil // another test bed's; the same program
		}
		if err := os.Remove(AgnhostPath); err != nil {
			return err
		}
	case err == nil:
		return fmt.Errorf("%s is a symlink to %s, not to tierflow-podrunner; remove it", AgnhostPath, target)
	case errors.Is(err, os.ErrNotExist):
	default:
		if _, statErr := os.Lstat(AgnhostPath); statErr == nil {
			return fmt.Errorf("%s exists and is not the test bed's symlink; remove it", AgnhostPath)
		}
		return err
	}
	if err := os.Symlink(podrunner, AgnhostPath); err != nil {
		return err
	}
	tb.Cleanup(func() {
		if t, err := os.Readlink(AgnhostPath); err == nil && t == podrunner {
			_ = os.Remove(AgnhostPath)
		}
	})
	return nil
}

func (t *Testbed) startKwok(bin, moduleDir string, nodeIPs []string) error {
	dir := filepath.Join(t.Dir, "kwok")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var stages [][]byte
	for _, f := range []string{"node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"} {
		data, err := os.ReadFile(filepath.Join(moduleDir, "kustomize", "stage", f))
		if err != nil {
			return fmt.Errorf("kwok stage: %w", err)
		}
		stages = append(stages, data)
	}
	stageFile := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(stageFile, bytes.Join(stages, []byte("\n---\n")), 0o644); err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := writeServingCert(certFile, keyFile, nodeIPs); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	t.KwokPort = port
	p, err := startSupervised(dir, "kwok", bin,
		"--kubeconfig="+t.Cluster.Kubeconfig,
		"--config="+stageFile,
		"--manage-nodes-with-label-selector="+NodeLabel+"=true",
		"--enable-crds=Exec",
		"--server-address=0.0.0.0:"+strconv.Itoa(port),
		"--node-port="+strconv.Itoa(port),
		"--node-ip="+nodeIPs[0],
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--node-lease-duration-seconds=40",
	)
	if err != nil {
		return err
	}
	t.kwok = p
	t.tb.Cleanup(func() { p.Stop(10 * time.Second) })
	return nil
}

func (t *Testbed) addNode(i int, ip string, opts Options) (*Node, error) {
	name := fmt.Sprintf("node-%d", i)
	n := &Node{Name: name, IP: ip, StateDir: filepath.Join(t.Dir, "nodes", name)}
	if err := os.MkdirAll(n.StateDir, 0o755); err != nil {
		return nil, err
	}
	bits := opts.PodCIDRBits
	if bits == 0 {
		bits = 24
	}
	if bits < 16 || bits > 24 || i<<(24-bits) > 255 {
		return nil, fmt.Errorf("pod CIDR prefix length %d for node %d: want 16..24 and a range inside 10.244.0.0/16", bits, i)
	}
	n.PodCIDRs = []string{fmt.Sprintf("10.244.%d.0/%d", i<<(24-bits), bits)}
	if opts.IPv6 {
		n.PodCIDRs = append(n.PodCIDRs, fmt.Sprintf("fd00:10:244:%x::/64", i))
	}
	if opts.Encap {
		return t.addEncapNode(n, i, opts)
	}
	n.OVS = t.OVS
	n.Bridge = t.OVS.AddBridge(fmt.Sprintf("n%d", i))
	n.UplinkPort = n.Bridge.Name + "-up"
	fabricPort := n.Bridge.Name + "-fab"
	if _, err := t.OVS.Vsctl(
		"add-port", n.Bridge.Name, n.UplinkPort, "--", "set", "Interface", n.UplinkPort, "type=patch", "options:peer="+fabricPort,
		fmt.Sprintf("external_ids:%q=%q", ovsdb.KeyRole, ovsdb.RoleUplink),
		"--", "add-port", t.Fabric.Name, fabricPort, "--", "set", "Interface", fabricPort, "type=patch", "options:peer="+n.UplinkPort,
	); err != nil {
		return nil, err
	}
	if opts.NormalFlows {
		if _, err := n.Bridge.Ofctl("add-flow", "priority=0,actions=NORMAL"); err != nil {
			return nil, err
		}
	}

	var ranges []any
	for _, c := range n.PodCIDRs {
		ranges = append(ranges, []any{map[string]any{"subnet": c}})
	}
	cniConf := map[string]any{
		"cniVersion":   "1.0.0",
		"name":         "tierflow",
		"type":         "tierflow-cni",
		"bridge":       n.Bridge.Name,
		"ovsdbSocket":  t.OVS.DBSocketPath(),
		"defaultRoute": "on-link",
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": filepath.Join(n.StateDir, "ipam"),
			"ranges":  ranges,
		},
	}
	if opts.NormalFlows {
		cniConf["admissionTimeout"] = "0s" // no agent admits the pods
	}
	conf, _ := json.MarshalIndent(cniConf, "", "  ")
	if err := t.startNode(n, conf); err != nil {
		return nil, err
	}
	return n, nil
}

// startNode writes the node's CNI configuration, creates its Node object
// and starts its runtime.
func (t *Testbed) startNode(n *Node, conf []byte) error {
	n.CNIConfig = filepath.Join(n.StateDir, "cni.conf")
	if err := os.WriteFile(n.CNIConfig, conf, 0o644); err != nil {
		return err
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP}}
	if n.IPv6 != "" {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.IPv6})
	}
	if n.ExternalIP != "" {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: n.ExternalIP})
	}
	addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			Labels: map[string]string{NodeLabel: "true", "kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux", "type": "kwok"},
		},
		Spec:   corev1.NodeSpec{PodCIDR: n.PodCIDRs[0], PodCIDRs: n.PodCIDRs},
		Status: corev1.NodeStatus{Addresses: addresses},
	}
	if _, err := t.Cluster.Kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Node: %w", err)
	}

	ips := n.IP
	if n.IPv6 != "" {
		ips += "," + n.IPv6
	}
	args := []string{"node",
		"--kubeconfig=" + t.Cluster.Kubeconfig,
		"--node=" + n.Name,
		"--node-ip=" + ips,
		"--cni-bin-dir=" + t.BinDir,
		"--cni-config=" + n.CNIConfig,
		"--state-dir=" + filepath.Join(n.StateDir, "pods"),
		"--cluster-dns=" + ClusterDNS,
	}
	if n.OVS.Netns() != "" {
		args = append(args, "--node-netns="+n.OVS.Netns())
	}
	p, err := startSupervised(n.StateDir, "noderuntime", filepath.Join(t.BinDir, "tierflow-podrunner"), args...)
	if err != nil {
		return err
	}
	n.runtime = p
	// Runtimes stop before OVS and the API server (cleanups run in reverse
	// order), so their teardown can still run CNI DEL.
	t.tb.Cleanup(func() {
		p.Stop(60 * time.Second)
		// A runtime killed before it finished leaves the pods it still
		// recorded: remove their namespaces and veths here.
		for _, left := range noderuntime.RemoveRecorded(filepath.Join(n.StateDir, "pods")) {
			t.tb.Logf("testbed: node %s: removed %s its runtime left behind", n.Name, left)
		}
	})
	return nil
}

func (t *Testbed) waitNodesReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready := 0
		for _, n := range t.Nodes {
			node, err := t.Cluster.Kube.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == len(t.Nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready after %v", ready, len(t.Nodes), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RuntimeLog returns the tail of a node runtime's log.
func (n *Node) RuntimeLog(lines int) string { return n.runtime.logTail(lines) }

// KwokLog returns the tail of kwok's log.
func (t *Testbed) KwokLog(lines int) string { return t.kwok.logTail(lines) }

// KwokPID is the process ID of the running kwok; kwok and the node
// runtimes are restarted when they exit on their own.
func (t *Testbed) KwokPID() int { return t.kwok.PID() }

// KwokRestarts is how often kwok was restarted.
func (t *Testbed) KwokRestarts() int { return t.kwok.Restarts() }

// ExecResult is the outcome of a command run with kubectl exec.
type ExecResult struct {
	// Stdout and Stderr are the remote command's.
	Stdout, Stderr string
	// KubectlLog holds the lines kubectl logged itself on its stderr
	// (klog format), kept out of Stderr: client-go's exec over websockets
	// now and then logs "Unknown stream id 1, discarding message" when a
	// frame arrives before its stream is set up, which says nothing about
	// the command.
	KubectlLog string
	// ExitCode is the remote command's exit status (kubectl passes it
	// through), -1 if kubectl itself could not run.
	ExitCode int
}

// Exec runs `kubectl exec -n NAMESPACE POD -c FIRST-CONTAINER -- CMD...`
// (naming the container keeps kubectl's "Defaulted container" notice out
// of stderr; every container of a pod shares its network namespace).
func (t *Testbed) Exec(namespace, pod string, cmd ...string) ExecResult {
	p, err := t.Cluster.Kube.CoreV1().Pods(namespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		return ExecResult{ExitCode: -1, Stderr: err.Error()}
	}
	args := append([]string{"--kubeconfig=" + t.Cluster.Kubeconfig, "exec", "-n", namespace, pod, "-c", p.Spec.Containers[0].Name, "--"}, cmd...)
	c := exec.Command(filepath.Join(t.Cluster.BinDir, "kubectl"), args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err = c.Run()
	res := ExecResult{Stdout: stdout.String()}
	res.Stderr, res.KubectlLog = splitKubectlLog(stderr.String())
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
	default:
		res.ExitCode = -1
		res.Stderr += err.Error()
	}
	return res
}

// klogLine matches the header of a line kubectl logs itself (klog:
// severity, date, time, thread, file:line]).
var klogLine = regexp.MustCompile(`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ \S+:\d+\] `)

// splitKubectlLog separates kubectl's own log lines from the remote
// command's stderr, which kubectl writes to the same stream.
func splitKubectlLog(stderr string) (command, kubectl string) {
	var cmd, log strings.Builder
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if klogLine.MatchString(line) {
			log.WriteString(line)
		} else {
			cmd.WriteString(line)
		}
	}
	return cmd.String(), log.String()
}

func addAddresses(dev string, ips []string) error {
	for _, ip := range ips {
		if err := run("ip", "addr", "add", ip+"/32", "dev", dev); err != nil {
			return err
		}
	}
	return run("ip", "link", "set", dev, "up")
}

func writeServingCert(certFile, keyFile string, ips []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kwok"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomByte() (int, error) {
	b := make([]byte, 1)
	if _, err := rand.Read(b); err != nil {
		return 0, err
	}
	return int(b[0]), nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
