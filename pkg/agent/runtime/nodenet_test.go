package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/config/cniinstall"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// simNode is one simulated node of the noEncap test: its own network
// namespace (the node's host stack) with its own ovsdb-server and
// ovs-vswitchd, joined to the other node by a veth pair (the node network).
type simNode struct {
	name     string
	env      *ovsenv.Env
	br       *ovsenv.Bridge
	ip4      netip.Prefix // on the node network
	ip6      netip.Prefix
	podCIDRs []string
	cniConf  []byte
	tokenDir string
}

// noEncapBed is two simulated noEncap nodes (see simNode) on a real
// kube-apiserver, with their Node objects, the agents' RBAC and the
// tierflow-cni binaries; the controller and agents are started by the
// test.
type noEncapBed struct {
	c *livecluster.Cluster
	// kubeconfig authenticates as the agents' service account.
	kubeconfig string
	cniBin     string
	n1, n2     *simNode
}

func newNoEncapBed(t *testing.T) *noEncapBed {
	t.Helper()
	c := livecluster.New(t)
	bed := &noEncapBed{c: c, kubeconfig: agentKubeconfig(t, c), cniBin: buildCNI(t)}
	n1 := &simNode{name: "nn-1", ip4: netip.MustParsePrefix("192.168.77.1/24"), ip6: netip.MustParsePrefix("fd00:77::1/64"),
		podCIDRs: []string{"10.77.1.0/24", "fd00:77:1::/64"}}
	n2 := &simNode{name: "nn-2", ip4: netip.MustParsePrefix("192.168.77.2/24"), ip6: netip.MustParsePrefix("fd00:77::2/64"),
		podCIDRs: []string{"10.77.2.0/24", "fd00:77:2::/64"}}
	bed.n1, bed.n2 = n1, n2
	joinSimNodes(t, c, "tfnn", n1, n2)
	return bed
}

// joinSimNodes gives n1 and n2 their own OVS (each in its own network
// namespace) and bridge, joins the namespaces with a veth pair (named
// linkPrefix plus each env's ID) carrying the nodes' addresses (ip6 only
// when set), and creates their Node objects (pod CIDRs, InternalIPs) and
// tierflow-cni configurations on c, as kube-controller-manager, the
// kubelet and tierflow-install-cni leave them.
func joinSimNodes(t *testing.T, c *livecluster.Cluster, linkPrefix string, n1, n2 *simNode) {
	t.Helper()
	nodes := []*simNode{n1, n2}
	for _, n := range nodes {
		n.env = ovsenv.Start(t, ovsenv.WithOwnNetns())
		n.br = n.env.AddBridge("br")
	}
	l1, l2 := linkPrefix+n1.env.ID, linkPrefix+n2.env.ID
	mustRun(t, "ip", "link", "add", l1, "netns", n1.env.Netns(), "type", "veth", "peer", "name", l2, "netns", n2.env.Netns())
	for _, x := range []struct {
		n    *simNode
		link string
	}{{n1, l1}, {n2, l2}} {
		ns := x.n.env.Netns()
		mustRun(t, "ip", "-n", ns, "addr", "add", x.n.ip4.String(), "dev", x.link)
		if x.n.ip6.IsValid() {
			mustRun(t, "ip", "-n", ns, "addr", "add", x.n.ip6.String(), "dev", x.link, "nodad")
		}
		mustRun(t, "ip", "-n", ns, "link", "set", x.link, "up")
	}
	for _, n := range nodes {
		n.tokenDir = c.AddNode(t, n.name)
		ips := []netip.Addr{n.ip4.Addr()}
		if n.ip6.IsValid() {
			ips = append(ips, n.ip6.Addr())
		}
		c.SetNode(t, n.name, n.podCIDRs, ips...)
		agentCfg := config.DefaultAgent()
		agentCfg.BridgeName = n.br.Name
		agentCfg.OVSDBSocket = n.env.DBSocketPath()
		conf, err := cniinstall.PluginConf(&agentCfg, n.podCIDRs, filepath.Join(c.Dir, n.name+"-ipam"))
		if err != nil {
			t.Fatal(err)
		}
		n.cniConf = conf
	}
}

