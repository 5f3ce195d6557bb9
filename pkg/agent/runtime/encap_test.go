package runtime_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/agent/uninstall"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/config/cniinstall"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// routedBed is nodes in different subnets joined only by a router
// namespace: no L2 adjacency between nodes, and the router knows nothing
// of pod CIDRs. It drops (and counts) every forwarded packet with a pod
// address, so pods' packets cross it only encapsulated.
type routedBed struct {
	t      *testing.T
	router string // netns name
	nodes  []*simNode
}

// podNets are the pod CIDR ranges of the routed bed (the router drops
// them).
var podNets = []string{"10.78.0.0/16", "fd00:78::/32"}

func newRoutedBed(t *testing.T) *routedBed {
	t.Helper()
	b := &routedBed{t: t, router: fmt.Sprintf("tfpod-enc-%d-router", os.Getpid())}
	_ = exec.Command("ip", "netns", "delete", b.router).Run()
	mustRun(t, "ip", "netns", "add", b.router)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", b.router).Run() })
	mustRun(t, "ip", "-n", b.router, "link", "set", "lo", "up")
	for _, f := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		mustRun(t, "ip", "netns", "exec", b.router, "sysctl", "-qw", f)
	}
	for _, n := range podNets {
		tool := "iptables"
		if strings.Contains(n, ":") {
			tool = "ip6tables"
		}
		mustRun(t, "ip", "netns", "exec", b.router, tool, "-A", "FORWARD", "-s", n, "-j", "DROP")
		mustRun(t, "ip", "netns", "exec", b.router, tool, "-A", "FORWARD", "-d", n, "-j", "DROP")
	}
	// Counters of what crosses: tunnel packets, and fragments (none may:
	// the pods' MTU leaves room for the encapsulation).
	mustRun(t, "ip", "netns", "exec", b.router, "iptables", "-A", "FORWARD", "-p", "udp", "-m", "multiport", "--dports", "6081,4789", "-m", "comment", "--comment", "tunnel")
	mustRun(t, "ip", "netns", "exec", b.router, "iptables", "-A", "FORWARD", "-f", "-m", "comment", "--comment", "fragments")
	return b
}

// addNode creates node i (its own network namespace, ovsdb-server and
// ovs-vswitchd) on subnet 192.168.9i.0/24 and fd00:9i::/64 behind the
// router, with pod CIDRs 10.78.i.0/24 and fd00:78:i::/64, and its Node
// object. mtu is its link's MTU.
func (b *routedBed) addNode(c *livecluster.Cluster, i, mtu int) *simNode {
	t := b.t
	t.Helper()
	n := &simNode{name: fmt.Sprintf("en-%d", i),
		ip4:      netip.MustParsePrefix(fmt.Sprintf("192.168.9%d.2/24", i)),
		ip6:      netip.MustParsePrefix(fmt.Sprintf("fd00:9%d::2/64", i)),
		podCIDRs: []string{fmt.Sprintf("10.78.%d.0/24", i), fmt.Sprintf("fd00:78:%d::/64", i)}}
	n.env = ovsenv.Start(t, ovsenv.WithOwnNetns())
	n.br = n.env.AddBridge("br")
	link, peer := "tfen"+n.env.ID, fmt.Sprintf("tfer%d%s", i, n.env.ID)
	mustRun(t, "ip", "link", "add", link, "netns", n.env.Netns(), "mtu", strconv.Itoa(mtu), "type", "veth", "peer", "name", peer, "netns", b.router, "mtu", strconv.Itoa(mtu))
	ns := n.env.Netns()
	mustRun(t, "ip", "-n", ns, "addr", "add", n.ip4.String(), "dev", link)
	mustRun(t, "ip", "-n", ns, "addr", "add", n.ip6.String(), "dev", link, "nodad")
	mustRun(t, "ip", "-n", b.router, "addr", "add", fmt.Sprintf("192.168.9%d.1/24", i), "dev", peer)
	mustRun(t, "ip", "-n", b.router, "addr", "add", fmt.Sprintf("fd00:9%d::1/64", i), "dev", peer, "nodad")
	for _, x := range []struct{ ns, dev string }{{ns, link}, {b.router, peer}} {
		mustRun(t, "ip", "-n", x.ns, "link", "set", x.dev, "up")
		// The userspace datapath reads and writes the node's link: its
		// conntrack needs full checksums (see ovsenv).
		mustRun(t, "ip", "netns", "exec", x.ns, "ethtool", "-K", x.dev, "tx", "off")
	}
	mustRun(t, "ip", "-n", ns, "route", "add", "default", "via", fmt.Sprintf("192.168.9%d.1", i))
	mustRun(t, "ip", "-n", ns, "-6", "route", "add", "default", "via", fmt.Sprintf("fd00:9%d::1", i))
	n.tokenDir = c.AddNode(t, n.name)
	c.SetNode(t, n.name, n.podCIDRs, n.ip4.Addr(), n.ip6.Addr())
	b.nodes = append(b.nodes, n)
	return n
}

// encapConfig is node n's agent configuration in mode (and tunnelType).
func encapConfig(c *livecluster.Cluster, n *simNode, kubeconfig string, zone uint16, mode, tunnelType string) runtime.Options {
	opts := c.AgentOptions(n.env, n.br, n.name, n.tokenDir, zone)
	opts.Config.NodeNetwork.Mode = mode
	opts.Config.NodeNetwork.TunnelType = tunnelType
	opts.Config.Kubeconfig = kubeconfig
	opts.NodeNetNS = n.env.NetnsPath()
	// As if each stop were a crash: the tests stop agents but not their
	// node's OVS, and check what the next agent finds (a test that wants
	// the stopping agent's revert turns this off).
	opts.KeepUnderlay = true
	return opts
}

