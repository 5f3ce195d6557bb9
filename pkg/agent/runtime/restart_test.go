package runtime_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestNoEncapAgentRestartKeepsTraffic restarts a noEncap node's agent
// while connections are probed continuously — established ones (a line
// every 50ms on one connection) and new ones — across nodes, between pods
// of the node, and from the node's host to its pods, and while a
// connection the node's policy denies is probed too: none of the allowed
// probes may fail and the denied one may never pass, during the restart
// and after it. First with the API server reachable (the gateway comes
// back from the Node informer too), then with the API server unreachable
// and the controller down (the agent has only its saved state and what it
// finds on the node).
//
// Before the agent adopted the gateway from OVSDB and the kernel at start,
// the restarted agent's first realization (the saved state, at once)
// replaced the previous run's flows with a pipeline without a gateway: in
// the first part every probe through the gateway failed for the ~0.3s
// until the Node informer synced, in the second part they failed for good
// while /readyz said ready.
func TestNoEncapAgentRestartKeepsTraffic(t *testing.T) {
	bed := newNoEncapBed(t)
	c, n1, n2 := bed.c, bed.n1, bed.n2
	ctx := context.Background()

	// c (node 1) takes connections from a only: node 1 enforces it, so
	// b -> c must stay blocked while node 1's agent restarts.
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "c-from-a", Namespace: ovsenv.PodNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}},
			}},
		},
	}
	if _, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ctrl := c.StartController(t)
	ag1 := bed.startAgent(t, n1, 1, bed.kubeconfig)
	ag2 := bed.startAgent(t, n2, 2, bed.kubeconfig)
	a := bed.attach(t, n1, "a", map[string]string{"app": "a"})
	b := bed.attach(t, n2, "b", map[string]string{"app": "b"})
	cc := bed.attach(t, n1, "c", map[string]string{"app": "c"})
	for _, p := range []*ovsenv.Pod{a, b, cc} {
		p.ListenTCP(8080)
	}
	const npRef = "NetworkPolicy/default/c-from-a"
	ag1.RealizedOn(t, npRef)
	ag2.RealizedOn(t)
	livecluster.Eventually(t, 60*time.Second, "node 1 gateway and routes", func() error {
		return checkNodeNet(n1, []string{"10.77.1.1/24"}, []string{"10.77.2.0/24 via 192.168.77.2", "fd00:77:2::/64 via fd00:77::2"})
	})
	livecluster.Eventually(t, 60*time.Second, "node 2 gateway and routes", func() error {
		return checkNodeNet(n2, []string{"10.77.2.1/24"}, []string{"10.77.1.0/24 via 192.168.77.1", "fd00:77:1::/64 via fd00:77::1"})
	})

	flows := []watchedFlow{
		{name: "c->b established", src: cc, dst: b, port: 8080, allowed: true, established: true},
		{name: "c->b new", src: cc, dst: b, port: 8080, allowed: true},
		{name: "b->a new", src: b, dst: a, port: 8080, allowed: true},
		{name: "a->c established", src: a, dst: cc, port: 8080, allowed: true, established: true},
		{name: "a->c new", src: a, dst: cc, port: 8080, allowed: true},
		{name: "node nn-1->a established", fromNode: n1, dst: a, port: 8080, allowed: true, established: true},
		{name: "node nn-1->a new", fromNode: n1, dst: a, port: 8080, allowed: true},
		{name: "b->c new", src: b, dst: cc, port: 8080, allowed: false},
	}
	// Everything works before the restart.
	w := watchTraffic(t, flows...)
	time.Sleep(2 * time.Second)
	w.check(t, "before the restart", flows...)
	if t.Failed() {
		t.FailNow()
	}

	t.Log("restart with the API server and the controller reachable")
	w = watchTraffic(t, flows...)
	time.Sleep(time.Second)
	ag1.Stop()
	ag1 = bed.startAgent(t, n1, 1, bed.kubeconfig)
	ag1.RealizedOn(t, npRef)
	time.Sleep(3 * time.Second)
	w.check(t, "restart, API server reachable", flows...)

	t.Log("restart with the API server unreachable and the controller down")
	ctrl.Kill()
	w = watchTraffic(t, flows...)
	time.Sleep(time.Second)
	ag1.Stop()
	ag1 = bed.startAgent(t, n1, 1, unreachableKubeconfig(t, bed))
	ag1.RealizedOn(t, npRef)
	time.Sleep(5 * time.Second)
	w.check(t, "restart, API server unreachable", flows...)
}

// unreachableKubeconfig is the agents' kubeconfig with a server address
// nothing listens on: the agent's Kubernetes client never gets an answer.
func unreachableKubeconfig(t *testing.T, bed *noEncapBed) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(bed.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://127.0.0.1:1"
	}
	path := filepath.Join(bed.c.Dir, "unreachable.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
