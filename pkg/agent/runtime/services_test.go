package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestServiceProxyNoEncap runs the Service proxy the way a real cluster
// does (noEncap: pods route through the gateway; agents watch Services,
// EndpointSlices and Nodes with the agent's RBAC from manifests/, no
// kube-proxy anywhere): a pod's connections to a ClusterIP reach an
// endpoint on its own node and one on the other node (through the
// gateway and the route), and so do its connections to the other node's
// NodePort; an egress NetworkPolicy of the client decides on the endpoint
// (connections through the Service never reach the pod it denies); a
// Service without endpoints refuses at once; endpoint changes in the API
// reach the flows.
func TestServiceProxyNoEncap(t *testing.T) {
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	cniBin := buildCNI(t)
	ctx := context.Background()

	n1 := &simNode{name: "sn-1", ip4: netip.MustParsePrefix("192.168.79.1/24"), podCIDRs: []string{"10.79.1.0/24"}}
	n2 := &simNode{name: "sn-2", ip4: netip.MustParsePrefix("192.168.79.2/24"), podCIDRs: []string{"10.79.2.0/24"}}
	joinSimNodes(t, c, "tfsn", n1, n2)
	// Agents first: tierflow-cni ADD waits until the agent admits the pod.
	ctrl := c.StartController(t)
	_ = ctrl
	start := func(n *simNode, zone uint16) *livecluster.Agent {
		opts := c.AgentOptions(n.env, n.br, n.name, n.tokenDir, zone)
		opts.Config.NodeNetwork.Mode = config.NodeNetworkNoEncap
		opts.Config.ServiceProxy.Enabled = true
		opts.Config.Kubeconfig = kubeconfig
		opts.NodeNetNS = n.env.NetnsPath()
		return livecluster.StartAgent(t, n.name, opts)
	}
	ag1, ag2 := start(n1, 1), start(n2, 2)
	ag1.RealizedOn(t)
	ag2.RealizedOn(t)
	livecluster.Eventually(t, 60*time.Second, "both gateways and routes", func() error {
		if err := checkNodeNet(n1, []string{"10.79.1.1/24"}, []string{"10.79.2.0/24 via 192.168.79.2"}); err != nil {
			return err
		}
		return checkNodeNet(n2, []string{"10.79.2.1/24"}, []string{"10.79.1.0/24 via 192.168.79.1"})
	})

	a := attachPod(t, c, n1, cniBin, "a", map[string]string{"app": "client"})
	local := attachPod(t, c, n1, cniBin, "local", map[string]string{"app": "web", "where": "local"})
	remote := attachPod(t, c, n2, cniBin, "remote", map[string]string{"app": "web", "where": "remote"})
	servers := map[*ovsenv.Pod]*ovsenv.Server{}
	for _, p := range []*ovsenv.Pod{local, remote} {
		servers[p] = p.ListenTCP(8080)
	}

	// The Service and its slice (no kube-controller-manager here: the
	// slice is written as its EndpointSlice controller would).
	svcs := c.Kube.Kube.CoreV1().Services(ovsenv.PodNamespace)
	web, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type:  corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices := c.Kube.Kube.DiscoveryV1().EndpointSlices(ovsenv.PodNamespace)
	endpoint := func(p *ovsenv.Pod, node string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{p.IPv4().String()}, NodeName: &node,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ovsenv.PodNamespace, Name: p.Name}}
	}
	name, proto, port := "http", corev1.ProtocolTCP, int32(8080)
	sl, err := slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{endpoint(local, n1.name), endpoint(remote, n2.name)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	clusterIP := netip.MustParseAddrPort(web.Spec.ClusterIP + ":80")
	nodePort := netip.AddrPortFrom(n2.ip4.Addr(), uint16(web.Spec.Ports[0].NodePort))
	reachesBoth := func(step string, dst netip.AddrPort) {
		t.Helper()
		livecluster.Eventually(t, 30*time.Second, step, func() error {
			l0, r0 := len(servers[local].Peers()), len(servers[remote].Peers())
			for i := 0; i < 16; i++ {
				if err := a.ProbeTCP(dst, 3*time.Second); err != nil {
					return err
				}
			}
			if l1, r1 := len(servers[local].Peers()), len(servers[remote].Peers()); l1 == l0 || r1 == r0 {
				return errors.New("16 connections did not reach both endpoints")
			}
			return nil
		})
	}
	reachesBoth("ClusterIP to a local and a remote endpoint", clusterIP)
	reachesBoth("the other node's NodePort", nodePort)
	// The endpoints saw the client's own address (no SNAT).
	if peers := servers[remote].Peers(); peers[len(peers)-1] != a.IPv4() {
		t.Fatalf("the remote endpoint saw %v, want the client %v", peers[len(peers)-1], a.IPv4())
	}
	start0 := time.Now()
	if _, err := a.DialTCP(netip.MustParseAddrPort(empty.Spec.ClusterIP+":80"), 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start0) > 2*time.Second {
		t.Fatalf("Service without endpoints: %v after %v; want connection refused at once", err, time.Since(start0))
	}

	// Egress policy of the client: only the local endpoint's pod.
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "client-egress", Namespace: ovsenv.PodNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"where": "local"}}}},
			}},
		},
	}
	if _, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ag1.RealizedOn(t, "NetworkPolicy/default/client-egress")
	if err := n1.env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	l0, r0 := len(servers[local].Peers()), len(servers[remote].Peers())
	failed := 0
	for i := 0; i < 24; i++ {
		if err := a.ProbeTCP(clusterIP, 500*time.Millisecond); err != nil {
			failed++
		}
	}
	if l1, r1 := len(servers[local].Peers()), len(servers[remote].Peers()); r1 != r0 || l1-l0 != 24-failed || failed == 0 {
		t.Fatalf("egress allowed to the local endpoint only: %d of 24 failed, local got %d, remote %d; want remote none", failed, l1-l0, r1-r0)
	}
	if err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The remote endpoint leaves the slice: new connections all go to the
	// local one.
	sl.Endpoints = sl.Endpoints[:1]
	if _, err := slices.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 30*time.Second, "connections only to the remaining endpoint", func() error {
		r0 := len(servers[remote].Peers())
		for i := 0; i < 12; i++ {
			if err := a.ProbeTCP(clusterIP, 3*time.Second); err != nil {
				return err
			}
		}
		if len(servers[remote].Peers()) != r0 {
			return errors.New("the removed endpoint still gets connections")
		}
		return nil
	})
}

