package kubeapi

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"
)

func TestControlPlaneServesPoliciesAndStopsCleanly(t *testing.T) {
	var pids []int
	var dir string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, WithCRDs())
		dir = c.Dir
		for _, p := range c.processes {
			pids = append(pids, p.cmd.Process.Pid)
		}
		ctx := context.Background()
		c.CreateNamespace(t, "team-a", map[string]string{"team": "a"})
		anp := &v1alpha1.AdminNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "deny-a"},
			Spec: v1alpha1.AdminNetworkPolicySpec{
				Priority: 10,
				Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
				Ingress: []v1alpha1.AdminNetworkPolicyIngressRule{{
					Action: v1alpha1.AdminNetworkPolicyRuleActionDeny,
					From:   []v1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
				}},
			},
		}
		if _, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ANP: %v", err)
		}
		// The real CRD validation is in force: priority above 1000 is rejected.
		bad := anp.DeepCopy()
		bad.Name, bad.Spec.Priority = "too-high", 5000
		if _, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, bad, metav1.CreateOptions{}); err == nil {
			t.Fatalf("ANP with priority 5000 accepted; CRD validation missing")
		}
		cnp := &v1alpha2.ClusterNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "baseline"},
			Spec: v1alpha2.ClusterNetworkPolicySpec{
				Tier:     v1alpha2.BaselineTier,
				Priority: 3,
				Subject:  v1alpha2.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			},
		}
		if _, err := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies().Create(ctx, cnp, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CNP: %v", err)
		}
		out := c.Kubectl(t, "get", "adminnetworkpolicies,clusternetworkpolicies", "-o", "name")
		for _, want := range []string{"adminnetworkpolicy.policy.networking.k8s.io/deny-a", "clusternetworkpolicy.policy.networking.k8s.io/baseline"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get: %q missing from\n%s", want, out)
			}
		}
	})
	if len(pids) < 2 {
		t.Fatalf("expected etcd and kube-apiserver processes, got %v", pids)
	}
	for _, pid := range pids {
		// Signal 0 probes existence: the cleanup must have reaped every daemon.
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still running after cleanup", pid)
		}
	}
	if _, err := syscall.Getpgid(pids[0]); err == nil {
		t.Errorf("process group of %d still exists", pids[0])
	}
	if st := dirExists(dir); st {
		t.Errorf("cluster directory %s left behind", dir)
	}
}

func TestCRDsWithoutValidationAcceptInvalidObjects(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	// Before installation the kind does not exist.
	if _, err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatalf("BANP served before its CRD was installed")
	}
	c.InstallCRDs(t, CRDOptions{CRDs: []CRD{CRDBaselineAdminNetworkPolicy}})
	other := &v1alpha1.BaselineAdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec:       v1alpha1.BaselineAdminNetworkPolicySpec{Subject: v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}},
	}
	if _, err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().Create(ctx, other, metav1.CreateOptions{}); err == nil {
		t.Fatalf("BANP named other accepted by the real CRD")
	}
	c.InstallCRDs(t, CRDOptions{CRDs: []CRD{CRDBaselineAdminNetworkPolicy}, WithoutValidation: true})
	created, err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().Create(ctx, other, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("BANP named other rejected without validation: %v", err)
	}
	// The status subresource survives: status is written separately.
	created.Status.Conditions = []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionFalse, Reason: "Test", Message: "m", LastTransitionTime: metav1.Now()}}
	if _, err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status update: %v", err)
	}
	c.DeleteCRDs(t, CRDBaselineAdminNetworkPolicy)
	if _, err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatalf("BANP still served after its CRD was deleted")
	}
}

func TestControllerManagerAndScheduler(t *testing.T) {
	c := Start(t, WithControllerManager(), WithScheduler())
	ctx := context.Background()
	// Start waited for the default service account; pods are admitted.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	created, err := c.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	if created.Spec.ServiceAccountName != "default" {
		t.Errorf("ServiceAccount admission did not run: serviceAccountName=%q", created.Spec.ServiceAccountName)
	}
}

func TestConfigForIsSubjectToRBAC(t *testing.T) {
	c := Start(t)
	kube, err := kubernetes.NewForConfig(c.ConfigFor(t, "alice", "tierflow-testers"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("alice listed namespaces without a role: %v", err)
	}
	c.Kubectl(t, "create", "clusterrole", "ns-reader", "--verb=list", "--resource=namespaces")
	c.Kubectl(t, "create", "clusterrolebinding", "ns-reader", "--clusterrole=ns-reader", "--group=tierflow-testers")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice cannot list namespaces with a role bound to her group: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