// cniConfig writes node n's CNI configuration as tierflow-install-cni
// does on an encap node: the pod MTU derived from the node's link.
func cniConfig(t *testing.T, c *livecluster.Cluster, n *simNode) int {
	t.Helper()
	cfg := config.DefaultAgent()
	cfg.BridgeName, cfg.OVSDBSocket = n.br.Name, n.env.DBSocketPath()
	cfg.DatapathType = config.DatapathNetdev
	cfg.NodeNetwork.Mode = config.NodeNetworkEncap
	local, err := nodenet.GetNode(context.Background(), c.Kube.Kube, n.name)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CNI.MTU, err = nodenet.PodMTU(&cfg, local, n.env.NetnsPath()); err != nil {
		t.Fatal(err)
	}
	if n.cniConf, err = cniinstall.PluginConf(&cfg, n.podCIDRs, filepath.Join(c.Dir, n.name+"-ipam")); err != nil {
		t.Fatal(err)
	}
	return cfg.CNI.MTU
}

// routerCounter reads the packet count of the router's FORWARD rule
// commented what.
func (b *routedBed) routerCounter(what string) int {
	b.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", b.router, "iptables", "-L", "FORWARD", "-v", "-x", "-n").CombinedOutput()
	if err != nil {
		b.t.Fatalf("router counters: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "/* "+what+" */") {
			if n, err := strconv.Atoi(strings.Fields(line)[0]); err == nil {
				return n
			}
		}
	}
	b.t.Fatalf("router counters: no rule %q in\n%s", what, out)
	return 0
}

