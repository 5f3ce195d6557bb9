//go:build clustere2e

package clustere2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// testTierctl runs tierctl as the README shows it: through `kubectl exec`
// into the controller (get, explain, flows and trace reach the agents
// through the controller) and into a node's agent pod (flows and trace on
// the node's own socket: that node's flows, traces between its pods), on a
// namespace where a NetworkPolicy lets one client in and keeps another
// out.
func testTierctl(t *testing.T) {
	ctx := context.Background()
	const ns = "tierctl"
	c, cs := env.c, env.cs
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()
	for _, p := range []struct{ name, node, role string }{
		{"server", c.Nodes[2].Name, "server"}, {"friend", c.Nodes[1].Name, "friend"}, {"stranger", c.Nodes[1].Name, "stranger"},
		// A friend on the server's node: a trace on a node sees that
		// node's pods only.
		{"neighbour", c.Nodes[2].Name, "friend"},
	} {
		pod := agnhostPod(p.name, p.node, map[string]string{"role": p.role}, []string{"netexec", "--http-port=8080", "--udp-port=-1"}, nil)
		pod.Namespace = ns
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"server", "friend", "stranger", "neighbour"} {
		waitPodReady(t, ns, name)
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "only-friends", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "friend"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(8080))}},
			}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitConnect(ctx, ns, "stranger", "server", false); err != nil {
		t.Fatal(err)
	}
	if err := waitConnect(ctx, ns, "friend", "server", true); err != nil {
		t.Fatal(err)
	}

	inController := func(args ...string) (string, error) {
		return c.Kubectl(ctx, nil, append([]string{"-n", "kube-system", "exec", "deploy/tierflow-controller", "--", "tierctl"}, args...)...)
	}
	agent, err := agentPod(ctx, c.Nodes[2].Name)
	if err != nil {
		t.Fatal(err)
	}
	inAgent := func(args ...string) (string, error) {
		return c.Kubectl(ctx, nil, append([]string{"-n", "kube-system", "exec", agent, "-c", "agent", "--", "tierctl"}, args...)...)
	}
	checks := []struct {
		name string
		run  func(...string) (string, error)
		args []string
		want []string
	}{
		{"get policies", inController, []string{"get", "policies", "-n", ns}, []string{"only-friends"}},
		{"explain denied", inController, []string{"explain", "--src", ns + "/stranger", "--dst", ns + "/server", "--port", "TCP/8080", "-o", "table"}, []string{"Deny", "only-friends"}},
		{"explain allowed", inController, []string{"explain", "--src", ns + "/friend", "--dst", ns + "/server", "--port", "TCP/8080", "-o", "table"}, []string{"Allow", "only-friends"}},
		{"flows through the controller", inController, []string{"flows", "--node", c.Nodes[2].Name, "--policy", "NetworkPolicy/" + ns + "/only-friends"}, []string{"IngressNetworkPolicy"}},
		{"flows --check through the controller", inController, []string{"flows", "--node", c.Nodes[2].Name, "--check"}, nil},
		{"trace through the controller", inController, []string{"trace", "--src", ns + "/stranger", "--dst", ns + "/server", "--port", "TCP/8080"}, []string{"Deny"}},
		{"flows on the node", inAgent, []string{"flows", "--policy", "NetworkPolicy/" + ns + "/only-friends"}, []string{"IngressNetworkPolicy"}},
		{"trace on the node", inAgent, []string{"trace", "--src", ns + "/neighbour", "--dst", ns + "/server", "--port", "TCP/8080"}, []string{"Allow"}},
	}
	for _, ch := range checks {
		t.Run(strings.ReplaceAll(ch.name, " ", "_"), func(t *testing.T) {
			out, err := ch.run(ch.args...)
			if err != nil {
				t.Fatalf("tierctl %s: %v\n%s", strings.Join(ch.args, " "), err, out)
			}
			for _, w := range ch.want {
				if !strings.Contains(out, w) {
					t.Errorf("tierctl %s: output lacks %q:\n%s", strings.Join(ch.args, " "), w, out)
				}
			}
		})
	}
}

// waitConnect waits until a probe from pod src to pod dst's port 8080 has
// the outcome want.
func waitConnect(ctx context.Context, ns, src, dst string, want bool) error {
	p, err := env.cs.CoreV1().Pods(ns).Get(ctx, dst, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var last error
	for i := 0; i < 30; i++ {
		last = env.c.Connect(ctx, ns, src, p.Status.PodIP+":8080", "tcp")
		if (last == nil) == want {
			return nil
		}
	}
	return fmt.Errorf("%s/%s → %s:8080: want connected=%v; last probe: %v", ns, src, dst, want, last)
}
