package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/kubeapi"
)

func allNamespacesANP(name string, priority int32) *v1alpha1.AdminNetworkPolicy {
	return &v1alpha1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AdminNetworkPolicySpec{
			Priority: priority,
			Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			Ingress: []v1alpha1.AdminNetworkPolicyIngressRule{{
				Action: v1alpha1.AdminNetworkPolicyRuleActionAllow,
				From:   []v1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
			}},
		},
	}
}

func adminCNP(name string, tier v1alpha2.Tier, priority int32) *v1alpha2.ClusterNetworkPolicy {
	return &v1alpha2.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha2.ClusterNetworkPolicySpec{
			Tier:     tier,
			Priority: priority,
			Subject:  v1alpha2.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			Ingress: []v1alpha2.ClusterNetworkPolicyIngressRule{{
				Action: v1alpha2.ClusterNetworkPolicyRuleActionAccept,
				From:   []v1alpha2.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
			}},
		},
	}
}

// TestStatusConditionsOnInvalidPolicies creates objects the real CRD
// validation would reject (schemas dropped) and others it accepts but
// tierflow cannot enforce, and checks the conditions on the real objects.
func TestStatusConditionsOnInvalidPolicies(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs(kubeapi.CRDOptions{WithoutValidation: true}))
	ctl := startController(t, c, "ctl")
	ctx := context.Background()
	cnps := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies()
	anps := c.Policy.PolicyV1alpha1().AdminNetworkPolicies()
	banps := c.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies()

	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := cnps.Create(ctx, adminCNP("bogus-tier", "Bogus", 10), metav1.CreateOptions{})
	mustCreate(err)
	_, err = cnps.Create(ctx, adminCNP("too-high", v1alpha2.AdminTier, 5000), metav1.CreateOptions{})
	mustCreate(err)
	domains := adminCNP("domains", v1alpha2.AdminTier, 11)
	domains.Spec.Ingress = nil
	domains.Spec.Egress = []v1alpha2.ClusterNetworkPolicyEgressRule{{
		Action: v1alpha2.ClusterNetworkPolicyRuleActionAccept,
		To:     []v1alpha2.ClusterNetworkPolicyEgressPeer{{DomainNames: []v1alpha2.DomainName{"example.com"}}},
	}}
	_, err = cnps.Create(ctx, domains, metav1.CreateOptions{})
	mustCreate(err)
	_, err = cnps.Create(ctx, adminCNP("good", v1alpha2.BaselineTier, 12), metav1.CreateOptions{})
	mustCreate(err)
	_, err = banps.Create(ctx, &v1alpha1.BaselineAdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec:       v1alpha1.BaselineAdminNetworkPolicySpec{Subject: v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}},
	}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = anps.Create(ctx, allNamespacesANP("twin-a", 30), metav1.CreateOptions{})
	mustCreate(err)
	_, err = anps.Create(ctx, allNamespacesANP("twin-b", 30), metav1.CreateOptions{})
	mustCreate(err)

	type expect struct {
		typ    string
		status metav1.ConditionStatus
		reason string
	}
	cnpHas := func(name string, want ...expect) func() error {
		return func() error {
			o, err := cnps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, w := range want {
				if err := conditionIs(o.Status.Conditions, o.Generation, w.typ, w.status, w.reason); err != nil {
					return fmt.Errorf("CNP %s: %w", name, err)
				}
			}
			return nil
		}
	}
	anpHas := func(name string, want ...expect) func() error {
		return func() error {
			o, err := anps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, w := range want {
				if err := conditionIs(o.Status.Conditions, o.Generation, w.typ, w.status, w.reason); err != nil {
					return fmt.Errorf("ANP %s: %w", name, err)
				}
			}
			return nil
		}
	}
	accepted := expect{controller.ConditionAccepted, metav1.ConditionTrue, "Accepted"}
	eventually(t, "unknown tier", cnpHas("bogus-tier", accepted, expect{controller.ConditionValid, metav1.ConditionFalse, "UnknownTier"}))
	eventually(t, "priority out of range", cnpHas("too-high", accepted, expect{controller.ConditionValid, metav1.ConditionFalse, "InvalidPriority"}))
	eventually(t, "unsupported peer", cnpHas("domains", accepted, expect{controller.ConditionValid, metav1.ConditionFalse, "UnsupportedPeer"}))
	eventually(t, "valid policy", cnpHas("good", accepted, expect{controller.ConditionValid, metav1.ConditionTrue, "Valid"}, expect{controller.ConditionWarning, "", ""}))
	eventually(t, "BANP not named default", func() error {
		o, err := banps.Get(ctx, "other", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(o.Status.Conditions, o.Generation, controller.ConditionAccepted, metav1.ConditionFalse, "NotDefaultBaseline"); err != nil {
			return err
		}
		return conditionIs(o.Status.Conditions, o.Generation, controller.ConditionValid, "", "")
	})
	samePrio := expect{controller.ConditionWarning, metav1.ConditionTrue, "SamePriority"}
	eventually(t, "same-priority warning on twin-a", anpHas("twin-a", accepted, samePrio))
	eventually(t, "same-priority warning on twin-b", anpHas("twin-b", accepted, samePrio))
	a, err := anps.Get(ctx, "twin-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := meta.FindStatusCondition(a.Status.Conditions, controller.ConditionWarning); w == nil || !strings.Contains(w.Message, "twin-b") {
		t.Errorf("twin-a's warning does not name twin-b: %+v", w)
	}

	// One twin changes priority: the warning goes from both, and the
	// changed one reports its new generation.
	b, err := anps.Get(ctx, "twin-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.Priority = 31
	if _, err := anps.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	noWarning := expect{controller.ConditionWarning, "", ""}
	eventually(t, "warning removed from twin-a", anpHas("twin-a", accepted, noWarning))
	eventually(t, "warning removed from twin-b at its new generation", anpHas("twin-b", accepted, noWarning, expect{controller.ConditionValid, metav1.ConditionTrue, "Valid"}))

	// Fixing a policy clears its error.
	fixed, err := cnps.Get(ctx, "bogus-tier", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixed.Spec.Tier = v1alpha2.AdminTier
	if _, err := cnps.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "fixed tier", cnpHas("bogus-tier", accepted, expect{controller.ConditionValid, metav1.ConditionTrue, "Valid"}))

	// Steady state: no further writes (no write storms from our own
	// status updates coming back through the informers).
	time.Sleep(2 * time.Second)
	writes := counter(t, ctl, "tierflow_controller_status_writes_total", nil)
	versions := map[string]string{}
	for _, name := range []string{"bogus-tier", "too-high", "domains", "good"} {
		o, err := cnps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		versions[name] = o.ResourceVersion
	}
	time.Sleep(3 * time.Second)
	if after := counter(t, ctl, "tierflow_controller_status_writes_total", nil); after != writes {
		t.Errorf("status writes went on in steady state: %v -> %v", writes, after)
	}
	for name, rv := range versions {
		o, err := cnps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o.ResourceVersion != rv {
			t.Errorf("CNP %s rewritten in steady state (resourceVersion %s -> %s)", name, rv, o.ResourceVersion)
		}
	}
	if writes == 0 || writes > 30 {
		t.Errorf("%v status writes for 7 objects and 3 changes; want a handful", writes)
	}
}

// npEventsSelector selects the Events of the NetworkPolicy name with uid.
func npEventsSelector(name string, uid types.UID) string {
	return fields.Set{
		"involvedObject.kind": "NetworkPolicy",
		"involvedObject.name": name,
		"involvedObject.uid":  string(uid),
	}.AsSelector().String()
}

// TestNetworkPolicyFindingsBecomeEvents checks that a NetworkPolicy
// finding (it has no status) is reported as an Event, once.
func TestNetworkPolicyFindingsBecomeEvents(t *testing.T) {
	c := kubeapi.Start(t)
	startController(t, c, "ctl")
	ctx := context.Background()
	c.CreateNamespace(t, "shop", nil)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-only", Namespace: "shop"},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			// Ingress rules without Ingress in policyTypes are ignored.
			Ingress: []networkingv1.NetworkPolicyIngressRule{{}},
		},
	}
	created, err := c.Kube.NetworkingV1().NetworkPolicies("shop").Create(ctx, np, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := npEventsSelector("egress-only", created.UID)
	var events []corev1.Event
	eventually(t, "event for the ignored rules", func() error {
		list, err := c.Kube.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return err
		}
		events = list.Items
		for _, e := range events {
			if e.Type == corev1.EventTypeWarning && e.Reason == "RulesIgnored" && strings.HasPrefix(e.Message, "Warning: ") {
				return nil
			}
		}
		return fmt.Errorf("no RulesIgnored event among %d", len(events))
	})
	if events[0].Source.Component != "tierflow-controller" {
		t.Errorf("event source %q", events[0].Source.Component)
	}
	// A label change does not change the findings: no new event.
	time.Sleep(time.Second)
	np2, err := c.Kube.NetworkingV1().NetworkPolicies("shop").Get(ctx, "egress-only", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np2.Labels = map[string]string{"touched": "yes"}
	if _, err := c.Kube.NetworkingV1().NetworkPolicies("shop").Update(ctx, np2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	list, err := c.Kube.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var count int32
	for _, e := range list.Items {
		count += max(e.Count, 1)
	}
	if count != 1 {
		t.Errorf("%d events for one unchanged finding, want 1", count)
	}
}

// TestNetworkPolicyFindingsFollowUpdates checks Events across updates of
// one NetworkPolicy: none while it is clean, one when an update gives it
// a finding, none when the finding is fixed, and one more when it comes
// back (the controller queues a NetworkPolicy only when it has findings
// to report or findings on record).
func TestNetworkPolicyFindingsFollowUpdates(t *testing.T) {
	c := kubeapi.Start(t)
	startController(t, c, "ctl")
	ctx := context.Background()
	c.CreateNamespace(t, "shop", nil)
	egressOnly := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	created, err := c.Kube.NetworkingV1().NetworkPolicies("shop").Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "flip", Namespace: "shop"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := npEventsSelector("flip", created.UID)
	// count is how many RulesIgnored events were emitted for the policy
	// (a repeated event is one object with a count).
	count := func() (int32, error) {
		list, err := c.Kube.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return 0, err
		}
		var n int32
		for _, e := range list.Items {
			if e.Reason == "RulesIgnored" {
				n += max(e.Count, 1)
			}
		}
		return n, nil
	}
	setIngress := func(rules []networkingv1.NetworkPolicyIngressRule) {
		t.Helper()
		np, err := c.Kube.NetworkingV1().NetworkPolicies("shop").Get(ctx, "flip", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		np.Spec.Ingress = rules // ignored: policyTypes has no Ingress
		if _, err := c.Kube.NetworkingV1().NetworkPolicies("shop").Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, n int32) {
		t.Helper()
		eventually(t, what, func() error {
			if got, err := count(); err != nil || got != n {
				return fmt.Errorf("%d RulesIgnored events (err %v), want %d", got, err, n)
			}
			return nil
		})
	}
	time.Sleep(time.Second)
	want("no event while clean", 0)
	setIngress([]networkingv1.NetworkPolicyIngressRule{{}})
	want("an event for the new finding", 1)
	setIngress(nil)
	time.Sleep(2 * time.Second)
	want("no event when the finding is fixed", 1)
	setIngress([]networkingv1.NetworkPolicyIngressRule{{}, {}})
	want("another event when a finding comes back", 2)
}

// TestMissingCRDsArePickedUpLater starts the controller with no policy CRD
// installed, then installs them one by one.
func TestMissingCRDsArePickedUpLater(t *testing.T) {
	c := kubeapi.Start(t)
	ctl := startController(t, c, "ctl")
	ctx := context.Background()
	if kinds := ctl.WatchedKinds(); len(kinds) != 0 {
		t.Fatalf("watching %v with no CRD installed", kinds)
	}
	// NetworkPolicies work without any CRD.
	c.CreateNamespace(t, "a", nil)
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-all", Namespace: "a"}}
	if _, err := c.Kube.NetworkingV1().NetworkPolicies("a").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NetworkPolicy computed without CRDs", func() error {
		if findPolicy(ctl.Engine().Snapshot(), model.KindNetworkPolicy, "a", "deny-all") == nil {
			return fmt.Errorf("not computed")
		}
		return nil
	})

	c.InstallCRDs(t, kubeapi.CRDOptions{CRDs: []kubeapi.CRD{kubeapi.CRDAdminNetworkPolicy}})
	eventually(t, "ANP kind watched", func() error {
		if !slices.Equal(ctl.WatchedKinds(), []model.PolicyKind{model.KindAdminNetworkPolicy}) {
			return fmt.Errorf("watching %v", ctl.WatchedKinds())
		}
		return nil
	})
	if _, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, allNamespacesANP("late", 7), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ANP computed and accepted", func() error {
		if findPolicy(ctl.Engine().Snapshot(), model.KindAdminNetworkPolicy, "", "late") == nil {
			return fmt.Errorf("not computed")
		}
		o, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionIs(o.Status.Conditions, o.Generation, controller.ConditionAccepted, metav1.ConditionTrue, "Accepted")
	})

	// A CNP created before its CRD is seen by the controller is picked up
	// with the CRD: install the CRD and create at once.
	c.InstallCRDs(t, kubeapi.CRDOptions{CRDs: []kubeapi.CRD{kubeapi.CRDClusterNetworkPolicy, kubeapi.CRDBaselineAdminNetworkPolicy}})
	if _, err := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies().Create(ctx, adminCNP("late-cnp", v1alpha2.AdminTier, 7), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "CNP computed; same priority as the ANP warned on both", func() error {
		if got := len(ctl.WatchedKinds()); got != 3 {
			return fmt.Errorf("watching %v", ctl.WatchedKinds())
		}
		if findPolicy(ctl.Engine().Snapshot(), model.KindClusterNetworkPolicy, "", "late-cnp") == nil {
			return fmt.Errorf("CNP not computed")
		}
		o, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionIs(o.Status.Conditions, o.Generation, controller.ConditionWarning, metav1.ConditionTrue, "SamePriority"); err != nil {
			return fmt.Errorf("ANP: %w", err)
		}
		cnp, err := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies().Get(ctx, "late-cnp", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionIs(cnp.Status.Conditions, cnp.Generation, controller.ConditionWarning, metav1.ConditionTrue, "SamePriority")
	})
}