// TestEncapTwoNodes runs nodes in different subnets joined only by a
// router (which drops every packet with a pod address) the way a real
// cluster runs them in encap mode, on the userspace datapath: agents
// watching Nodes with the agent's RBAC, pods attached by tierflow-cni with
// the configuration (and MTU) tierflow-install-cni writes. noEncap cannot
// reach the other node's pods there; encap (Geneve, then VXLAN) carries
// TCP and UDP over IPv4 and IPv6 between pods, node-to-pod traffic,
// Service DNAT by the host to a pod of the other node, a NodePort reached
// from outside backed by the other node's pod, and the way out of the
// cluster; ingress policy is enforced on the destination node; 10 MB
// cross with DF set; a packet from the underlay claiming a pod's address
// is dropped; ovs-vswitchd restarting on a node, its underlay bridge's
// interface losing the node's address, and agent restarts are survived; a
// third node joins and leaves without restarting the other agents and
// leaves no flow, route or neighbour behind; the uninstall's cleanup
// gives a node whose agent crashed its address back.
func TestEncapTwoNodes(t *testing.T) {
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	cniBin := buildCNI(t)
	tierctl := buildTierctl(t)
	// Created early: RBAC takes a moment to see new bindings.
	queryKubeconfig, _ := c.QueryUser(t, "viewer", true)
	ctx := context.Background()

	bed := newRoutedBed(t)
	n1, n2 := bed.addNode(c, 1, 1500), bed.addNode(c, 2, 1500)
	for _, n := range []*simNode{n1, n2} {
		if mtu := cniConfig(t, c, n); mtu != 1450 {
			t.Fatalf("node %s: pod MTU %d, want 1450 (1500 minus Geneve over IPv4)", n.name, mtu)
		}
	}
	c.StartController(t)

	// noEncap on this bed: the kernel refuses routes to the other node's
	// pods via its InternalIP (not on a connected network).
	start := func(n *simNode, zone uint16, mode, tunnel string) *livecluster.Agent {
		return livecluster.StartAgent(t, n.name, encapConfig(c, n, kubeconfig, zone, mode, tunnel))
	}
	ag1, ag2 := start(n1, 1, config.NodeNetworkNoEncap, config.TunnelGeneve), start(n2, 2, config.NodeNetworkNoEncap, config.TunnelGeneve)
	ag1.RealizedOn(t)
	ag2.RealizedOn(t)
	// Pods attach once their node's agent runs: tierflow-cni ADD waits
	// for the agent to admit the pod.
	a := attachPod(t, c, n1, cniBin, "a", map[string]string{"app": "a"})
	b := attachPod(t, c, n2, cniBin, "b", map[string]string{"app": "b"})
	cc := attachPod(t, c, n1, cniBin, "c", map[string]string{"app": "c", "role": "friend"})
	servers := map[*ovsenv.Pod]*ovsenv.Server{}
	for _, p := range []*ovsenv.Pod{a, b, cc} {
		servers[p] = p.ListenTCP(8080)
		p.ListenUDP(5353)
		if out, err := p.Exec("cat", "/sys/class/net/eth0/mtu"); err != nil || strings.TrimSpace(out) != "1450" {
			t.Fatalf("pod %s: MTU %q (%v), want 1450", p.Name, out, err)
		}
	}
	livecluster.Eventually(t, 60*time.Second, "noEncap: node 1 reports node 2 unroutable", func() error {
		st, err := ag1.Q.Status(ctx)
		if err != nil {
			return err
		}
		if st.NodeNetwork == nil || st.NodeNetwork.GatewayPort == 0 || !strings.Contains(st.NodeNetwork.Error, "network is unreachable") {
			return fmt.Errorf("node network status %+v", st.NodeNetwork)
		}
		return nil
	})
	probe(t, "noEncap between subnets", []flow{
		{a, b, 8080, "tcp", false},
		{b, a, 5353, "udp", false},
		{a, cc, 8080, "tcp", true},
	}...)
	ag1.Stop()
	ag2.Stop()

	// encap (Geneve).
	ag1, ag2 = start(n1, 1, config.NodeNetworkEncap, config.TunnelGeneve), start(n2, 2, config.NodeNetworkEncap, config.TunnelGeneve)
	ag1.RealizedOn(t)
	ag2.RealizedOn(t)
	waitTunnel(t, ag1, "en-2 192.168.92.2 10.78.2.0/24 fd00:78:2::/64")
	waitTunnel(t, ag2, "en-1 192.168.91.2 10.78.1.0/24 fd00:78:1::/64")
	// The underlay: the node's address and link moved onto the netdev
	// bridge, which ovs-vswitchd routes tunnel packets through. The host
	// routes the other node's pod CIDRs to its gateway address through
	// the local gateway.
	for _, n := range []*simNode{n1, n2} {
		checkUnderlay(t, n)
	}
	if out, err := exec.Command("ip", "-n", n1.env.Netns(), "route", "show", "proto", "0x54").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "10.78.2.0/24 via 10.78.2.1 dev tierflow-gw0 onlink") {
		t.Fatalf("node 1's routes: %s (%v)", out, err)
	}
	tunnelsBefore := bed.routerCounter("tunnel")
	all := []flow{
		{a, b, 8080, "tcp", true},
		{a, b, 5353, "udp", true},
		{b, a, 8080, "tcp", true},
		{b, cc, 5353, "udp", true},
		{cc, b, 8080, "tcp", true},
		{a, cc, 8080, "tcp", true},
	}
	probe(t, "encap", all...)
	probe(t, "encap, IPv6", flow{a, b, 8080, "tcp6", true}, flow{b, cc, 5353, "udp6", true}, flow{b, a, 8080, "tcp6", true})
	if got := bed.routerCounter("tunnel"); got <= tunnelsBefore {
		t.Errorf("the router forwarded %d tunnel packets during the probes, want more than before (%d)", got, tunnelsBefore)
	}
	// Between nodes pods keep their addresses (policy at the destination
	// sees the real source).
	if peers := servers[b].Peers(); !slices.Contains(peers, a.IPv4()) {
		t.Errorf("b's server saw %v, want a's address %s among them", peers, a.IPv4())
	}
	// Node to pod: its own and the other node's (through the gateway and
	// the tunnel).
	probeHost(t, "encap", []hostFlow{{n1, a, true}, {n1, b, true}, {n2, a, true}})
	// A Service DNATed by node 1's host (as kube-proxy does) to node 2's
	// pod: the reply comes back through the tunnel and the host undoes
	// the DNAT.
	mustRun(t, "ip", "netns", "exec", n1.env.Netns(), "iptables", "-t", "nat", "-A", "PREROUTING", "-d", "10.96.7.8", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", b.IPv4().String()+":8080")
	if err := retry(3, func() error { return a.ProbeTCP(netip.MustParseAddrPort("10.96.7.8:80"), 3*time.Second) }); err != nil {
		t.Errorf("pod a -> service 10.96.7.8 (pod b on node 2): %v", err)
	}
	// A NodePort of node 1 reached from outside the cluster (the router),
	// backed by node 2's pod, as kube-proxy sets it up: marked for
	// masquerading and DNATed. The agent's nat chain SNATs it to node 1's
	// InternalIP; node 2 accepts that source from node 1's endpoint and
	// sends b's replies back through the tunnel, where node 1 undoes both
	// translations.
	for _, rule := range [][]string{
		{"-j", "MARK", "--set-xmark", "0x4000/0x4000"},
		{"-j", "DNAT", "--to-destination", b.IPv4().String() + ":8080"},
	} {
		mustRun(t, append([]string{"ip", "netns", "exec", n1.env.Netns(), "iptables", "-t", "nat", "-A", "PREROUTING", "-d", n1.ip4.Addr().String(), "-p", "tcp", "--dport", "30080"}, rule...)...)
	}
	nodePort := netip.AddrPortFrom(n1.ip4.Addr(), 30080)
	if err := retry(3, func() error {
		return inNetNS("/run/netns/"+bed.router, func() error { return echo(nodePort, 3*time.Second) })
	}); err != nil {
		t.Errorf("the router -> node 1's NodePort %s (pod b on node 2): %v", nodePort, err)
	} else if peers := servers[b].Peers(); !slices.Contains(peers, n1.ip4.Addr()) {
		t.Errorf("b's server saw %v, want node 1's InternalIP %s among them", peers, n1.ip4.Addr())
	}
	// Out of the cluster (the router's own address): masqueraded to the
	// node's address.
	out := listenIn(t, bed.router, "192.168.92.1:9090")
	if err := retry(3, func() error { return a.ProbeTCP(netip.MustParseAddrPort("192.168.92.1:9090"), 3*time.Second) }); err != nil {
		t.Errorf("pod a -> outside 192.168.92.1:9090: %v", err)
	} else if peers := out.peers(); len(peers) == 0 || peers[len(peers)-1] != n1.ip4.Addr() {
		t.Errorf("outside saw %v, want node 1's address %s", peers, n1.ip4.Addr())
	}

	// 10 MB from a to b with DF set on every packet: the pods' MTU leaves
	// room for the encapsulation, so nothing is fragmented or lost.
	fragsBefore := bed.routerCounter("fragments")
	if err := transferDF(a, b, 10<<20); err != nil {
		t.Fatalf("10 MB a -> b with DF: %v", err)
	}
	if frags := bed.routerCounter("fragments"); frags != fragsBefore {
		t.Errorf("the router forwarded %d fragments during the transfer", frags-fragsBefore)
	}

	// Ingress policy on b (node 2): only role=friend pods.
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "b-friends", Namespace: ovsenv.PodNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "friend"}}}},
			}},
		},
	}
	if _, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ag2.RealizedOn(t, "NetworkPolicy/default/b-friends")
	if err := n2.env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	probe(t, "b isolated", []flow{
		{a, b, 8080, "tcp", false},
		{a, b, 5353, "udp", false},
		{a, b, 8080, "tcp6", false},
		{cc, b, 8080, "tcp", true},
		{cc, b, 8080, "tcp6", true},
		{b, a, 8080, "tcp", true},
	}...)
	probeHost(t, "b isolated", []hostFlow{{n2, b, true}, {n1, b, false}, {n1, a, true}})
	// tierctl trace follows the packet through the tunnel and names the
	// deciding rule on each side: node 1's egress lets it into the
	// tunnel, node 2's ingress (traced from its tunnel port with the
	// packet's outer addresses) decides.
	for _, tc := range []struct {
		src, verdict, decision string
	}{
		{"default/a", "Deny", "en-2 IngressIsolation Deny (isolation)"},
		{"default/c", "Allow", "en-2 IngressNetworkPolicy Allow NetworkPolicy/default/b-friends"},
	} {
		res := traceVia(t, tierctl, queryKubeconfig, c, tc.src, "default/b", "TCP/8080")
		var decisions []string
		for _, d := range res.Decisions {
			decisions = append(decisions, strings.TrimSpace(d.Node+" "+d.Table+" "+d.Action+" "+d.Rule))
		}
		if res.Verdict != tc.verdict || len(res.Traces) != 2 || !slices.ContainsFunc(decisions, func(d string) bool { return strings.HasPrefix(d, tc.decision) }) {
			t.Errorf("tierctl trace %s -> default/b: verdict %s, decisions %q, %d traces; want %s with %q", tc.src, res.Verdict, decisions, len(res.Traces), tc.verdict, tc.decision)
			continue
		}
		if first := res.Traces[0]; first.Node != "en-1" || first.Verdict != "Allow" {
			t.Errorf("tierctl trace %s -> default/b: node 1's trace %s %s, want Allow on en-1", tc.src, first.Node, first.Verdict)
		}
		if second := res.Traces[1]; second.Node != "en-2" || !strings.HasPrefix(second.Flow, fmt.Sprintf("tun_src=192.168.91.2,tun_dst=192.168.92.2,in_port=%d,", ofport(t, n2, nodenet.TunnelPortName))) {
			t.Errorf("tierctl trace %s -> default/b: node 2's trace on %s of %q, want from the tunnel", tc.src, second.Node, second.Flow)
		}
	}

	// The tunnel accepts only known nodes' endpoints, each for its own
	// pod CIDRs: traced on node 2 as packets arriving through the tunnel.
	tun2 := ofport(t, n2, nodenet.TunnelPortName)
	for _, tc := range []struct {
		what, spec string
		drop       bool
	}{
		{"c from node 1", fmt.Sprintf("tun_src=192.168.91.2,tun_dst=192.168.92.2,in_port=%d,tcp,nw_src=%s,nw_dst=%s,tp_dst=8080", tun2, cc.IPv4(), b.IPv4()), false},
		{"c's address from the router", fmt.Sprintf("tun_src=192.168.92.1,tun_dst=192.168.92.2,in_port=%d,tcp,nw_src=%s,nw_dst=%s,tp_dst=8080", tun2, cc.IPv4(), b.IPv4()), true},
		{"node 2's own pod CIDR from node 1", fmt.Sprintf("tun_src=192.168.91.2,tun_dst=192.168.92.2,in_port=%d,tcp,nw_src=10.78.2.77,nw_dst=%s,tp_dst=8080", tun2, b.IPv4()), true},
		{"node 1 relaying to node 2's gateway... to another node's pod", fmt.Sprintf("tun_src=192.168.91.2,tun_dst=192.168.92.2,in_port=%d,tcp,nw_src=%s,nw_dst=10.78.1.9,tp_dst=8080", tun2, cc.IPv4()), true},
	} {
		tr, err := n2.br.Trace(tc.spec + fmt.Sprintf(",dl_src=%s,dl_dst=02:00:00:00:00:01", cc.MAC))
		if err != nil {
			t.Fatal(err)
		}
		last := lastDatapathActions(tr)
		if dropped := last == "drop"; dropped != tc.drop {
			t.Errorf("trace %s: datapath actions %q, want drop %v\n%s", tc.what, last, tc.drop, tr)
		}
	}

	// ovs-vswitchd restarts on node 1: the bridges come back without
	// flows (the userspace datapath lives in the process); the agent
	// replays them and resyncs the node network.
	if err := n1.env.RestartVswitchd(); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 60*time.Second, "node 1's underlay after ovs-vswitchd restarted", func() error { return underlayErr(n1) })
	ag1.RealizedOn(t)
	probe(t, "after ovs-vswitchd restarted on node 1", flow{cc, b, 8080, "tcp", true}, flow{b, a, 5353, "udp", true}, flow{a, b, 8080, "tcp", false})
	// The underlay bridge's interface loses the node's address and routes
	// while the agent is down (as when ovs-vswitchd stops with exit
	// --cleanup and comes back): the agent puts them back at start, from
	// the bridge's record, before it needs the API server (which a real
	// node reaches only through that address).
	ag1.Stop()
	mustRun(t, "ip", "-n", n1.env.Netns(), "addr", "flush", "dev", "tierflow-phy0")
	if err := underlayErr(n1); err == nil {
		t.Fatal("node 1's underlay still holds its address: the check below tests nothing")
	}
	ag1 = start(n1, 1, config.NodeNetworkEncap, config.TunnelGeneve)
	livecluster.Eventually(t, 60*time.Second, "node 1's underlay restored by the restarted agent", func() error { return underlayErr(n1) })
	ag1.RealizedOn(t)
	probe(t, "after node 1's underlay was restored", flow{cc, b, 8080, "tcp", true}, flow{b, a, 5353, "udp", true}, flow{a, b, 8080, "tcp", false})

	// VXLAN instead of Geneve: restarted agents adopt the underlay and
	// the gateway, and change the tunnel port's type.
	ag1.Stop()
	ag2.Stop()
	// Node 1's agent stops as a real one does (below: it moves the node's
	// address back).
	opts1 := encapConfig(c, n1, kubeconfig, 1, config.NodeNetworkEncap, config.TunnelVXLAN)
	opts1.KeepUnderlay = false
	ag1, ag2 = livecluster.StartAgent(t, n1.name, opts1), start(n2, 2, config.NodeNetworkEncap, config.TunnelVXLAN)
	ag1.RealizedOn(t)
	ag2.RealizedOn(t, "NetworkPolicy/default/b-friends")
	livecluster.Eventually(t, 60*time.Second, "vxlan tunnel port", func() error {
		for _, n := range []*simNode{n1, n2} {
			out, err := n.env.Vsctl("get", "Interface", nodenet.TunnelPortName, "type")
			if err != nil || strings.TrimSpace(out) != "vxlan" {
				return fmt.Errorf("node %s: tunnel type %q (%v)", n.name, out, err)
			}
		}
		return nil
	})
	if err := n2.env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	probe(t, "vxlan", []flow{
		{cc, b, 8080, "tcp", true},
		{cc, b, 5353, "udp6", true},
		{b, a, 8080, "tcp", true},
		{b, a, 5353, "udp6", true},
		{a, b, 8080, "tcp", false},
	}...)
	if err := transferDF(b, a, 10<<20); err != nil {
		t.Fatalf("vxlan: 10 MB b -> a with DF: %v", err)
	}
	// VXLAN packets from the underlay (the router, no node) with a
	// source in node 1's pod CIDR reach node 2's tunnel port, and node 2
	// drops them: b never sees them.
	rxBefore := tunnelRx(t, n2)
	spoofVXLAN(t, bed.router, "192.168.92.1", "192.168.92.2", b, 5353)
	if rx := tunnelRx(t, n2); rx <= rxBefore {
		t.Errorf("node 2's pipeline got %d packets from the tunnel during the spoof, want some: the spoof tested nothing", rx-rxBefore)
	}
	if peers := servers[b].Peers(); slices.Contains(peers, netip.MustParseAddr(spoofedSource)) {
		t.Errorf("b's server received the spoofed packets: %v", peers)
	}

	// A third node joins: the running agents tunnel to it at once.
	n3 := bed.addNode(c, 3, 1500)
	cniConfig(t, c, n3)
	ag3 := start(n3, 3, config.NodeNetworkEncap, config.TunnelVXLAN)
	ag3.RealizedOn(t)
	d := attachPod(t, c, n3, cniBin, "d", map[string]string{"app": "d", "role": "friend"})
	d.ListenTCP(8080)
	waitTunnel(t, ag1, "en-2 192.168.92.2 10.78.2.0/24 fd00:78:2::/64", "en-3 192.168.93.2 10.78.3.0/24 fd00:78:3::/64")
	waitTunnel(t, ag2, "en-1 192.168.91.2 10.78.1.0/24 fd00:78:1::/64", "en-3 192.168.93.2 10.78.3.0/24 fd00:78:3::/64")
	for _, n := range []*simNode{n1, n2} {
		if err := n.env.WaitRevalidated(); err != nil {
			t.Fatal(err)
		}
	}
	probe(t, "node 3 joined", []flow{
		{a, d, 8080, "tcp", true},
		{d, b, 8080, "tcp", true}, // a friend
		{d, a, 5353, "udp6", true},
	}...)

	// It leaves: its Node goes (and its pod, as the pod garbage
	// collector deletes pods of deleted nodes), the others forget it.
	ag3.Stop()
	if err := c.Kube.Kube.CoreV1().Nodes().Delete(ctx, n3.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	force := int64(0) // as the pod garbage collector: no kubelet confirms
	if err := c.Kube.Kube.CoreV1().Pods(ovsenv.PodNamespace).Delete(ctx, d.Name, metav1.DeleteOptions{GracePeriodSeconds: &force}); err != nil {
		t.Fatal(err)
	}
	waitTunnel(t, ag1, "en-2 192.168.92.2 10.78.2.0/24 fd00:78:2::/64")
	waitTunnel(t, ag2, "en-1 192.168.91.2 10.78.1.0/24 fd00:78:1::/64")
	for _, n := range []*simNode{n1, n2} {
		ag := map[*simNode]*livecluster.Agent{n1: ag1, n2: ag2}[n]
		livecluster.Eventually(t, 30*time.Second, "node "+n.name+" forgets node 3", func() error {
			flows, err := n.br.DumpFlows(-1)
			if err != nil {
				return err
			}
			for _, f := range flows {
				if strings.Contains(f, "192.168.93.2") || strings.Contains(f, "10.78.3.") || strings.Contains(f, "fd00:78:3:") {
					return fmt.Errorf("stale flow %s", f)
				}
			}
			for _, cmd := range [][]string{{"-4", "route", "show", "proto", "0x54"}, {"-6", "route", "show", "proto", "0x54"}, {"neigh", "show", "dev", "tierflow-gw0"}} {
				out, err := exec.Command("ip", append([]string{"-n", n.env.Netns()}, cmd...)...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				if strings.Contains(string(out), "10.78.3.") || strings.Contains(string(out), "fd00:78:3:") {
					return fmt.Errorf("stale: %s", out)
				}
			}
			st, err := ag.Q.Status(ctx)
			if err != nil {
				return err
			}
			if len(st.NodeNetwork.Routes) != 2 {
				return fmt.Errorf("routes %v", st.NodeNetwork.Routes)
			}
			return nil
		})
	}
	probe(t, "node 3 gone", flow{cc, b, 8080, "tcp", true}, flow{b, a, 8080, "tcp6", true})

	// Node 3's agent stopped as if it crashed (KeepUnderlay): the node's
	// address is still on its underlay bridge. The uninstall's cleanup
	// (tierflow-agent cleanup, once OVS has stopped as the DaemonSet's ovs
	// container stops) moves it back: node 3 reaches the router again.
	if err := underlayErr(n3); err != nil {
		t.Fatalf("node 3 after its agent stopped: %v", err)
	}
	cleanupCfg := *ag3.Opts.Config
	cleanupCfg.CNI.ConfDir, cleanupCfg.CNI.BinDir = t.TempDir(), t.TempDir()
	removed := uninstallNode(t, n3, &cleanupCfg)
	if want := "the node's addresses and routes moved back from tierflow-phy0 to tfen" + n3.env.ID; !slices.Contains(removed, want) {
		t.Errorf("the cleanup on node 3 removed %q, want %q among them", removed, want)
	}
	if err := linkBackErr(n3); err != nil {
		t.Errorf("node 3 after the cleanup: %v", err)
	}
	if out, err := exec.Command("ip", "-n", n3.env.Netns(), "link", "show", "tierflow-phy0").CombinedOutput(); err == nil {
		t.Errorf("node 3 after the cleanup still has tierflow-phy0: %s", out)
	}
	if err := inNetNS(n3.env.NetnsPath(), func() error { return echo(netip.MustParseAddrPort("192.168.92.1:9090"), 3*time.Second) }); err != nil {
		t.Errorf("node 3 -> the router after the cleanup: %v", err)
	}

	// Node 1's agent stops (as when its pod is deleted, at an uninstall or
	// an update): it moves the node's address back from the underlay
	// bridge and deletes it. Node 2's agent "crashed" (kept it): its next
	// agent, in noEncap mode, moves it back at start. The nodes reach
	// each other through the router again, their pods do not.
	ag1.Stop()
	revertedErr := func(n *simNode) error {
		if err := linkBackErr(n); err != nil {
			return err
		}
		if out, err := n.env.Vsctl("list-br"); err != nil || strings.Contains(out, "tierflow-phy0") {
			return fmt.Errorf("node %s: bridges %q (%v) after the revert, want no tierflow-phy0", n.name, out, err)
		}
		return nil
	}
	if err := revertedErr(n1); err != nil {
		t.Errorf("node 1's agent stopped: %v", err)
	}
	if err := underlayErr(n2); err != nil {
		t.Fatalf("node 2 before its agent stops: %v", err)
	}
	ag2.Stop()
	if err := underlayErr(n2); err != nil {
		t.Fatalf("node 2's agent kept the underlay at stop: %v", err)
	}
	ag1, ag2 = start(n1, 1, config.NodeNetworkNoEncap, config.TunnelGeneve), start(n2, 2, config.NodeNetworkNoEncap, config.TunnelGeneve)
	ag1.RealizedOn(t)
	ag2.RealizedOn(t, "NetworkPolicy/default/b-friends")
	for _, n := range []*simNode{n1, n2} {
		if err := revertedErr(n); err != nil {
			t.Error(err)
		}
	}
	if err := inNetNS(n1.env.NetnsPath(), func() error { return echo(netip.MustParseAddrPort("192.168.92.1:9090"), 3*time.Second) }); err != nil {
		t.Errorf("node 1 -> the router's far side after the revert: %v", err)
	}
	probe(t, "noEncap again", flow{cc, b, 8080, "tcp", false})
}

// TestEncapIPv6Underlay: nodes whose InternalIPs are IPv6 only tunnel
// over IPv6 (tun_ipv6_dst and tun_ipv6_src in the flows; 70 bytes of
// overhead, so the pods' MTU is 1430), carrying the pods' IPv4 and IPv6
// traffic, 10 MB with DF included.
func TestEncapIPv6Underlay(t *testing.T) {
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	cniBin := buildCNI(t)
	bed := newRoutedBed(t)
	n1, n2 := bed.addNode(c, 1, 1500), bed.addNode(c, 2, 1500)
	for _, n := range []*simNode{n1, n2} {
		c.SetNode(t, n.name, n.podCIDRs, n.ip6.Addr())
		if mtu := cniConfig(t, c, n); mtu != 1430 {
			t.Fatalf("node %s: pod MTU %d, want 1430 (1500 minus Geneve over IPv6)", n.name, mtu)
		}
	}
	c.StartController(t)
	ag1 := livecluster.StartAgent(t, n1.name, encapConfig(c, n1, kubeconfig, 1, config.NodeNetworkEncap, config.TunnelGeneve))
	ag2 := livecluster.StartAgent(t, n2.name, encapConfig(c, n2, kubeconfig, 2, config.NodeNetworkEncap, config.TunnelGeneve))
	ag1.RealizedOn(t)
	ag2.RealizedOn(t)
	a := attachPod(t, c, n1, cniBin, "a", map[string]string{"app": "a"})
	b := attachPod(t, c, n2, cniBin, "b", map[string]string{"app": "b"})
	for _, p := range []*ovsenv.Pod{a, b} {
		p.ListenTCP(8080)
		p.ListenUDP(5353)
	}
	waitTunnel(t, ag1, "en-2 fd00:92::2 10.78.2.0/24 fd00:78:2::/64")
	waitTunnel(t, ag2, "en-1 fd00:91::2 10.78.1.0/24 fd00:78:1::/64")
	flows, err := n1.br.DumpFlows(-1)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"set_field:fd00:92::2->tun_ipv6_dst", "tun_ipv6_src=fd00:92::2"} {
		if !slices.ContainsFunc(flows, func(f string) bool { return strings.Contains(f, want) }) {
			t.Errorf("node 1 has no flow with %s", want)
		}
	}
	probe(t, "IPv6 underlay", []flow{
		{a, b, 8080, "tcp", true},
		{a, b, 5353, "udp", true},
		{b, a, 8080, "tcp6", true},
		{b, a, 5353, "udp6", true},
	}...)
	if err := transferDF(a, b, 10<<20); err != nil {
		t.Fatalf("10 MB a -> b with DF over an IPv6 underlay: %v", err)
	}
}