// attach attaches a pod on n with tierflow-cni and creates its Pod.
func (bed *noEncapBed) attach(t *testing.T, n *simNode, name string, labels map[string]string) *ovsenv.Pod {
	t.Helper()
	return attachPod(t, bed.c, n, bed.cniBin, name, labels)
}

// startAgent runs n's agent in noEncap mode with the given kubeconfig
// (bed.kubeconfig, or one pointing nowhere: the API server unreachable).
func (bed *noEncapBed) startAgent(t *testing.T, n *simNode, zone uint16, kubeconfig string) *livecluster.Agent {
	t.Helper()
	opts := bed.c.AgentOptions(n.env, n.br, n.name, n.tokenDir, zone)
	opts.Config.NodeNetwork.Mode = config.NodeNetworkNoEncap
	opts.Config.Kubeconfig = kubeconfig
	opts.NodeNetNS = n.env.NetnsPath()
	return livecluster.StartAgent(t, n.name, opts)
}

// TestNoEncapTwoNodes runs two nodes the way a real cluster does in noEncap
// mode: pods attached by the real tierflow-cni with the configuration
// tierflow-install-cni writes (default route via the gateway), agents
// watching Node objects with the agent's RBAC from manifests/, kernel
// routes between the nodes. It checks pod-to-pod traffic across nodes
// (TCP and UDP, IPv4 and IPv6), node-to-pod traffic, a NetworkPolicy
// enforced at the destination node (the node's own traffic still passes,
// another node's does not), a gateway port that cannot be created (nothing
// leaves the node until it can), an agent restart (gateway and routes
// unchanged), a Node without pod CIDRs (ignored), and a deleted Node (its
// route goes).
func TestNoEncapTwoNodes(t *testing.T) {
	bed := newNoEncapBed(t)
	c, n1, n2 := bed.c, bed.n1, bed.n2
	ctx := context.Background()

	// A node that has no pod CIDRs yet: the agents route nothing to it.
	if _, err := c.Kube.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nn-unallocated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Node 2's gateway cannot be created at first: a device of its name
	// exists.
	mustRun(t, "ip", "-n", n2.env.Netns(), "link", "add", "tierflow-gw0", "type", "veth", "peer", "name", "tfnn-squatter")

	c.StartController(t)
	start := func(n *simNode, zone uint16) *livecluster.Agent { return bed.startAgent(t, n, zone, bed.kubeconfig) }
	ag1, ag2 := start(n1, 1), start(n2, 2)
	ag1.RealizedOn(t)

	// Pods are admitted by their nodes' agents (node 2's too: it enforces
	// its policies, it only has no gateway yet).
	a := bed.attach(t, n1, "a", map[string]string{"app": "a"})
	b := bed.attach(t, n2, "b", map[string]string{"app": "b"})
	cc := bed.attach(t, n1, "c", map[string]string{"app": "c", "role": "friend"})
	servers := map[*ovsenv.Pod]*ovsenv.Server{}
	for _, p := range []*ovsenv.Pod{a, b, cc} {
		servers[p] = p.ListenTCP(8080)
		p.ListenUDP(5353)
	}
	for _, p := range []*ovsenv.Pod{a, b} {
		if out, err := p.Exec("ip", "route", "show", "default"); err != nil || !strings.Contains(out, "via 10.77.") {
			t.Fatalf("pod %s: default route %q (%v), want via its node's gateway", p.Name, out, err)
		}
	}

	// Node 1 is fully up: gateway and a route to node 2.
	livecluster.Eventually(t, 60*time.Second, "node 1 gateway and routes", func() error {
		return checkNodeNet(n1, []string{"10.77.1.1/24", "fd00:77:1::1/64"},
			[]string{"10.77.2.0/24 via 192.168.77.2", "fd00:77:2::/64 via fd00:77::2"})
	})
	// Node 2 has no gateway: its pod reaches nothing outside the node, and
	// nobody reaches it (fail closed), while node-local traffic works.
	time.Sleep(time.Second)
	if out, _ := exec.Command("ip", "-n", n2.env.Netns(), "-d", "link", "show", "tierflow-gw0").CombinedOutput(); !strings.Contains(string(out), "veth") {
		t.Fatalf("node 2's tierflow-gw0 was replaced: %s", out)
	}
	probe(t, "gateway missing on node 2", []flow{
		{a, b, 8080, "tcp", false},
		{b, a, 8080, "tcp", false},
		{a, cc, 8080, "tcp", true},
	}...)
	// The agent says why (query socket, as tierctl reads it), and it is
	// not ready: it enforces its policies, but its pods reach nothing
	// beyond the node.
	livecluster.Eventually(t, 30*time.Second, "node 2's gateway error in the agent status", func() error {
		st, err := ag2.Q.Status(ctx)
		if err != nil {
			return err
		}
		if st.NodeNetwork == nil || st.NodeNetwork.GatewayPort != 0 || !strings.Contains(st.NodeNetwork.Error, "gateway port tierflow-gw0") {
			return fmt.Errorf("node network status %+v", st.NodeNetwork)
		}
		if st.LastRealization.IsZero() {
			return errors.New("nothing realized yet")
		}
		if st.Ready {
			return errors.New("ready without a gateway")
		}
		return nil
	})
	// The Node without pod CIDRs is reported, not routed.
	if st, err := ag1.Q.Status(ctx); err != nil || st.NodeNetwork == nil || !strings.Contains(st.NodeNetwork.NodeErrors["nn-unallocated"], "no spec.podCIDRs") {
		t.Errorf("node 1 status %+v (%v): want nn-unallocated reported", st, err)
	}
	// Once the device is gone the agent's retry creates the gateway.
	mustRun(t, "ip", "-n", n2.env.Netns(), "link", "delete", "tierflow-gw0")
	livecluster.Eventually(t, 60*time.Second, "node 2 gateway and routes", func() error {
		return checkNodeNet(n2, []string{"10.77.2.1/24", "fd00:77:2::1/64"},
			[]string{"10.77.1.0/24 via 192.168.77.1", "fd00:77:1::/64 via fd00:77::1"})
	})
	ag2.RealizedOn(t)

	all := []flow{
		{a, b, 8080, "tcp", true},
		{a, b, 5353, "udp", true},
		{b, a, 8080, "tcp", true},
		{cc, b, 8080, "tcp", true},
		{a, cc, 8080, "tcp", true},
	}
	probe(t, "no policy", all...)
	t.Log("cross-node traffic works")
	probe(t, "no policy, IPv6", flow{a, b, 8080, "tcp6", true}, flow{b, cc, 5353, "udp6", true})
	// Between nodes pods keep their addresses (policy at the destination
	// sees the real source).
	if peers := servers[a].Peers(); !slices.Contains(peers, b.IPv4()) {
		t.Errorf("a's server saw %v, want b's address %s among them", peers, b.IPv4())
	}
	// Services: the host DNATs (as kube-proxy does) a service address to a
	// pod of the same node (the reply must go back through the host to be
	// un-DNATed, not straight to the client pod) and to a pod of the other
	// node.
	for _, svc := range []struct {
		vip string
		dst *ovsenv.Pod
	}{{"10.96.7.7", cc}, {"10.96.7.8", b}} {
		mustRun(t, "ip", "netns", "exec", n1.env.Netns(), "iptables", "-t", "nat", "-A", "PREROUTING", "-d", svc.vip, "-p", "tcp", "--dport", "80",
			"-j", "DNAT", "--to-destination", svc.dst.IPv4().String()+":8080")
		var err error
		for i := 0; i < 3; i++ {
			if err = a.ProbeTCP(netip.MustParseAddrPort(svc.vip+":80"), 3*time.Second); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("pod a -> service %s (pod %s): %v", svc.vip, svc.dst.Name, err)
		}
	}
	// Beyond the nodes (a network with no route to pod CIDRs) pods'
	// traffic leaves with the node's address.
	outside := outsideNetwork(t, n1)
	if err := a.ProbeTCP(outside.addr, 3*time.Second); err != nil {
		t.Errorf("pod a -> outside %s: %v", outside.addr, err)
	} else if peers := outside.peers(); len(peers) == 0 || peers[len(peers)-1] != netip.MustParseAddr("192.168.78.1") {
		t.Errorf("outside saw %v, want node 1's address 192.168.78.1", peers)
	}
	probeHost(t, "no policy", []hostFlow{
		{n1, a, true}, // the node to its own pod, through the gateway
		{n1, b, true}, // the node to another node's pod, through the route
		{n2, b, true},
	})

	// Ingress policy on b (node 2): only role=friend pods. It is realized
	// on node 2 alone (the span of its applied-to pod) and enforced there.
	createIngressFromPods(t, c, "b-friends", map[string]string{"app": "b"}, map[string]string{"role": "friend"})
	const npRef = "NetworkPolicy/default/b-friends"
	ag2.RealizedOn(t, npRef)
	ag1.RealizedOn(t)
	if err := n2.env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	probe(t, "b isolated", []flow{
		{a, b, 8080, "tcp", false},
		{a, b, 5353, "udp", false},
		{a, b, 8080, "tcp6", false},
		{cc, b, 8080, "tcp", true},
		{b, a, 8080, "tcp", true}, // egress of b is not isolated
	}...)
	probeHost(t, "b isolated", []hostFlow{
		{n2, b, true},  // its own node (kubelet probes) is always allowed
		{n1, b, false}, // another node is not a friend pod
		{n1, a, true},
	})

	// Agent restart: the gateway and the routes are adopted as they are.
	gwBefore, _ := n1.env.Vsctl("get", "Interface", "tierflow-gw0", "ofport")
	ag1.Stop()
	ag1 = start(n1, 1)
	ag1.RealizedOn(t)
	gwAfter, _ := n1.env.Vsctl("get", "Interface", "tierflow-gw0", "ofport")
	if strings.TrimSpace(gwBefore) != strings.TrimSpace(gwAfter) || strings.TrimSpace(gwAfter) == "" {
		t.Fatalf("gateway ofport %q before the restart, %q after", gwBefore, gwAfter)
	}
	if err := checkNodeNet(n1, []string{"10.77.1.1/24", "fd00:77:1::1/64"},
		[]string{"10.77.2.0/24 via 192.168.77.2", "fd00:77:2::/64 via fd00:77::2"}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	probe(t, "after agent restart", []flow{
		{cc, b, 8080, "tcp", true},
		{a, b, 8080, "tcp", false},
		{b, a, 5353, "udp", true},
	}...)

	// Node 2 leaves the cluster: node 1 removes its routes.
	if err := c.Kube.Kube.CoreV1().Nodes().Delete(ctx, n2.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 60*time.Second, "node 1 routes after node 2 left", func() error {
		return checkNodeNet(n1, []string{"10.77.1.1/24", "fd00:77:1::1/64"}, nil)
	})
	// Node 1's kernel has no route left: it answers "network unreachable".
	if err := cc.ProbeTCP(netip.AddrPortFrom(b.IPv4(), 8080), time.Second); !errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, ovsenv.ErrNoReply) {
		t.Errorf("node 2 gone: c -> b: %v, want network unreachable or no reply", err)
	}
	probe(t, "node 2 gone", flow{a, cc, 8080, "tcp", true})
}