// TestServiceProxyBadInput: Services an agent must survive and answer as
// kube-proxy would: one with 10,000 ports (each reaches its endpoint), an
// EndpointSlice listing a pod of another node (the connection goes there:
// nothing here answers), a selector matching nothing (refused at once),
// a slice whose port has no number (left out, the rest used); the agent
// keeps running and realizing.
func TestServiceProxyBadInput(t *testing.T) {
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	br := env.AddBridge("n1")
	a := br.AddPod("a", nil, netip.MustParsePrefix("10.0.0.1/16"))
	b := br.AddPod("b", nil, netip.MustParsePrefix("10.0.0.2/16"))
	for _, port := range []uint16{1, 5000, 10000} {
		b.ListenTCP(port)
	}
	tok := c.AddNode(t, "n1")
	c.AddPod(t, a, "n1", map[string]string{"app": "a"})
	c.AddPod(t, b, "n1", map[string]string{"app": "b"})
	ctx := context.Background()
	svcs := c.Kube.Kube.CoreV1().Services(ovsenv.PodNamespace)
	slices := c.Kube.Kube.DiscoveryV1().EndpointSlices(ovsenv.PodNamespace)

	// 10,000 ports, port N to target port N of b.
	wide := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wide"}}
	wideSlice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "wide-1", Labels: map[string]string{discoveryv1.LabelServiceName: "wide"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{b.IPv4().String()}}}}
	for p := int32(1); p <= 10000; p++ {
		name := fmt.Sprint("p", p)
		wide.Spec.Ports = append(wide.Spec.Ports, corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p})
		proto, port := corev1.ProtocolTCP, p
		wideSlice.Ports = append(wideSlice.Ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
	}
	wideSvc, err := svcs.Create(ctx, wide, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slices.Create(ctx, wideSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A slice listing a pod of another node, beside b; a port without a
	// number in another slice of the same Service; an address that does
	// not parse.
	elsewhere, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(5000)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	http, tcp, p5000 := "http", corev1.ProtocolTCP, int32(5000)
	other := "n2"
	for _, sl := range []*discoveryv1.EndpointSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere-1", Labels: map[string]string{discoveryv1.LabelServiceName: "elsewhere"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &http, Protocol: &tcp, Port: &p5000}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.99.9"}, NodeName: &other}, {Addresses: []string{b.IPv4().String()}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere-2", Labels: map[string]string{discoveryv1.LabelServiceName: "elsewhere"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &http, Protocol: &tcp}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.99.10"}}}},
	} {
		if _, err := slices.Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nobody, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nobody"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nothing-matches"}, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c.StartController(t)
	opts := c.AgentOptions(env, br, "n1", tok, 3)
	opts.Config.ServiceProxy.Enabled = true
	opts.Config.Kubeconfig = kubeconfig
	ag := livecluster.StartAgent(t, "n1", opts)
	ag.RealizedOn(t)

	for _, port := range []uint16{1, 5000, 10000} {
		dst := netip.AddrPortFrom(netip.MustParseAddr(wideSvc.Spec.ClusterIP), port)
		livecluster.Eventually(t, 60*time.Second, fmt.Sprintf("the 10,000-port Service on port %d", port), func() error { return a.ProbeTCP(dst, 3*time.Second) })
	}
	// The other node's pod gets its share (no answer here), b the rest.
	ok, failed := 0, 0
	for i := 0; i < 16; i++ {
		if err := a.ProbeTCP(netip.MustParseAddrPort(elsewhere.Spec.ClusterIP+":80"), time.Second); err == nil {
			ok++
		} else {
			failed++
		}
	}
	if ok == 0 || failed == 0 {
		t.Errorf("the Service with a pod of another node: %d of 16 connections answered, want b's share only", ok)
	}
	start := time.Now()
	if _, err := a.DialTCP(netip.MustParseAddrPort(nobody.Spec.ClusterIP+":80"), 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 2*time.Second {
		t.Errorf("Service whose selector matches nothing: %v after %v; want connection refused at once", err, time.Since(start))
	}
	// Still realizing: a Service created now works.
	late, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(1)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1 := int32(1)
	if _, err := slices.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "late-1", Labels: map[string]string{discoveryv1.LabelServiceName: "late"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Protocol: &tcp, Port: &p1}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{b.IPv4().String()}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 60*time.Second, "a Service created after the bad ones", func() error {
		return a.ProbeTCP(netip.MustParseAddrPort(late.Spec.ClusterIP+":80"), 3*time.Second)
	})
	st, err := ag.Q.Status(ctx)
	if err != nil || !st.Ready {
		t.Fatalf("agent status %+v, %v", st, err)
	}
}