// TestEncapRefusesBadConfiguration: an unknown tunnel type, and a pod MTU
// that leaves no room for the encapsulation or falls below IPv6's
// minimum, stop the agent at start with the reason, before it creates
// anything: no bridge, no tunnel, no gateway, the node's address where it
// was.
func TestEncapRefusesBadConfiguration(t *testing.T) {
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	bed := newRoutedBed(t)
	// A link of MTU 1320: 1270 left under Geneve over IPv4, below the
	// 1280 an IPv6 pod CIDR needs.
	n := bed.addNode(c, 1, 1320)

	opts := encapConfig(c, n, kubeconfig, 1, config.NodeNetworkEncap, "gre")
	if _, err := runtime.New(opts); err == nil || !strings.Contains(err.Error(), `invalid nodeNetwork.tunnelType "gre"`) {
		t.Errorf("tunnel type gre: %v, want the invalid tunnelType error", err)
	}
	for _, tc := range []struct {
		mtu  int
		want string
	}{
		{0, "encap: pod MTU 1270 (tfen" + n.env.ID + "'s MTU 1320 minus 50 bytes of geneve over IPv4) is below 1280, the minimum for the IPv6 pod CIDR fd00:78:1::/64"},
		{1300, "encap: cni.mtu 1300 does not fit the underlay"},
	} {
		opts := encapConfig(c, n, kubeconfig, 1, config.NodeNetworkEncap, config.TunnelGeneve)
		opts.Config.CNI.MTU = tc.mtu
		a, err := runtime.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = a.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cni.mtu %d: Run: %v, want %q", tc.mtu, err, tc.want)
		}
		if a.Ready() {
			t.Errorf("cni.mtu %d: the agent reports ready", tc.mtu)
		}
	}
	// Nothing was created or moved.
	if out, err := n.env.Vsctl("list-br"); err != nil || strings.TrimSpace(out) != n.br.Name {
		t.Errorf("bridges %q (%v), want only the test's %s", out, err, n.br.Name)
	}
	if out, err := n.env.Vsctl("list-ports", n.br.Name); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("ports %q (%v), want none", out, err)
	}
	if out, err := exec.Command("ip", "-n", n.env.Netns(), "-4", "addr", "show", "dev", "tfen"+n.env.ID).CombinedOutput(); err != nil || !strings.Contains(string(out), n.ip4.String()) {
		t.Errorf("the node's link lost its address: %s %v", out, err)
	}
	// tierflow-install-cni refuses the same.
	cfg := config.DefaultAgent()
	cfg.NodeNetwork.Mode = config.NodeNetworkEncap
	local, err := nodenet.GetNode(context.Background(), c.Kube.Kube, n.name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodenet.PodMTU(&cfg, local, n.env.NetnsPath()); err == nil || !strings.Contains(err.Error(), "below 1280") {
		t.Errorf("PodMTU: %v, want the IPv6 minimum error", err)
	}
}