// flow is one probe between pods; proto is tcp, udp, tcp6 or udp6.
type flow struct {
	src, dst *ovsenv.Pod
	port     uint16
	proto    string
	allowed  bool
}

func probe(t *testing.T, step string, flows ...flow) {
	t.Helper()
	for _, f := range flows {
		dstIP := f.dst.IPv4()
		if strings.HasSuffix(f.proto, "6") {
			dstIP = f.dst.IPv6()
		}
		dst := netip.AddrPortFrom(dstIP, f.port)
		try := func(timeout time.Duration) error {
			if strings.HasPrefix(f.proto, "udp") {
				return f.src.ProbeUDP(dst, timeout)
			}
			return f.src.ProbeTCP(dst, timeout)
		}
		var err error
		if f.allowed {
			for i := 0; i < 3; i++ {
				if err = try(3 * time.Second); err == nil {
					break
				}
			}
			if err != nil {
				t.Errorf("%s: %s -> %s %s %s: %v, want allowed", step, f.src.Name, f.dst.Name, f.proto, dst, err)
			}
			continue
		}
		if err = try(time.Second); err == nil {
			t.Errorf("%s: %s -> %s %s %s: allowed, want blocked", step, f.src.Name, f.dst.Name, f.proto, dst)
		} else if !errors.Is(err, ovsenv.ErrNoReply) {
			t.Errorf("%s: %s -> %s %s %s: %v, want no reply", step, f.src.Name, f.dst.Name, f.proto, dst, err)
		}
	}
}

