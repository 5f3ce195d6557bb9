//go:build clustere2e

package clustere2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/test/cluster"
)

const faultsNS = "faults"

// probeLoop is the clients' command: a new TCP connection to $TARGET
// every 200 ms, each outcome printed with its time.
var probeLoop = []string{"/bin/bash", "-c",
	`while :; do if /agnhost connect "$TARGET" --timeout=1s --protocol=tcp >/dev/null 2>&1; then r=ok; else r=fail; fi; echo "$(date +%s.%N) $r"; sleep 0.2; done`}

// testFaults runs each fault under continuous probes from two clients on
// one node to a server on another: "allowed" (a NetworkPolicy on the
// server admits it) and "denied" (the policy isolates the server from it).
// The faults hit the server's node, where the policy is enforced, and the
// controller. After each, the allowed connection must recover, the denied
// one must never have passed, and a policy change (the allowed client
// relabelled out of the policy, then back) must be enforced again.
func testFaults(t *testing.T) {
	ctx := context.Background()
	c, cs := env.c, env.cs
	serverNode, clientNode := c.Nodes[2], c.Nodes[1]
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: faultsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), faultsNS, metav1.DeleteOptions{})
	}()
	server := agnhostPod("server", serverNode.Name, map[string]string{"app": "server"}, []string{"netexec", "--http-port=8080", "--udp-port=-1"}, nil)
	if _, err := cs.CoreV1().Pods(faultsNS).Create(ctx, server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := waitPodReady(t, faultsNS, "server")
	target := net.JoinHostPort(srv.Status.PodIP, "8080")
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "server-ingress", Namespace: faultsNS},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "allowed"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(8080))}},
			}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(faultsNS).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"allowed", "denied"} {
		p := agnhostPod(role, clientNode.Name, map[string]string{"role": role}, nil, []corev1.EnvVar{{Name: "TARGET", Value: target}})
		p.Spec.Containers[0].Command = probeLoop
		p.Spec.Containers[0].Args = nil
		if _, err := cs.CoreV1().Pods(faultsNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPodReady(t, faultsNS, role)
	}
	if err := waitProbes(ctx, "allowed", time.Now(), true, time.Minute); err != nil {
		t.Fatalf("before any fault: %v", err)
	}

	var report []string
	var oldLeader string // the controller pod ControllerLeaderDeleted deleted
	faults := []struct {
		name   string
		inject func(t *testing.T) error
		settle func(t *testing.T) error
	}{
		{"AgentPodDeleted", func(t *testing.T) error {
			pod, err := agentPod(ctx, serverNode.Name)
			if err != nil {
				return err
			}
			return cs.CoreV1().Pods("kube-system").Delete(ctx, pod, metav1.DeleteOptions{})
		}, func(t *testing.T) error { return waitAgentReady(ctx, serverNode.Name, 3*time.Minute) }},
		{"OVSContainerKilled", func(t *testing.T) error {
			id, err := c.Exec(ctx, serverNode.Name, "sh", "-c",
				`ctr -n k8s.io containers ls -q 'labels."io.kubernetes.container.name"==ovs' | while read id; do ctr -n k8s.io tasks ls | awk -v id="$id" '$1==id && $3=="RUNNING" {print id}'; done`)
			if err != nil || strings.TrimSpace(id) == "" {
				return fmt.Errorf("finding the running ovs container on %s: %v %q", serverNode.Name, err, id)
			}
			_, err = c.Exec(ctx, serverNode.Name, "ctr", "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", strings.Fields(id)[0])
			return err
		}, func(t *testing.T) error { return waitAgentReady(ctx, serverNode.Name, 3*time.Minute) }},
		{"KubeletRestarted", func(t *testing.T) error {
			_, err := c.Exec(ctx, serverNode.Name, "pkill", "-x", "kubelet")
			return err
		}, func(t *testing.T) error { return waitNodeReady(ctx, serverNode.Name, 2*time.Minute) }},
		{"ControllerLeaderDeleted", func(t *testing.T) error {
			lease, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
			if err != nil || lease.Spec.HolderIdentity == nil {
				return fmt.Errorf("leader Lease: %v", err)
			}
			oldLeader = *lease.Spec.HolderIdentity
			return cs.CoreV1().Pods("kube-system").Delete(ctx, oldLeader, metav1.DeleteOptions{})
		}, func(t *testing.T) error { return waitControllerReady(ctx, oldLeader, 3*time.Minute) }},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			start := time.Now()
			if err := f.inject(t); err != nil {
				t.Fatal(err)
			}
			if err := f.settle(t); err != nil {
				t.Fatal(err)
			}
			settled := time.Since(start)
			if err := waitProbes(ctx, "allowed", start, true, 3*time.Minute); err != nil {
				t.Fatalf("allowed connections did not recover: %v", err)
			}
			allowed, err := probeLog(ctx, "allowed", start)
			if err != nil {
				t.Fatal(err)
			}
			outage, recovered := outageOf(allowed, start)
			// A policy change is enforced again: relabel the allowed
			// client out of the policy, then back.
			cut, err := relabelAndWait(ctx, "allowed", "paused", false)
			if err != nil {
				t.Fatal(err)
			}
			back, err := relabelAndWait(ctx, "allowed", "allowed", true)
			if err != nil {
				t.Fatal(err)
			}
			denied, err := probeLog(ctx, "denied", start)
			if err != nil {
				t.Fatal(err)
			}
			passed := 0
			for _, r := range denied {
				if r.ok {
					passed++
				}
			}
			if passed > 0 {
				t.Errorf("denied connections passed %d times during the fault", passed)
			}
			line := fmt.Sprintf("%-24s allowed: %s (recovered %v after the fault; the component back %v after it); denied: %d of %d probes passed; policy change enforced in %v (deny) and %v (allow again)",
				f.name, outage, recovered.Round(100*time.Millisecond), settled.Round(time.Second), passed, len(denied), cut.Round(100*time.Millisecond), back.Round(100*time.Millisecond))
			t.Log(line)
			report = append(report, line)
		})
	}
	if err := os.WriteFile(filepath.Join(env.out, "faults.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
		t.Error(err)
	}
}