// buildTierctl builds tierctl.
func buildTierctl(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/", "../../../cmd/tierctl").CombinedOutput(); err != nil {
		t.Fatalf("building tierctl: %v\n%s", err, out)
	}
	return filepath.Join(dir, "tierctl")
}

// traceResult is what the test reads of tierctl trace -o json.
type traceResult struct {
	Verdict   string
	Decisions []struct{ Node, Table, Rule, Action string }
	Traces    []struct{ Node, Flow, Verdict string }
}

// traceVia runs tierctl trace through the controller (each agent traces
// its own node's ovs-vswitchd).
func traceVia(t *testing.T, tierctl, kubeconfig string, c *livecluster.Cluster, src, dst, port string) traceResult {
	t.Helper()
	out, err := exec.Command(tierctl, "trace", "--src", src, "--dst", dst, "--port", port, "-o", "json",
		"--kubeconfig", kubeconfig, "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile).CombinedOutput()
	if err != nil {
		t.Fatalf("tierctl trace %s -> %s: %v\n%s", src, dst, err, out)
	}
	var res traceResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tierctl trace output %s: %v", out, err)
	}
	return res
}

// waitTunnel waits until the agent's tunnel is up with exactly the peers
// ("NODE IP CIDR...").
func waitTunnel(t *testing.T, ag *livecluster.Agent, peers ...string) {
	t.Helper()
	livecluster.Eventually(t, 60*time.Second, "agent "+ag.Node+" tunnel peers", func() error {
		st, err := ag.Q.Status(context.Background())
		if err != nil {
			return err
		}
		nn := st.NodeNetwork
		if nn == nil || nn.TunnelPort == 0 || strings.Join(nn.TunnelPeers, ",") != strings.Join(peers, ",") {
			return fmt.Errorf("node network %+v", nn)
		}
		return nil
	})
}