// hostFlow is a TCP connection from a node's host stack to a pod.
type hostFlow struct {
	from    *simNode
	dst     *ovsenv.Pod
	allowed bool
}

func probeHost(t *testing.T, step string, flows []hostFlow) {
	t.Helper()
	for _, f := range flows {
		dst := netip.AddrPortFrom(f.dst.IPv4(), 8080)
		var err error
		tries, timeout := 1, time.Second
		if f.allowed {
			tries, timeout = 3, 3*time.Second
		}
		for i := 0; i < tries; i++ {
			if err = inNetNS(f.from.env.NetnsPath(), func() error { return echo(dst, timeout) }); err == nil {
				break
			}
		}
		if f.allowed && err != nil {
			t.Errorf("%s: node %s -> %s %s: %v, want allowed", step, f.from.name, f.dst.Name, dst, err)
		}
		if !f.allowed && err == nil {
			t.Errorf("%s: node %s -> %s %s: allowed, want blocked", step, f.from.name, f.dst.Name, dst)
		}
	}
}

// echo connects, sends a line and waits for the echo server's answer.
func echo(dst netip.AddrPort, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", dst.String(), timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("probe\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "probe") {
		return fmt.Errorf("echo %q", buf[:n])
	}
	return nil
}

// inNetNS runs fn on a thread in the namespace at path. The socket it
// opens stays in that namespace.
func inNetNS(path string, fn func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := vnetns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := vnetns.Set(target); err != nil {
		return err
	}
	defer func() {
		if err := vnetns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
		}
	}()
	return fn()
}

