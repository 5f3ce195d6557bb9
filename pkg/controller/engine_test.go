package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestPoliciesOfAllKindsFlowIntoEngine creates, updates and deletes every
// policy kind through the real API and checks what the engine computed, as
// observed through the controller; pod and namespace relabels flow through.
func TestPoliciesOfAllKindsFlowIntoEngine(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	ctl := startController(t, c, "ctl")
	ctx := context.Background()
	engine := ctl.Engine()

	createNode(t, c, "node-1", "192.168.0.1")
	createNode(t, c, "node-2", "192.168.0.2")
	c.CreateNamespace(t, "frontend", map[string]string{"tier": "web"})
	c.CreateNamespace(t, "backend", map[string]string{"tier": "db"})
	createPod(t, c, "frontend", "web-1", "node-1", "10.1.0.1", map[string]string{"app": "web"})
	createPod(t, c, "backend", "db-1", "node-2", "10.1.0.2", map[string]string{"app": "db"})
	createPod(t, c, "backend", "db-2", "node-1", "10.1.0.3", map[string]string{"app": "db"})

	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "db-from-web", Namespace: "backend"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}}},
			}},
		},
	}
	if _, err := c.Kube.NetworkingV1().NetworkPolicies("backend").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	anp := &v1alpha1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-web-to-db"},
		Spec: v1alpha1.AdminNetworkPolicySpec{
			Priority: 20,
			Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}},
			Ingress: []v1alpha1.AdminNetworkPolicyIngressRule{{
				Name:   "deny-web",
				Action: v1alpha1.AdminNetworkPolicyRuleActionDeny,
				From:   []v1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}}},
			}},
		},
	}
	if _, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	banp := &v1alpha1.BaselineAdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: v1alpha1.BaselineAdminNetworkPolicySpec{
			Subject: v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			Egress: []v1alpha1.BaselineAdminNetworkPolicyEgressRule{{
				Action: v1alpha1.BaselineAdminNetworkPolicyRuleActionDeny,
				To:     []v1alpha1.BaselineAdminNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}},
			}},
		},
	}
	if _, err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().Create(ctx, banp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cnp := &v1alpha2.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pass-web"},
		Spec: v1alpha2.ClusterNetworkPolicySpec{
			Tier:     v1alpha2.AdminTier,
			Priority: 5,
			Subject:  v1alpha2.ClusterNetworkPolicySubject{Pods: &v1alpha2.NamespacedPod{NamespaceSelector: metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			Egress: []v1alpha2.ClusterNetworkPolicyEgressRule{{
				Action: v1alpha2.ClusterNetworkPolicyRuleActionPass,
				To:     []v1alpha2.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}},
			}},
		},
	}
	if _, err := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies().Create(ctx, cnp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	type want struct {
		kind      model.PolicyKind
		ns, name  string
		tier      model.Tier
		priority  int32
		action    model.Action
		direction model.Direction
		applied   []string
		peers     []string
	}
	check := func(wants ...want) func() error {
		return func() error {
			s := engine.Snapshot()
			if len(s.Policies) != len(wants) {
				return fmt.Errorf("%d policies, want %d", len(s.Policies), len(wants))
			}
			for i, w := range wants {
				p := findPolicy(s, w.kind, w.ns, w.name)
				if p == nil {
					return fmt.Errorf("%s %s/%s not computed", w.kind, w.ns, w.name)
				}
				// Snapshot policies come in evaluation order.
				if s.Policies[i] != p {
					return fmt.Errorf("policy %d is %s, want %s", i, s.Policies[i].Source, p.Source)
				}
				if p.Tier != w.tier || p.Priority != w.priority {
					return fmt.Errorf("%s: tier %s priority %d, want %s %d", p.Source, p.Tier, p.Priority, w.tier, w.priority)
				}
				if len(p.Rules) != 1 || p.Rules[0].Action != w.action || p.Rules[0].Direction != w.direction {
					return fmt.Errorf("%s: rules %+v, want one %s %s rule", p.Source, p.Rules, w.direction, w.action)
				}
				if got := appliedPods(s, p); !slices.Equal(got, w.applied) {
					return fmt.Errorf("%s applies to %v, want %v", p.Source, got, w.applied)
				}
				if got := peerPods(s, p.Rules[0]); !slices.Equal(got, w.peers) {
					return fmt.Errorf("%s rule peers %v, want %v", p.Source, got, w.peers)
				}
			}
			return nil
		}
	}
	all := []string{"backend/db-1", "backend/db-2", "frontend/web-1"}
	cnpWant := want{model.KindClusterNetworkPolicy, "", "pass-web", model.TierAdmin, 5, model.ActionPass, model.DirectionOut, []string{"frontend/web-1"}, all}
	anpWant := want{model.KindAdminNetworkPolicy, "", "deny-web-to-db", model.TierAdmin, 20, model.ActionDeny, model.DirectionIn, []string{"backend/db-1", "backend/db-2"}, []string{"frontend/web-1"}}
	npWant := want{model.KindNetworkPolicy, "backend", "db-from-web", model.TierNetworkPolicy, 0, model.ActionAllow, model.DirectionIn, []string{"backend/db-1", "backend/db-2"}, []string{"frontend/web-1"}}
	banpWant := want{model.KindBaselineAdminNetworkPolicy, "", "default", model.TierBaseline, 0, model.ActionDeny, model.DirectionOut, all, all}
	eventually(t, "all four kinds computed", check(cnpWant, anpWant, npWant, banpWant))

	// Pod relabel: db-2 stops being a db pod; it leaves the NetworkPolicy's
	// applied-to group (the ANP selects by namespace and keeps it).
	pod, err := c.Kube.CoreV1().Pods("backend").Get(ctx, "db-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"app": "cache"}
	if _, err := c.Kube.CoreV1().Pods("backend").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	npWant.applied = []string{"backend/db-1"}
	eventually(t, "pod relabel", check(cnpWant, anpWant, npWant, banpWant))

	// Namespace relabel: frontend is no longer tier=web, so the ANP's and
	// the NetworkPolicy's peers lose web-1.
	patch := []byte(`{"metadata":{"labels":{"tier":"edge"}}}`)
	if _, err := c.Kube.CoreV1().Namespaces().Patch(ctx, "frontend", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	anpWant.peers, npWant.peers = nil, nil
	eventually(t, "namespace relabel", check(cnpWant, anpWant, npWant, banpWant))

	// Policy update: the ANP moves ahead of the CNP.
	gotANP, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, "deny-web-to-db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gotANP.Spec.Priority = 1
	gotANP.Spec.Ingress[0].From[0].Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}
	if _, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Update(ctx, gotANP, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	anpWant.priority, anpWant.peers = 1, []string{"frontend/web-1"}
	eventually(t, "ANP update", check(anpWant, cnpWant, npWant, banpWant))

	// Pod deletion leaves every group.
	if err := c.Kube.CoreV1().Pods("frontend").Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	anpWant.peers = nil
	cnpWant.applied = nil
	cnpWant.peers = []string{"backend/db-1", "backend/db-2"}
	banpWant.applied, banpWant.peers = cnpWant.peers, cnpWant.peers
	eventually(t, "pod deletion", check(anpWant, cnpWant, npWant, banpWant))

	// Deletes of every kind.
	if err := c.Kube.NetworkingV1().NetworkPolicies("backend").Delete(ctx, "db-from-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies().Delete(ctx, "pass-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NP and CNP deletion", check(anpWant, banpWant))
	if err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Delete(ctx, "deny-web-to-db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every policy deleted", check())
	eventually(t, "groups released", func() error {
		s := engine.Snapshot()
		if len(s.AppliedToGroups)+len(s.AddressGroups) != 0 {
			return fmt.Errorf("%d applied-to and %d address groups remain", len(s.AppliedToGroups), len(s.AddressGroups))
		}
		return nil
	})
}
