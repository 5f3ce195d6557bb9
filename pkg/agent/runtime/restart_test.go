package runtime_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	createIngressFromPods(t, c, "c-from-a", map[string]string{"app": "c"}, map[string]string{"app": "a"})

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
	if code, body := readyz(t, ag1); code != http.StatusOK {
		t.Errorf("/readyz after the restart with the gateway adopted: %d %s, want 200", code, body)
	}

	// /readyz is honest: an agent that finds no gateway to adopt (its port
	// removed while the agent was down) and cannot reach the API server
	// for the Node's pod CIDRs enforces its saved state without the
	// gateway (pods reach nothing beyond the node) and says so. Before
	// the gateway counted for readiness it said ready.
	ag1.Stop()
	if out, err := n1.env.Vsctl("del-port", n1.br.Name, "tierflow-gw0"); err != nil {
		t.Fatalf("removing the gateway: %v: %s", err, out)
	}
	ag1 = bed.startAgent(t, n1, 1, unreachableKubeconfig(t, bed))
	livecluster.Eventually(t, 60*time.Second, "saved state realized without the gateway", func() error {
		r, err := ag1.Q.Realization(ctx)
		if err != nil {
			return err
		}
		for _, pr := range r.Policies {
			if pr.Source.String() == npRef && pr.Generation == pr.Wanted {
				return nil
			}
		}
		return fmt.Errorf("%s not realized: %+v", npRef, r.Policies)
	})
	for range 3 {
		if code, body := readyz(t, ag1); code != http.StatusServiceUnavailable || !strings.Contains(body, "no gateway") {
			t.Errorf("/readyz without a gateway: %d %q, want 503 (no gateway)", code, body)
		}
		if st, err := ag1.Q.Status(ctx); err != nil || st.Ready {
			t.Errorf("status without a gateway: ready %v (%v), want not ready", st.Ready, err)
		}
		time.Sleep(time.Second)
	}
	// Not ready is the truth: traffic through node 1's gateway is cut.
	if err := cc.ProbeTCP(netip.AddrPortFrom(b.IPv4(), 8080), time.Second); err == nil {
		t.Errorf("c -> b without node 1's gateway: passed; the test does not show what it means to")
	}
	// With the API server back the agent makes the gateway again and is
	// ready with the node's traffic. (The new gateway has a new MAC: the
	// pods reach it once their neighbor entry for it is renewed.)
	ag1.Stop()
	ag1 = bed.startAgent(t, n1, 1, bed.kubeconfig)
	ag1.RealizedOn(t, npRef)
	livecluster.Eventually(t, 90*time.Second, "c -> b through the new gateway", func() error {
		return cc.ProbeTCP(netip.AddrPortFrom(b.IPv4(), 8080), time.Second)
	})
	probe(t, "gateway made again", flow{a, cc, 8080, "tcp", true}, flow{b, cc, 8080, "tcp", false})
}

// readyz is the agent's /readyz answer (status code and body).
func readyz(t *testing.T, ag *livecluster.Agent) (int, string) {
	t.Helper()
	st, err := ag.Q.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + st.MetricsAddress + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
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