// checkNodeNet compares a node's gateway addresses and the agent's routes
// (proto 0x54) with the expected ones.
func checkNodeNet(n *simNode, addrs, routes []string) error {
	out, err := exec.Command("ip", "-n", n.env.Netns(), "addr", "show", "dev", "tierflow-gw0", "scope", "global").CombinedOutput()
	if err != nil {
		return fmt.Errorf("gateway: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "state UP") && !strings.Contains(string(out), ",UP") {
		return fmt.Errorf("gateway not up: %s", out)
	}
	for _, a := range addrs {
		if !strings.Contains(string(out), "inet "+a) && !strings.Contains(string(out), "inet6 "+a) {
			return fmt.Errorf("gateway lacks %s: %s", a, out)
		}
	}
	var got []string
	for _, fam := range []string{"-4", "-6"} {
		out, err := exec.Command("ip", "-n", n.env.Netns(), fam, "route", "show", "proto", fmt.Sprint(int(nodenet.RouteProtocol))).CombinedOutput()
		if err != nil {
			return fmt.Errorf("routes: %v: %s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[1] == "via" {
				got = append(got, strings.Join(f[:3], " "))
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(routes, ",") {
		return fmt.Errorf("agent routes %q, want %q", got, routes)
	}
	return nil
}

func mustRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// agentKubeconfig applies the agent's RBAC from manifests/tierflow.yaml
// and returns a kubeconfig authenticating as the agent's service account
// (a client certificate with its user name), so the agents run with
// exactly the permissions a cluster gives them.
func agentKubeconfig(t testing.TB, c *livecluster.Cluster) string {
	t.Helper()
	return c.Kube.ServiceAccountKubeconfig(t, livecluster.AgentNamespace, livecluster.AgentSA, "tierflow-agent", c.Dir)
}

// buildCNI builds tierflow-cni and host-local.
func buildCNI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "../../../cmd/tierflow-cni",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tierflow-cni and host-local: %v\n%s", err, out)
	}
	return dir
}

// attachPod does what the kubelet and container runtime do for a new
// pod: the Pod object exists (scheduled, no address yet); tierflow-cni
// ADD attaches a new network namespace in the node's namespace, with the
// pod's namespace, name and UID in CNI_ARGS, and waits for the agent to
// admit the pod; then the pod's status gets its addresses.
func attachPod(t *testing.T, c *livecluster.Cluster, n *simNode, cniBin, name string, labels map[string]string) *ovsenv.Pod {
	t.Helper()
	obj := c.CreatePod(t, name, n.name, labels)
	p, err := cniAdd(t, n, cniBin, name, string(obj.UID))
	if err != nil {
		t.Fatal(err)
	}
	c.SetPodRunning(t, obj, p.Addrs)
	return p
}

// cniAdd runs tierflow-cni ADD for a new namespace of pod name with uid
// in n's network namespace; a failed ADD leaves the namespace to the test
// cleanup.
func cniAdd(t *testing.T, n *simNode, cniBin, name, uid string) (*ovsenv.Pod, error) {
	t.Helper()
	return cniAddArgs(t, n, cniBin, name, uid, "")
}

// cniAddArgs is cniAdd with more CNI_ARGS (";"-separated; host-local
// takes IP=ADDR as the address to allocate).
func cniAddArgs(t *testing.T, n *simNode, cniBin, name, uid, args string) (*ovsenv.Pod, error) {
	t.Helper()
	nsName := podNetnsName(n, name, uid)
	mustRun(t, "ip", "netns", "add", nsName)
	adopted := false
	t.Cleanup(func() {
		if !adopted { // else the Env deletes it
			_ = exec.Command("ip", "netns", "delete", nsName).Run()
		}
	})
	out, err := runCNI(n, cniBin, "ADD", name, uid, args)
	if err != nil {
		return nil, err
	}
	var res struct {
		Interfaces []struct {
			Name    string `json:"name"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tierflow-cni result %s: %v", out, err)
	}
	var hostIf string
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			hostIf = i.Name
		}
	}
	var addrs []netip.Prefix
	for _, ip := range res.IPs {
		addrs = append(addrs, netip.MustParsePrefix(ip.Address))
	}
	p := n.br.AdoptPod(name, nsName, hostIf, addrs...)
	adopted = true
	return p, nil
}

// cniDel runs tierflow-cni DEL for the pod cniAdd attached as name with
// uid (the kubelet's teardown: port and addresses released).
func cniDel(t *testing.T, n *simNode, cniBin, name, uid string) {
	t.Helper()
	if _, err := runCNI(n, cniBin, "DEL", name, uid, ""); err != nil {
		t.Fatal(err)
	}
}

// podNetnsName is the network namespace cniAdd makes for pod name.
func podNetnsName(n *simNode, name, uid string) string {
	return fmt.Sprintf("tfpod-nn-%d-%s-%s-%.8s", os.Getpid(), n.env.ID, name, uid)
}

// runCNI runs tierflow-cni's command for pod name (uid) in n's network
// namespace, as a container runtime does; its stdout is the result.
func runCNI(n *simNode, cniBin, command, name, uid, args string) ([]byte, error) {
	cmd := exec.Command("ip", "netns", "exec", n.env.Netns(), filepath.Join(cniBin, "tierflow-cni"))
	cniArgs := fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", ovsenv.PodNamespace, name, uid)
	if args != "" {
		cniArgs += ";" + args
	}
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID=ctr-"+name+"-"+uid,
		"CNI_NETNS=/run/netns/"+podNetnsName(n, name, uid), "CNI_IFNAME=eth0", "CNI_PATH="+cniBin, "CNI_ARGS="+cniArgs)
	cmd.Stdin = bytes.NewReader(n.cniConf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("tierflow-cni %s %s: %v\n%s%s", command, name, err, out, stderr.String())
	}
	return out, nil
}

// outsideNet is a network beyond node 1 that has no route to the pod CIDRs
// (the internet, the upstream DNS server), with a TCP echo server.
type outsideNet struct {
	netns string
	addr  netip.AddrPort
	mu    sync.Mutex
	seen  []netip.Addr
}

func (o *outsideNet) peers() []netip.Addr {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen)
}

func outsideNetwork(t *testing.T, n *simNode) *outsideNet {
	t.Helper()
	ns := fmt.Sprintf("tfpod-nn-%d-%s-outside", os.Getpid(), n.env.ID)
	mustRun(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	mustRun(t, "ip", "link", "add", "tfnno"+n.env.ID, "netns", n.env.Netns(), "type", "veth", "peer", "name", "eth0", "netns", ns)
	mustRun(t, "ip", "-n", n.env.Netns(), "addr", "add", "192.168.78.1/24", "dev", "tfnno"+n.env.ID)
	mustRun(t, "ip", "-n", n.env.Netns(), "link", "set", "tfnno"+n.env.ID, "up")
	mustRun(t, "ip", "-n", ns, "addr", "add", "192.168.78.2/24", "dev", "eth0")
	mustRun(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	mustRun(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return listenIn(t, ns, "192.168.78.2:9090")
}

// listenIn serves TCP echo at addr in network namespace ns.
func listenIn(t *testing.T, ns, addr string) *outsideNet {
	t.Helper()
	o := &outsideNet{netns: ns, addr: netip.MustParseAddrPort(addr)}
	serveEcho(t, "/run/netns/"+ns, o.addr.String(), func(from netip.Addr) {
		o.mu.Lock()
		o.seen = append(o.seen, from)
		o.mu.Unlock()
	})
	return o
}

// serveEcho runs a TCP echo server on addr in the network namespace at
// netnsPath until the test ends (one line per connection); seen, when
// set, gets every client's address.
func serveEcho(t *testing.T, netnsPath, addr string, seen func(netip.Addr)) {
	t.Helper()
	var ln net.Listener
	if err := inNetNS(netnsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if seen != nil {
				seen(conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.Copy(conn, io.LimitReader(conn, 256))
			}()
		}
	}()
}

// createIngressFromPods creates a NetworkPolicy in the pods' namespace that
// isolates the pods labelled subject for ingress and lets in only pods
// labelled peer. It returns the policy as created.
func createIngressFromPods(t *testing.T, c *livecluster.Cluster, name string, subject, peer map[string]string) *networkingv1.NetworkPolicy {
	t.Helper()
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ovsenv.PodNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: subject},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: peer}}},
			}},
		},
	}
	created, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Create(context.Background(), np, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}
