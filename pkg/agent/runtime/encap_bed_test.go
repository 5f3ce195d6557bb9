package runtime_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/conformance"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/testbed"
)

// TestEncapBed is the smoke part of the encap runs of the e2e scenarios
// and the conformance suites (`make test-encap` runs them whole): the
// simulated cluster brought up for the encap node network (testbed
// Options.Encap: three nodes, each its own namespace and OVS, on three
// subnets behind a router that drops pod addresses), the real controller
// and agents in encap mode. It checks that every agent's tunnel reaches
// the two others, the full cross-node matrix without policy and under two
// e2e scenarios (an AdminNetworkPolicy story and a default-deny
// NetworkPolicy), IPv4 and IPv6, against pkg/explain; a pod reaching
// another node's hostNetwork server at its InternalIP (routed by the
// underlay, not tunneled); and tierctl trace following a denied
// connection through the tunnel; a smoke of both upstream conformance
// suites.
func TestEncapBed(t *testing.T) {
	bed := testbed.Start(t, testbed.Options{Nodes: 3, IPv6: true, Encap: true})
	tf := framework.Start(t, bed, "")
	pods, err := tf.Deploy(
		framework.Workload{Namespace: "x", Labels: map[string]string{"tenant": "blue"}, Pods: map[string]string{"a": "node-1", "b": "node-2"},
			PodLabels: map[string]map[string]string{"a": {"app": "web"}, "b": {"app": "db"}}},
		framework.Workload{Namespace: "y", Labels: map[string]string{"tenant": "blue"}, Pods: map[string]string{"a": "node-3", "b": "node-1"},
			PodLabels: map[string]map[string]string{"a": {"app": "web"}, "b": {"app": "db"}}},
		framework.Workload{Namespace: "z", Labels: map[string]string{"tenant": "red"}, Pods: map[string]string{"a": "node-2", "b": "node-3"},
			PodLabels: map[string]map[string]string{"a": {"app": "web"}, "b": {"app": "db"}}},
	)
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, tf.Logs(20))
	}
	for _, n := range bed.Nodes {
		st, err := agentquery.NewClient(tf.AgentSockets[n.Name]).Status(context.Background())
		if err != nil || st.NodeNetwork == nil || len(st.NodeNetwork.TunnelPeers) != 2 || st.NodeNetwork.PodMTU != 1450 {
			t.Errorf("node %s: status %+v (%v), want two tunnel peers and pod MTU 1450", n.Name, st, err)
		}
	}

	var v6 []framework.Pod
	for _, p := range pods {
		obj, err := bed.Cluster.Kube.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil || len(obj.Status.PodIPs) != 2 {
			t.Fatalf("pod %s: %v %v, want two addresses", p, err, obj.Status.PodIPs)
		}
		p.IP = "[" + obj.Status.PodIPs[1].IP + "]"
		v6 = append(v6, p)
	}
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, scenario := range []string{"", "kep2091-story1-deny.yaml", "np-default-deny-ingress.yaml"} {
		name := strings.TrimSuffix(scenario, ".yaml")
		if name == "" {
			name = "no-policy"
		}
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(root, "test", "e2e", "scenarios", scenario)
			if scenario != "" {
				if out, err := tf.Kubectl("", "apply", "-f", file); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				defer func() {
					if out, err := tf.Kubectl("", "delete", "--wait", "-f", file); err != nil {
						t.Errorf("%v\n%s", err, out)
					}
					if _, err := tf.WaitRealized(90 * time.Second); err != nil {
						t.Errorf("after deleting %s: %v", scenario, err)
					}
				}()
			}
			built, err := tf.WaitRealized(90 * time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, tf.Logs(20))
			}
			expected, err := framework.Expected(built, pods, framework.ServedPorts)
			if err != nil {
				t.Fatal(err)
			}
			// The same matrix over IPv6: these policies select pods, not
			// addresses, so each cell's verdict is the IPv4 one.
			for _, family := range [][]framework.Pod{pods, v6} {
				probed := tf.Probe(family, framework.ServedPorts, framework.ProbeNetns)
				tf.Recheck(family, probed, expected, framework.ProbeNetns)
				if diffs := framework.Compare(probed, expected); len(diffs) > 0 {
					t.Errorf("%s: %d cells differ from explain:\n  %s\n%s", family[0].IP, len(diffs), strings.Join(diffs, "\n  "), framework.Grid(family, framework.ServedPorts, probed))
				}
			}
		})
	}

	// Both upstream conformance suites, a smoke of each: a TCP and a UDP
	// test, unmodified, their houses' pods spread over the three nodes
	// (most probes cross the tunnel). `make test-encap` runs them whole.
	t.Run("upstream-conformance", func(t *testing.T) {
		smoke := map[string][]string{
			"v0.1.7": {"AdminNetworkPolicyIngressTCP", "BaselineAdminNetworkPolicyEgressUDP"},
			"v0.2.0": {"CNPAdminTierEgressTCP", "CNPBaselineTierIngressUDP"},
		}
		for _, s := range conformance.Suites {
			s.Tests, s.KeepBaseResources = smoke[s.Version], false
			if len(s.Tests) == 0 {
				t.Fatalf("no smoke tests for %s", s.Name())
			}
			if err := conformance.WaitNamespacesGone(bed.Cluster.Kube, conformance.HousePrefix, 5*time.Minute); err != nil {
				t.Fatalf("before %s: %v", s.Name(), err)
			}
			dir := t.TempDir()
			res, err := s.Run(context.Background(), bed.Cluster.Kubeconfig, filepath.Join(bed.Dir, "suites"),
				filepath.Join(dir, "report.yaml"), filepath.Join(dir, "log.jsonl"), nil)
			if err != nil {
				t.Errorf("%s: %v", s.Name(), err)
				if res == nil {
					continue
				}
			}
			passed, failed, skipped := conformance.Tally(res.Cases)
			if passed == 0 || failed+skipped > 0 {
				t.Errorf("%s %v: %d passed, %d failed, %d skipped; want every case passed\n%s", s.Name(), s.Tests, passed, failed, skipped, conformance.Summary(res.Cases))
			}
			for _, c := range res.Cases {
				if c.Outcome == conformance.Fail {
					t.Logf("%s:\n%s", c.Name, c.Output)
				}
			}
		}
		if err := conformance.WaitNamespacesGone(bed.Cluster.Kube, conformance.HousePrefix, 5*time.Minute); err != nil {
			t.Error(err)
		}
	})

	// A pod to another node's hostNetwork server, at that node's
	// InternalIP: routed by the nodes' hosts and the underlay (the router
	// passes it: the node masquerades it to its own address).
	host := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "host-web", Namespace: "y"},
		Spec: corev1.PodSpec{NodeName: "node-2", HostNetwork: true, Containers: []corev1.Container{{
			Name: "main", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
			Command: []string{"/agnhost", "serve-hostname", "--tcp", "--http=false", "--port", "8080"},
		}}},
	}
	if _, err := bed.Cluster.Kube.CoreV1().Pods("y").Create(context.Background(), host, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node2 := bed.Nodes[1].IP + ":8080"
	var res testbed.ExecResult
	for i := 0; i < 20; i++ {
		if res = bed.Exec("x", "a", "/agnhost", "connect", node2, "--timeout=3s", "--protocol=tcp"); res.ExitCode == 0 {
			break
		}
		time.Sleep(time.Second) // the server is starting
	}
	if res.ExitCode != 0 {
		t.Errorf("x/a on node-1 -> node-2's hostNetwork server %s: %q %q", node2, res.Stdout, res.Stderr)
	}

	// tierctl trace through the controller, each agent tracing its own
	// node, under story 1: x may not reach y (decided by y/a's ingress on
	// node-3, after the tunnel from node-1), z may not open TCP/80 to x
	// (decided by z/a's egress on node-2).
	story1 := filepath.Join(root, "test", "e2e", "scenarios", "kep2091-story1-deny.yaml")
	if out, err := tf.Kubectl("", "apply", "-f", story1); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := tf.WaitRealized(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src, dst, port, verdict, decidedOn, tunnel string
	}{
		{"x/a", "y/a", "TCP/80", "Deny", "node-3", "tun_src=172.30.1.2,tun_dst=172.30.3.2,"},
		{"z/a", "x/a", "TCP/80", "Deny", "node-2", ""},
		{"z/a", "x/a", "TCP/81", "Allow", "", "tun_src=172.30.2.2,tun_dst=172.30.1.2,"},
	} {
		args := append([]string{"trace", "--src", tc.src, "--dst", tc.dst, "--port", tc.port, "-o", "json"}, tf.TierctlArgs()...)
		out, err := exec.Command(filepath.Join(tf.BinDir, "tierctl"), args...).CombinedOutput()
		var res traceResult
		if err == nil {
			err = json.Unmarshal(out, &res)
		}
		if err != nil || res.Verdict != tc.verdict {
			t.Errorf("tierctl trace %s -> %s %s: verdict %s (%v), want %s\n%s", tc.src, tc.dst, tc.port, res.Verdict, err, tc.verdict, out)
			continue
		}
		if tc.tunnel != "" && (len(res.Traces) != 2 || !strings.HasPrefix(res.Traces[1].Flow, tc.tunnel)) {
			t.Errorf("tierctl trace %s -> %s %s: want the destination's trace from the tunnel (%s)\n%s", tc.src, tc.dst, tc.port, tc.tunnel, out)
		}
		if tc.decidedOn != "" && (len(res.Decisions) == 0 || res.Decisions[0].Node != tc.decidedOn || res.Decisions[0].Action != string(model.ActionDeny) ||
			!strings.Contains(res.Decisions[0].Rule, "story1")) {
			t.Errorf("tierctl trace %s -> %s %s: decisions %+v, want a story1 Deny rule on %s", tc.src, tc.dst, tc.port, res.Decisions, tc.decidedOn)
		}
	}
}