// TestDeletedCRDDropsItsPolicies deletes a CRD while the controller runs:
// its objects leave the engine; reinstalled, the kind works again.
func TestDeletedCRDDropsItsPolicies(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	ctl := startController(t, c, "ctl")
	ctx := context.Background()
	cnps := c.Policy.PolicyV1alpha2().ClusterNetworkPolicies()
	if _, err := cnps.Create(ctx, adminCNP("doomed", v1alpha2.AdminTier, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	computed := func(name string, want bool) func() error {
		return func() error {
			if got := findPolicy(ctl.Engine().Snapshot(), model.KindClusterNetworkPolicy, "", name) != nil; got != want {
				return fmt.Errorf("CNP %s computed=%v, want %v", name, got, want)
			}
			return nil
		}
	}
	eventually(t, "CNP computed", computed("doomed", true))
	c.DeleteCRDs(t, kubeapi.CRDClusterNetworkPolicy)
	eventually(t, "CNP dropped with its CRD", computed("doomed", false))

	c.InstallCRDs(t, kubeapi.CRDOptions{CRDs: []kubeapi.CRD{kubeapi.CRDClusterNetworkPolicy}})
	if _, err := cnps.Create(ctx, adminCNP("reborn", v1alpha2.AdminTier, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer's watch retries with backoff while the CRD is gone.
	deadline := time.Now().Add(90 * time.Second)
	for computed("reborn", true)() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("CNP created after the CRD came back not computed in 90s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