// checkUnderlay fails the test unless node n's address is on the
// underlay bridge's interface and its link is a port of that bridge.
func checkUnderlay(t *testing.T, n *simNode) {
	t.Helper()
	if err := underlayErr(n); err != nil {
		t.Fatal(err)
	}
}

func underlayErr(n *simNode) error {
	const bridge = "tierflow-phy0"
	out, err := exec.Command("ip", "-n", n.env.Netns(), "addr", "show", "dev", bridge).CombinedOutput()
	if err != nil || !strings.Contains(string(out), n.ip4.String()) || !strings.Contains(string(out), n.ip6.String()) {
		return fmt.Errorf("node %s: %s holds %q (%v), want %s and %s", n.name, bridge, out, err, n.ip4, n.ip6)
	}
	if out, err := exec.Command("ip", "-n", n.env.Netns(), "route", "show", "default").CombinedOutput(); err != nil || !strings.Contains(string(out), "dev "+bridge) {
		return fmt.Errorf("node %s: default route %q (%v), want through %s", n.name, out, err, bridge)
	}
	ports, err := n.env.Vsctl("list-ports", bridge)
	if err != nil || !strings.Contains(ports, "tfen"+n.env.ID) {
		return fmt.Errorf("node %s: %s's ports %q (%v)", n.name, bridge, ports, err)
	}
	return nil
}