func ptr[T any](v T) *T { return &v }

func agnhostPod(name, node string, labels map[string]string, args []string, envs []corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: faultsNS, Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "agnhost", Image: cluster.AgnhostImages[2], Args: args, Env: envs,
			}},
		},
	}
}

func waitPodReady(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := env.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && p.Status.PodIP != "" && podReady(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not Ready within 3 minutes: %v", ns, name, err)
		}
		time.Sleep(time.Second)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentPod names the agent pod of node.
func agentPod(ctx context.Context, node string) (string, error) {
	list, err := env.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", err
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("no agent pod on %s", node)
}

// waitAgentReady waits until node's agent pod is Ready with every
// container running.
func waitAgentReady(ctx context.Context, node string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	time.Sleep(2 * time.Second) // the kubelet notices a dead container within its sync period
	for {
		list, err := env.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + node})
		if err == nil && len(list.Items) == 1 && list.Items[0].DeletionTimestamp == nil && podReady(&list.Items[0]) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent of %s not Ready within %v: %v", node, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

func waitNodeReady(ctx context.Context, node string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	time.Sleep(5 * time.Second)
	for {
		n, err := env.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && time.Since(c.LastHeartbeatTime.Time) < 30*time.Second {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready within %v: %v", node, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// waitControllerReady waits for a leader other than oldLeader (the pod
// deleted, which holds the Lease while it terminates) and both replicas
// Ready.
func waitControllerReady(ctx context.Context, oldLeader string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		d, err := env.cs.AppsV1().Deployments("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
		lease, lerr := env.cs.CoordinationV1().Leases("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
		if err == nil && lerr == nil && d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
			lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != oldLeader {
			if _, err := env.cs.CoreV1().Pods("kube-system").Get(ctx, *lease.Spec.HolderIdentity, metav1.GetOptions{}); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller not back within %v: %v %v", timeout, err, lerr)
		}
		time.Sleep(time.Second)
	}
}

// probeResult is one line of a client's probe loop.
type probeResult struct {
	at time.Time
	ok bool
}

// probeLog reads pod's probe results since since.
func probeLog(ctx context.Context, pod string, since time.Time) ([]probeResult, error) {
	out, err := env.c.Kubectl(ctx, nil, "logs", "-n", faultsNS, pod, "--since-time="+since.Add(-time.Second).UTC().Format(time.RFC3339))
	if err != nil {
		return nil, err
	}
	var res []probeResult
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		secs, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, int64(secs*1e9))
		if at.Before(since) {
			continue
		}
		res = append(res, probeResult{at: at, ok: f[1] == "ok"})
	}
	sort.Slice(res, func(i, j int) bool { return res[i].at.Before(res[j].at) })
	return res, nil
}

// waitProbes waits until pod's last five probes since since all had the
// outcome want.
func waitProbes(ctx context.Context, pod string, since time.Time, want bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := probeLog(ctx, pod, since)
		if err == nil && len(res) >= 5 {
			good := true
			for _, r := range res[len(res)-5:] {
				good = good && r.ok == want
			}
			if good {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: probes did not settle to ok=%v within %v (%d results, %v)", pod, want, timeout, len(res), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// outageOf describes the failures in res (after the fault at start) and
// how long after start the connection last recovered.
func outageOf(res []probeResult, start time.Time) (string, time.Duration) {
	var fails int
	var lastFail time.Time
	for _, r := range res {
		if !r.ok {
			fails++
			lastFail = r.at
		}
	}
	if fails == 0 {
		return fmt.Sprintf("no failed probe of %d", len(res)), 0
	}
	for _, r := range res {
		if r.ok && r.at.After(lastFail) {
			return fmt.Sprintf("%d of %d probes failed", fails, len(res)), r.at.Sub(start)
		}
	}
	return fmt.Sprintf("%d of %d probes failed", fails, len(res)), time.Since(start)
}

// relabelAndWait sets the pod's role label and returns how long until its
// probes settled to want.
func relabelAndWait(ctx context.Context, pod, role string, want bool) (time.Duration, error) {
	start := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"role":%q}}}`, role)
	if _, err := env.cs.CoreV1().Pods(faultsNS).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := probeLog(ctx, pod, start)
		if err == nil {
			for _, r := range res {
				if r.ok == want {
					return r.at.Sub(start), nil
				}
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("relabelling %s to role=%s: probes never became ok=%v within a minute", pod, role, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
