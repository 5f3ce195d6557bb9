package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// waitTimeout is generous: the machine running the tests may be busy.
const waitTimeout = 60 * time.Second

// startController runs a controller against the cluster until the test
// ends and waits for its caches.
func startController(t *testing.T, c *kubeapi.Cluster, identity string) *controller.Controller {
	t.Helper()
	ctl := runController(t, controller.Config{
		Kube: c.Kube, Policy: c.Policy, Identity: identity,
		CRDPollInterval: 200 * time.Millisecond,
	})
	eventually(t, "controller caches synced", func() error {
		if !ctl.HasSynced() {
			return fmt.Errorf("not synced")
		}
		return nil
	})
	return ctl
}

// runController runs a controller until the test ends.
func runController(t *testing.T, cfg controller.Config) *controller.Controller {
	t.Helper()
	identity := cfg.Identity
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatalf("controller.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller %s: Run: %v", identity, err)
		}
	})
	return ctl
}

// eventually retries check until it passes or waitTimeout elapses.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, waitTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func findPolicy(s *model.Snapshot, kind model.PolicyKind, namespace, name string) *model.Policy {
	for _, p := range s.Policies {
		if p.Source.Kind == kind && p.Source.Namespace == namespace && p.Source.Name == name {
			return p
		}
	}
	return nil
}

// appliedPods lists NAMESPACE/NAME of every pod a policy applies to.
func appliedPods(s *model.Snapshot, p *model.Policy) []string {
	var out []string
	for _, id := range p.AppliedToGroups {
		g := s.AppliedToGroups[id]
		if g == nil {
			continue
		}
		for _, e := range g.MembersByNode {
			for _, m := range e.Members {
				if m.Pod != nil {
					out = append(out, m.Pod.String())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// peerPods lists the pods in the address groups of a policy's rule.
func peerPods(s *model.Snapshot, r model.Rule) []string {
	var out []string
	for _, id := range r.Peer.AddressGroups {
		g := s.AddressGroups[id]
		if g == nil {
			continue
		}
		for _, m := range g.Members {
			if m.Pod != nil {
				out = append(out, m.Pod.String())
			}
		}
	}
	slices.Sort(out)
	return out
}

// createPod creates a running pod on a node with an IP, as a kubelet and
// CNI would leave it (there is no kubelet in the test cluster).
func createPod(t *testing.T, c *kubeapi.Cluster, ns, name, node, ip string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
	}
	created, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	created.Status.Phase = corev1.PodRunning
	created.Status.PodIP = ip
	created.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if _, err := c.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting pod %s/%s status: %v", ns, name, err)
	}
}

func createNode(t *testing.T, c *kubeapi.Cluster, name, ip string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	created, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting node %s status: %v", name, err)
	}
}

// conditionIs checks one condition of a status; status "" means absent.
func conditionIs(conds []metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason string) error {
	c := meta.FindStatusCondition(conds, typ)
	if status == "" {
		if c != nil {
			return fmt.Errorf("condition %s present (%s %s: %s), want absent", typ, c.Status, c.Reason, c.Message)
		}
		return nil
	}
	if c == nil {
		return fmt.Errorf("condition %s absent; conditions: %s", typ, describeConditions(conds))
	}
	if c.Status != status || (reason != "" && c.Reason != reason) {
		return fmt.Errorf("condition %s is %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	if c.ObservedGeneration != generation {
		return fmt.Errorf("condition %s observedGeneration %d, want %d", typ, c.ObservedGeneration, generation)
	}
	return nil
}

func describeConditions(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// counter reads a counter of the controller's metrics, summed over label
// sets matching labels.
func counter(t *testing.T, ctl *controller.Controller, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctl.Gatherer().Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsMatch(m, labels) {
				switch {
				case m.Counter != nil:
					sum += m.Counter.GetValue()
				case m.Gauge != nil:
					sum += m.Gauge.GetValue()
				}
			}
		}
	}
	return sum
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
