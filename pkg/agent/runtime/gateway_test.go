package runtime_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestNoEncapGatewayTrust checks what may enter a node's pods through the
// gateway (pkg/agent/pipeline/DESIGN.md, "Host traffic"), on two noEncap
// nodes with real agents, controller, API server and packets:
//
//   - the node itself reaches its pods whatever their policy (kubelet
//     probes), but a NodePort connection kube-proxy masquerades into the
//     gateway is policed (it arrives from the node's InternalIP, not from
//     the gateway's address): an isolated pod's NodePort is closed to a
//     client its policy does not allow, and open once the policy allows
//     the node's address;
//   - an AdminNetworkPolicy Deny to `nodes` covers the nodes' gateway
//     addresses: a pod cannot reach a kubelet by them;
//   - a host on the node network cannot send as a pod of the node, a host
//     on another network cannot send as a pod of another node, and the
//     node cannot send into the bridge from an address of its pod CIDR
//     that no pod has.
//
// Before the change every one of these passed through: the masqueraded
// NodePort connection skipped the ingress tiers as the node's own traffic,
// the gateway addresses were in no nodes peer, and the gateway accepted
// any source address.
func TestNoEncapGatewayTrust(t *testing.T) {
	bed := newNoEncapBed(t)
	c, n1, n2 := bed.c, bed.n1, bed.n2
	ctx := context.Background()

	// Each node's host serves on every address (a kubelet).
	for _, n := range []*simNode{n1, n2} {
		hostListenTCP(t, n, 10250)
	}
	// c takes connections from a only.
	np := createIngressFromPods(t, c, "c-from-a", map[string]string{"app": "c"}, map[string]string{"app": "a"})
	nps := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace)
	// a may not reach any node.
	anp := &anpv1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "a-no-nodes"},
		Spec: anpv1.AdminNetworkPolicySpec{
			Priority: 10,
			Subject:  anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}},
			Egress: []anpv1.AdminNetworkPolicyEgressRule{{Name: "no-nodes", Action: anpv1.AdminNetworkPolicyRuleActionDeny,
				To: []anpv1.AdminNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{}}}}},
		},
	}
	if _, err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c.StartController(t)
	ag1 := bed.startAgent(t, n1, 1, bed.kubeconfig)
	ag2 := bed.startAgent(t, n2, 2, bed.kubeconfig)
	a := bed.attach(t, n1, "a", map[string]string{"app": "a"})
	b := bed.attach(t, n2, "b", map[string]string{"app": "b"})
	cc := bed.attach(t, n1, "c", map[string]string{"app": "c"})
	for _, p := range []*ovsenv.Pod{a, b, cc} {
		p.ListenTCP(8080)
	}
	spoofSink := a.ListenUDP(5454)
	ag1.RealizedOn(t, "AdminNetworkPolicy/a-no-nodes", "NetworkPolicy/default/c-from-a")
	ag2.RealizedOn(t)
	livecluster.Eventually(t, 60*time.Second, "gateways and routes", func() error {
		if err := checkNodeNet(n1, []string{"10.77.1.1/24"}, []string{"10.77.2.0/24 via 192.168.77.2", "fd00:77:2::/64 via fd00:77::2"}); err != nil {
			return err
		}
		return checkNodeNet(n2, []string{"10.77.2.1/24"}, []string{"10.77.1.0/24 via 192.168.77.1", "fd00:77:1::/64 via fd00:77::1"})
	})

	// A NodePort of c on node 1 as kube-proxy (iptables mode) programs
	// it: marked for masquerading, DNATed to c, masqueraded in
	// POSTROUTING.
	ns1 := n1.env.Netns()
	mustRun(t, "ip", "netns", "exec", ns1, "iptables", "-t", "nat", "-N", "KUBE-TEST-NODEPORT")
	mustRun(t, "ip", "netns", "exec", ns1, "iptables", "-t", "nat", "-A", "KUBE-TEST-NODEPORT", "-j", "MARK", "--or-mark", "0x4000")
	mustRun(t, "ip", "netns", "exec", ns1, "iptables", "-t", "nat", "-A", "KUBE-TEST-NODEPORT", "-p", "tcp", "-j", "DNAT", "--to-destination", cc.IPv4().String()+":8080")
	mustRun(t, "ip", "netns", "exec", ns1, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", n1.ip4.Addr().String(), "-p", "tcp", "--dport", "30080", "-j", "KUBE-TEST-NODEPORT")
	mustRun(t, "ip", "netns", "exec", ns1, "iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE")
	nodePort := netip.AddrPortFrom(n1.ip4.Addr(), 30080)

	probeHost(t, "the node reaches its pods", []hostFlow{
		{n1, cc, true}, // isolated, but its own node (kubelet probes)
		{n1, a, true},
		{n2, cc, false}, // another node is no app=a pod
	})
	if err := inNetNS(n2.env.NetnsPath(), func() error { return echo(nodePort, time.Second) }); err == nil {
		t.Errorf("node nn-2 -> NodePort %s (pod c, isolated): allowed, want blocked (masqueraded into the gateway, it is not node nn-1's own traffic)", nodePort)
	}
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("10.77.1.1"), 10250), // node 1's gateway address
		netip.AddrPortFrom(netip.MustParseAddr("10.77.2.1"), 10250), // node 2's
		netip.AddrPortFrom(n1.ip4.Addr(), 10250),
	} {
		if err := a.ProbeTCP(dst, time.Second); err == nil {
			t.Errorf("pod a -> node address %s: allowed, want blocked (ANP Deny to nodes)", dst)
		}
	}
	// b is no subject of the ANP: it reaches the kubelets.
	if err := retryProbe(func() error { return b.ProbeTCP(netip.MustParseAddrPort("10.77.2.1:10250"), 3*time.Second) }); err != nil {
		t.Errorf("pod b -> its node's gateway address: %v, want allowed", err)
	}

	// Spoofed sources. A host on the node network (node 2's host stack)
	// sends as pod c of node 1.
	sendSpoofed(t, n2.env.Netns(), cc.IPv4(), a.IPv4(), 5454)
	// A host on another network behind node 1 sends as pod b of node 2.
	outside := outsideNetwork(t, n1)
	mustRun(t, "ip", "-n", outside.netns, "route", "add", "10.77.1.0/24", "via", "192.168.78.1")
	sendSpoofed(t, outside.netns, b.IPv4(), a.IPv4(), 5454)
	// Node 1's host sends from an address of its pod CIDR no pod has.
	sendSpoofed(t, n1.env.Netns(), netip.MustParseAddr("10.77.1.200"), a.IPv4(), 5454)
	// The same over IPv6 (the node network has no outside IPv6 network).
	sendSpoofed(t, n2.env.Netns(), cc.IPv6(), a.IPv6(), 5454)
	sendSpoofed(t, n1.env.Netns(), netip.MustParseAddr("fd00:77:1::200"), a.IPv6(), 5454)
	// Controls: node 2's own addresses reach a over the same paths (a
	// takes anything), so the datagrams above were dropped for their
	// sources.
	sendUDP(t, n2.env.Netns(), n2.ip4.Addr(), a.IPv4(), 5454)
	sendUDP(t, n2.env.Netns(), n2.ip6.Addr(), a.IPv6(), 5454)
	time.Sleep(time.Second)
	for _, src := range []netip.Addr{cc.IPv4(), b.IPv4(), netip.MustParseAddr("10.77.1.200"), cc.IPv6(), netip.MustParseAddr("fd00:77:1::200")} {
		if slices.Contains(spoofSink.Peers(), src) {
			t.Errorf("pod a received a spoofed datagram from %s", src)
		}
	}
	for _, src := range []netip.Addr{n2.ip4.Addr(), n2.ip6.Addr()} {
		if !slices.Contains(spoofSink.Peers(), src) {
			t.Errorf("pod a received nothing from node nn-2's own address %s (control)", src)
		}
	}

	// The NodePort is policed, not broken: once c's policy allows node
	// 1's address, the masqueraded connection passes.
	np.Spec.Ingress[0].From = append(np.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: n1.ip4.Addr().String() + "/32"}})
	cur, err := nps.Get(ctx, np.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec = np.Spec
	if _, err := nps.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 30*time.Second, "NodePort allowed by an ipBlock of the node", func() error {
		return inNetNS(n2.env.NetnsPath(), func() error { return echo(nodePort, 2*time.Second) })
	})
}

