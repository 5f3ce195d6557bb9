package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestForbiddenKindDoesNotBlockOtherKinds runs the controller as a user
// that may not read ClusterNetworkPolicies (their CRD is installed): the
// CNP informer never lists, yet AdminNetworkPolicy status is written once
// KindSyncGrace has passed.
func TestForbiddenKindDoesNotBlockOtherKinds(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	ctx := context.Background()
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-without-cnp"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
			{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"adminnetworkpolicies", "baselineadminnetworkpolicies"}, Verbs: read},
			{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"adminnetworkpolicies/status", "baselineadminnetworkpolicies/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-without-cnp"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tierflow"}},
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := c.ConfigFor(t, "tierflow")
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := npclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctl := runController(t, controller.Config{
		Kube: kube, Policy: policy, Identity: "restricted",
		CRDPollInterval: 200 * time.Millisecond, KindSyncGrace: 3 * time.Second,
	})

	anps := c.Policy.PolicyV1alpha1().AdminNetworkPolicies()
	for _, name := range []string{"twin-a", "twin-b"} {
		if _, err := anps.Create(ctx, allNamespacesANP(name, 50), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "ANP status written despite the forbidden CNP kind", func() error {
		for _, name := range []string{"twin-a", "twin-b"} {
			o, err := anps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := conditionIs(o.Status.Conditions, o.Generation, controller.ConditionWarning, metav1.ConditionTrue, "SamePriority"); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
	if ctl.HasSynced() {
		t.Errorf("controller reports synced though it cannot list ClusterNetworkPolicies")
	}
}
