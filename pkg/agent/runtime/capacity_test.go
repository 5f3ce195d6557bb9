package runtime_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestRuleCapacityDegradesPerPolicy: a node whose EgressAdmin table has
// more rules than priorities (63,001) keeps working. On a real OVS with a
// real controller and kube-apiserver: 630 AdminNetworkPolicies of 100
// egress rules for pod f (see createFillers) plus one high-precedence ANP fill the table
// exactly; one more ANP, the lowest in precedence (priority 1000), does
// not fit. It is left out on the node and its pod c is isolated for
// egress instead (fail closed: its own deny holds, and so does a deny of
// traffic it would not have judged), its Realized condition says why,
// while the high-precedence ANP stays enforced, other pods are untouched
// and a pod added afterwards gets network at once. When room is made the
// left-out ANP is installed and realized.
func TestRuleCapacityDegradesPerPolicy(t *testing.T) {
	c := livecluster.New(t)
	env := ovsenv.Start(t)
	br := env.AddBridge("n1")
	mac := func(i byte) net.HardwareAddr { return net.HardwareAddr{0x0a, 0x58, 0, 0, 0, i} }
	pfx := func(i int) netip.Prefix { return netip.MustParsePrefix(fmt.Sprintf("10.0.0.%d/16", i)) }
	a, b, cc, f := br.AddPod("a", mac(1), pfx(1)), br.AddPod("b", mac(2), pfx(2)), br.AddPod("c", mac(3), pfx(3)), br.AddPod("f", mac(5), pfx(5))
	for _, p := range []*ovsenv.Pod{a, b, cc} {
		for _, port := range []uint16{80, 8080} {
			srv := p.ListenTCP(port)
			t.Cleanup(srv.Close)
		}
	}
	tok := c.AddNode(t, "n1")
	for p, app := range map[*ovsenv.Pod]string{a: "a", b: "b", cc: "c", f: "filler"} {
		c.AddPod(t, p, "n1", map[string]string{"app": app})
	}

	ctx := context.Background()
	anps := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies()
	subject := func(app string) anpv1.AdminNetworkPolicySubject {
		return anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	}
	denyEgress := func(name string, priority int32, from, to string, port int32) *anpv1.AdminNetworkPolicy {
		return &anpv1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: anpv1.AdminNetworkPolicySpec{
			Priority: priority, Subject: subject(from),
			Egress: []anpv1.AdminNetworkPolicyEgressRule{{Name: "deny", Action: anpv1.AdminNetworkPolicyRuleActionDeny,
				To:    []anpv1.AdminNetworkPolicyEgressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": to}}}}},
				Ports: &[]anpv1.AdminNetworkPolicyPort{{PortNumber: &anpv1.Port{Protocol: "TCP", Port: port}}}}},
		}}
	}
	// First in precedence: a may not reach b on 80. Last: c may not reach
	// a on 80.
	for _, p := range []*anpv1.AdminNetworkPolicy{denyEgress("first", 0, "a", "b", 80), denyEgress("last", 1000, "c", "a", 80)} {
		if _, err := anps.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The fillers: f's egress.
	const fillers = (pipeline.RuleCapacity - 1) / 100
	start := time.Now()
	createFillers(t, c, 1, fillers)
	t.Logf("%d fillers created in %v", fillers, time.Since(start).Round(time.Millisecond))

	ctrl := c.StartController(t)
	defer ctrl.Kill()
	ag := livecluster.StartAgent(t, "n1", c.AgentOptions(env, br, "n1", tok, 1))
	start = time.Now()

	const lastRef = "AdminNetworkPolicy/last"
	lastCondition := func(want metav1.ConditionStatus, msg string) func() error {
		return func() error {
			got, err := anps.Get(ctx, "last", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionRealized)
			if cond == nil || cond.Status != want || !strings.Contains(cond.Message, msg) {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			return nil
		}
	}
	livecluster.Eventually(t, 5*time.Minute, "ANP last reported not fitting", lastCondition(metav1.ConditionFalse, "egress rules not installed"))
	t.Logf("over capacity, reported %v after the agent started", time.Since(start).Round(time.Millisecond))
	livecluster.Eventually(t, time.Minute, "agent ready", func() error {
		st, err := ag.Q.Status(ctx)
		if err != nil || !st.Ready || st.LastError != "" {
			return fmt.Errorf("status %+v, %v", st, err)
		}
		return nil
	})
	r, err := ag.Q.Realization(ctx)
	if err != nil {
		t.Fatal(err)
	}
	realized := 0
	for _, p := range r.Policies {
		switch {
		case p.Source.String() == lastRef:
			if !strings.Contains(p.Error, "fail closed") {
				t.Errorf("%s: error %q", lastRef, p.Error)
			}
		case p.Error != "":
			t.Errorf("%s: %s", p.Source, p.Error)
		default:
			realized++
		}
	}
	if realized != fillers+1 {
		t.Errorf("%d policies realized, want the %d that fit", realized, fillers+1)
	}
	full := []connection{
		{a, b, 80, false},    // first: enforced
		{a, b, 8080, true},   // untouched
		{b, a, 80, true},     // untouched
		{cc, a, 80, false},   // last's own deny, held by the isolation
		{cc, b, 8080, false}, // last would not judge this: denied (fail closed)
		{b, cc, 80, true},    // c's ingress is not last's
	}
	checkConnections(t, env, "table over capacity", full...)
	fl, err := ag.Q.Flows(ctx, agentquery.FlowFilter{Table: pipeline.EgressAdmin.String()})
	if err != nil {
		t.Fatal(err)
	}
	var overflow []string
	for _, x := range fl.Flows {
		if x.Role == pipeline.RoleOverflow.String() {
			overflow = append(overflow, x.Text)
		}
	}
	if len(overflow) != 1 || !strings.Contains(overflow[0], fmt.Sprintf("in_port=%d", cc.OFPort)) {
		t.Errorf("overflow flows %v, want one for c's port %d", overflow, cc.OFPort)
	}

	// A pod added now gets network: the node's updates go on.
	d := br.AddPod("d", mac(4), pfx(4))
	srv := d.ListenTCP(80)
	t.Cleanup(srv.Close)
	c.AddPod(t, d, "n1", map[string]string{"app": "d"})
	livecluster.Eventually(t, time.Minute, "d classified", func() error {
		pods, err := ag.Q.Pods(ctx)
		if err != nil {
			return err
		}
		for _, p := range pods.Pods {
			if p.Name == "d" && p.Error == "" {
				return nil
			}
		}
		return fmt.Errorf("pods %+v", pods.Pods)
	})
	checkConnections(t, env, "pod added over capacity", append(full, connection{a, d, 80, true}, connection{d, b, 8080, true})...)

	// Room again: one filler goes, last is installed.
	if err := anps.Delete(ctx, fillerName(1), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 5*time.Minute, "ANP last realized", lastCondition(metav1.ConditionTrue, "1/1 nodes realized"))
	checkConnections(t, env, "back under capacity",
		connection{a, b, 80, false}, connection{cc, a, 80, false}, connection{cc, b, 8080, true}, connection{cc, a, 8080, true})
}

func fillerName(i int) string { return fmt.Sprintf("filler-%04d", i) }

// createFillers creates ANPs filler-FROM..filler-TO (priority = number),
// each with 100 egress Deny rules for pods app=filler towards pods
// app=nobody (there are none), in parallel. A rule takes its priority in
// the table whether or not it has flows on the node; these have none, so
// that the bundles stay small (installing large bundles is the agent
// benchmark's business, not this test's).
func createFillers(t *testing.T, c *livecluster.Cluster, from, to int) {
	t.Helper()
	rules := make([]anpv1.AdminNetworkPolicyEgressRule, 100)
	for i := range rules {
		rules[i] = anpv1.AdminNetworkPolicyEgressRule{Name: fmt.Sprintf("deny-%d", i), Action: anpv1.AdminNetworkPolicyRuleActionDeny,
			To: []anpv1.AdminNetworkPolicyEgressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "nobody"}}}}}}
	}
	anps := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies()
	work := make(chan int)
	errs := make(chan error, to-from+1)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				_, err := anps.Create(context.Background(), &anpv1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fillerName(i)}, Spec: anpv1.AdminNetworkPolicySpec{
					Priority: int32(i), Egress: rules,
					Subject: anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "filler"}}}},
				}}, metav1.CreateOptions{})
				errs <- err
			}
		}()
	}
	for i := from; i <= to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