func retryProbe(probe func() error) error {
	var err error
	for i := 0; i < 3; i++ {
		if err = probe(); err == nil {
			return nil
		}
	}
	return err
}

// hostListenTCP runs an echo server on every address of n's host stack.
func hostListenTCP(t *testing.T, n *simNode, port uint16) {
	t.Helper()
	serveEcho(t, n.env.NetnsPath(), fmt.Sprintf(":%d", port), nil)
}

// sendSpoofed sends a few UDP datagrams from the network namespace netns
// with src as source (the address is on the namespace's loopback for the
// time of the send, as on a host that claims it).
func sendSpoofed(t *testing.T, netns string, src, dst netip.Addr, port uint16) {
	t.Helper()
	addr := netip.PrefixFrom(src, src.BitLen()).String()
	add := []string{"ip", "-n", netns, "addr", "add", addr, "dev", "lo"}
	if src.Is6() {
		add = append(add, "nodad") // usable at once, not tentative
	}
	mustRun(t, add...)
	defer mustRun(t, "ip", "-n", netns, "addr", "del", addr, "dev", "lo")
	sendUDP(t, netns, src, dst, port)
}

// sendUDP sends a few UDP datagrams from src, an address of the network
// namespace netns, to dst.
func sendUDP(t *testing.T, netns string, src, dst netip.Addr, port uint16) {
	t.Helper()
	if err := inNetNS("/run/netns/"+netns, func() error {
		conn, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, port)))
		if err != nil {
			return err
		}
		defer conn.Close()
		for i := 0; i < 5; i++ {
			if _, err := conn.Write([]byte("spoofed")); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatalf("sending from %s in %s: %v", src, netns, err)
	}
}