// linkBackErr fails unless node n's link holds the node's addresses and
// its default route again (after an underlay was reverted).
func linkBackErr(n *simNode) error {
	link := "tfen" + n.env.ID
	out, err := exec.Command("ip", "-n", n.env.Netns(), "addr", "show", "dev", link).CombinedOutput()
	if err != nil || !strings.Contains(string(out), n.ip4.String()) || !strings.Contains(string(out), n.ip6.String()) {
		return fmt.Errorf("node %s: %s after the revert: %s (%v), want %s and %s", n.name, link, out, err, n.ip4, n.ip6)
	}
	if out, err := exec.Command("ip", "-n", n.env.Netns(), "route", "show", "default").CombinedOutput(); err != nil || !strings.Contains(string(out), "dev "+link) {
		return fmt.Errorf("node %s: default route %q (%v) after the revert, want through %s", n.name, out, err, link)
	}
	return nil
}

// uninstallNode stops node n's OVS as the DaemonSet's ovs container does
// (ovs-appctl exit, without --cleanup: the userspace datapath's devices
// stay) and runs the uninstall's cleanup on the node with the agent
// configuration cfg; it returns what the cleanup removed.
func uninstallNode(t *testing.T, n *simNode, cfg *config.Agent) []string {
	t.Helper()
	for _, target := range []string{n.env.VswitchdCtlPath(), filepath.Join(n.env.Dir, "ovsdb-server.ctl")} {
		if out, err := exec.Command("ovs-appctl", "-t", target, "exit").CombinedOutput(); err != nil {
			t.Fatalf("node %s: ovs-appctl -t %s exit: %v: %s", n.name, target, err, out)
		}
	}
	o := uninstall.Options{Agent: cfg, OVSDatabase: n.env.DBPath(), NetNS: n.env.NetnsPath()}
	var removed []string
	livecluster.Eventually(t, 30*time.Second, "node "+n.name+"'s cleanup", func() error {
		var err error
		removed, err = uninstall.Run(context.Background(), o)
		if errors.Is(err, uninstall.ErrOVSRunning) {
			return err // still stopping
		}
		if err != nil {
			t.Fatalf("node %s: cleanup: %v (removed %q)", n.name, err, removed)
		}
		return nil
	})
	return removed
}

func ofport(t *testing.T, n *simNode, iface string) uint32 {
	t.Helper()
	p, err := n.br.OFPort(iface)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lastDatapathActions is the last "Datapath actions:" of a trace.
func lastDatapathActions(trace string) string {
	var last string
	for _, l := range strings.Split(trace, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "Datapath actions:"); ok {
			last = strings.TrimSpace(rest)
		}
	}
	return last
}

func retry(n int, f func() error) error {
	var err error
	for i := 0; i < n; i++ {
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}

// transferDF sends size random bytes from src to dst over TCP with the
// don't-fragment bit on every packet (IP_PMTUDISC_DO on both sockets: an
// oversized packet is an error, never fragmented), and checks that dst
// received exactly them.
func transferDF(src, dst *ovsenv.Pod, size int) error {
	const port = 9099
	dontFragment := func(fd uintptr) error {
		return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = dontFragment(fd) }); err != nil {
			return err
		}
		return serr
	}}
	var ln net.Listener
	if err := dst.InNetns(func() error {
		var err error
		ln, err = lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(dst.IPv4(), port).String())
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
		h := sha256.New()
		n, err := io.Copy(h, conn)
		if err != nil {
			got <- fmt.Sprintf("after %d bytes: %v", n, err)
			return
		}
		sum := fmt.Sprintf("%d %x", n, h.Sum(nil))
		_, _ = conn.Write([]byte(sum))
		got <- sum
	}()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	want := fmt.Sprintf("%d %x", size, sha256.Sum256(data))
	var conn net.Conn
	if err := src.InNetns(func() error {
		d := net.Dialer{Timeout: 5 * time.Second, Control: lc.Control}
		var err error
		conn, err = d.Dial("tcp4", netip.AddrPortFrom(dst.IPv4(), port).String())
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.Copy(conn, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	answer, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("reading the receiver's sum: %w", err)
	}
	if r := <-got; r != want || string(answer) != want {
		return fmt.Errorf("receiver got %q (answered %q), want %q", r, answer, want)
	}
	return nil
}

// spoofedSource is in node 1's pod CIDR; no pod has it.
const spoofedSource = "10.78.1.250"

// spoofVXLAN sends, from network namespace ns (address local, no node's),
// VXLAN packets to remote carrying UDP datagrams from spoofedSource to
// dst's port, through a kernel VXLAN device.
func spoofVXLAN(t *testing.T, ns, local, remote string, dst *ovsenv.Pod, port uint16) {
	t.Helper()
	dev := fmt.Sprintf("tfvx%d", os.Getpid()%100000)
	mustRun(t, "ip", "-n", ns, "link", "add", dev, "type", "vxlan", "id", "0", "remote", remote, "local", local, "dstport", "4789")
	t.Cleanup(func() { _ = exec.Command("ip", "-n", ns, "link", "delete", dev).Run() })
	mustRun(t, "ip", "-n", ns, "addr", "add", spoofedSource+"/32", "dev", dev)
	mustRun(t, "ip", "-n", ns, "link", "set", dev, "up")
	mustRun(t, "ip", "-n", ns, "route", "add", dst.IPv4().String()+"/32", "dev", dev, "src", spoofedSource)
	mustRun(t, "ip", "-n", ns, "neigh", "add", dst.IPv4().String(), "lladdr", dst.MAC.String(), "dev", dev, "nud", "permanent")
	sendUDP(t, ns, netip.MustParseAddr(spoofedSource), dst.IPv4(), port)
	time.Sleep(500 * time.Millisecond)
}

// tunnelRx is the number of packets node n's pipeline classified as
// arriving through the tunnel (the Classifier flow of the tunnel port).
func tunnelRx(t *testing.T, n *simNode) int {
	t.Helper()
	port := ofport(t, n, nodenet.TunnelPortName)
	flows, err := n.br.DumpFlowsWithStats(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		if !strings.Contains(f, fmt.Sprintf("in_port=%d ", port)) {
			continue
		}
		for _, field := range strings.Split(f, ", ") {
			if v, ok := strings.CutPrefix(field, "n_packets="); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatalf("node %s: no Classifier flow of the tunnel port %d in %v", n.name, port, flows)
	return 0
}
