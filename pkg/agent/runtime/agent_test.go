package runtime_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestTwoNodes runs the whole system: a real kube-apiserver, the
// controller (policy controller + distribution server, in process), and
// two agents on two bridges of one real OVS ("nodes" n1 and n2, joined by
// patch ports marked as their uplinks), with pods as network namespaces.
// Policies are created through the API; real TCP connections show them
// enforced on both nodes, through a controller outage, an agent restart
// with the controller down and ovs-vswitchd's flows gone, and a controller
// restart that resyncs changes made while it was down.
func TestTwoNodes(t *testing.T) {
	c := livecluster.New(t)
	env := ovsenv.Start(t)
	br1, br2 := env.AddBridge("n1"), env.AddBridge("n2")
	u1, u2 := "tf"+env.ID+"u1", "tf"+env.ID+"u2"
	if _, err := env.Vsctl(
		"add-port", br1.Name, u1, "--", "set", "Interface", u1, "type=patch", "options:peer="+u2, `external_ids:"tierflow.io/role"=uplink`,
		"--", "add-port", br2.Name, u2, "--", "set", "Interface", u2, "type=patch", "options:peer="+u1, `external_ids:"tierflow.io/role"=uplink`); err != nil {
		t.Fatal(err)
	}
	mac := func(i byte) net.HardwareAddr { return net.HardwareAddr{0x0a, 0x58, 0, 0, 0, i} }
	pfx := func(i int) netip.Prefix { return netip.MustParsePrefix(fmt.Sprintf("10.0.0.%d/16", i)) }
	a := br1.AddPod("a", mac(1), pfx(1))
	b := br2.AddPod("b", mac(2), pfx(2))
	cc := br2.AddPod("c", mac(3), pfx(3))
	for _, p := range []*ovsenv.Pod{a, b, cc} {
		for _, port := range []uint16{80, 8080} {
			srv := p.ListenTCP(port)
			t.Cleanup(srv.Close)
		}
	}

	tok1, tok2 := c.AddNode(t, "n1"), c.AddNode(t, "n2")
	c.AddPod(t, a, "n1", map[string]string{"app": "a"})
	c.AddPod(t, b, "n2", map[string]string{"app": "b"})
	c.AddPod(t, cc, "n2", map[string]string{"app": "c"})

	ctx := context.Background()
	anp := &anpv1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "a-not-to-c"},
		Spec: anpv1.AdminNetworkPolicySpec{
			Priority: 10,
			Subject:  anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}},
			Egress: []anpv1.AdminNetworkPolicyEgressRule{{Name: "deny-c", Action: anpv1.AdminNetworkPolicyRuleActionDeny,
				To: []anpv1.AdminNetworkPolicyEgressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}}}}}}},
		},
	}
	if _, err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tcp := corev1.ProtocolTCP
	port80 := intstr.FromInt32(80)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "b-web", Namespace: ovsenv.PodNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port80}},
			}},
		},
	}
	if _, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ctrl := c.StartController(t)
	opts1 := c.AgentOptions(env, br1, "n1", tok1, 1)
	opts2 := c.AgentOptions(env, br2, "n2", tok2, 2)
	ag1 := livecluster.StartAgent(t, "n1", opts1)
	ag2 := livecluster.StartAgent(t, "n2", opts2)

	const anpRef, npRef = "AdminNetworkPolicy/a-not-to-c", "NetworkPolicy/default/b-web"
	// The ANP's subject is on n1 (egress, enforced at the source); the NP's
	// subject on n2 (ingress, enforced at the destination).
	ag1.RealizedOn(t, anpRef)
	ag2.RealizedOn(t, npRef)
	initial := []connection{
		{a, b, 80, true},
		{a, b, 8080, false}, // b is isolated for ingress: only a:80 is allowed
		{a, cc, 80, false},  // the ANP denies a -> c
		{cc, a, 80, true},
		{cc, b, 80, false},
		{b, cc, 8080, true},
	}
	checkConnections(t, env, "controller up", initial...)

	// The ANP's status reports it realized on every node of its span.
	livecluster.Eventually(t, 60*time.Second, "ANP Realized condition", func() error {
		got, err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, anp.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionRealized)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != got.Generation {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		if !strings.Contains(cond.Message, "1/1 nodes realized") {
			return fmt.Errorf("message %q, want 1/1 nodes realized", cond.Message)
		}
		return nil
	})

	checkQueryAndMetrics(t, ag1, anpRef)
	checkTraces(t, ag1, ag2, a, b, cc, anpRef, npRef)

	// A pod attached while the agents run. Its port appears on n1 with a
	// UID that is not its pod's (not admitted: no traffic), its API object
	// puts it among n1's pods and in the ANP's peer group (the
	// controller's update reaches n1), then the port gets its pod's UID:
	// the agent admits and classifies it.
	//
	// Before that last step, n1's classifier table gets a flow limit at
	// its current size (OVS then refuses more flows, as a switch out of
	// room would), so d's admission breaks n1's realization: the port
	// change alone, with no update from the controller, must turn the
	// ANP's Realized condition False. Lifting the limit lets the agent's
	// own retry succeed, and the condition must turn True again, still
	// without any update.
	d := br1.AddPod("d", mac(4), pfx(4))
	if err := d.SetExternalID(ovsdb.KeyPodUID, "not-yet-its-pod"); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{80, 8080} {
		srv := d.ListenTCP(port)
		t.Cleanup(srv.Close)
	}
	dObj := c.CreatePod(t, "d", "n1", map[string]string{"app": "c"})
	c.SetPodRunning(t, dObj, d.Addrs)
	livecluster.Eventually(t, 60*time.Second, "n1 lists d (another UID than its port's)", func() error {
		pods, err := ag1.Q.Pods(ctx)
		if err != nil {
			return err
		}
		for _, p := range pods.Pods {
			if p.Name == "d" && strings.Contains(p.Error, "a deleted pod's port") {
				return nil
			}
		}
		return fmt.Errorf("pods %+v", pods.Pods)
	})
	livecluster.Eventually(t, 60*time.Second, "n1 adds d to the ANP's peers", func() error {
		fl, err := ag1.Q.Flows(ctx, agentquery.FlowFilter{Policy: anpRef})
		if err != nil {
			return err
		}
		for _, f := range fl.Flows {
			if strings.Contains(f.Text, "nw_dst=10.0.0.4") {
				return nil
			}
		}
		return fmt.Errorf("no flow of %s matches 10.0.0.4", anpRef)
	})
	checkUpdateTimings(t, ag1)
	before, err := ag1.Q.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	classifier, err := br1.DumpFlows(int(pipeline.Classifier))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Vsctl("--", "--id=@ft", "create", "Flow_Table", fmt.Sprintf("flow_limit=%d", len(classifier)), "overflow_policy=refuse",
		"--", "set", "Bridge", br1.Name, fmt.Sprintf("flow_tables:%d=@ft", pipeline.Classifier.ID())); err != nil {
		t.Fatal(err)
	}
	if err := d.SetExternalID(ovsdb.KeyPodUID, string(dObj.UID)); err != nil {
		t.Fatal(err)
	}
	anpRealized := func(want metav1.ConditionStatus, reason, msg string) func() error {
		return func() error {
			got, err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, anp.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionRealized)
			if cond == nil || cond.Status != want || cond.Reason != reason || !strings.Contains(cond.Message, msg) {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			return nil
		}
	}
	livecluster.Eventually(t, 60*time.Second, "ANP Realized=False on n1 after d's port broke realization", anpRealized(metav1.ConditionFalse, "Failed", "n1"))
	if st, err := ag1.Q.Status(ctx); err != nil || st.LastError == "" {
		t.Fatalf("n1's status %+v, %v: want the realization failing", st, err)
	}
	if _, err := env.Vsctl("clear", "Bridge", br1.Name, "flow_tables"); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 60*time.Second, "ANP Realized=True after n1's retry succeeded", anpRealized(metav1.ConditionTrue, "Realized", "1/1 nodes realized"))
	if st, err := ag1.Q.Status(ctx); err != nil || st.Epoch != before.Epoch || st.Version != before.Version || !st.ControllerConnected {
		t.Fatalf("n1's stream moved from %s/%d to %+v (%v): both flips must come without an update", before.Epoch, before.Version, st, err)
	}
	pods, err := ag1.Q.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Pods) != 2 || pods.Pods[1].Name != "d" || pods.Pods[1].Error != "" {
		t.Errorf("pods of n1 after adding d: %+v", pods.Pods)
	}
	initial = append(initial,
		connection{a, d, 80, false}, // d is app=c: the ANP denies a -> d
		connection{cc, d, 80, true},
		connection{d, b, 80, false},
		connection{d, cc, 8080, true},
	)
	checkConnections(t, env, "pod added", initial...)

	// The controller dies: both nodes keep enforcing.
	ctrl.Kill()
	livecluster.Eventually(t, 30*time.Second, "agents notice the controller is gone", func() error {
		for _, ag := range []*livecluster.Agent{ag1, ag2} {
			st, err := ag.Q.Status(ctx)
			if err != nil {
				return err
			}
			if st.ControllerConnected {
				return fmt.Errorf("%s still connected", ag.Node)
			}
		}
		return nil
	})
	checkConnections(t, env, "controller down", initial...)

	// n1's agent restarts while the controller is down, and ovs-vswitchd
	// restarts meanwhile, so the bridges lose every flow: the new agent
	// enforces the state it saved; n2's agent replays its flows.
	ag1.Stop()
	// A stopped agent leaves its flows: n1 still enforces.
	checkConnections(t, env, "agent n1 stopped", initial...)
	if err := env.RestartVswitchd(); err != nil {
		t.Fatal(err)
	}
	ag1 = livecluster.StartAgent(t, "n1", opts1)
	ag1.RealizedOn(t, anpRef)
	if st, err := ag1.Q.Status(ctx); err != nil || !st.Restored || st.ControllerConnected {
		t.Fatalf("restarted agent: status %+v, %v; want restored, not connected", st, err)
	}
	checkConnections(t, env, "agent restarted with controller down", initial...)

	// Changes made while the controller is down reach the agents when it
	// comes back: the ANP goes away, b also serves 8080 to a.
	if err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Delete(ctx, anp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cur, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Get(ctx, np.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port8080 := intstr.FromInt32(8080)
	cur.Spec.Ingress[0].Ports = append(cur.Spec.Ingress[0].Ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port8080})
	if _, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkConnections(t, env, "API changed, controller still down", initial...)

	c.StartController(t)
	ag1.RealizedOn(t)
	livecluster.Eventually(t, 60*time.Second, "n2 realizes the changed NetworkPolicy", func() error {
		fl, err := ag2.Q.Flows(ctx, agentquery.FlowFilter{Policy: npRef, Direction: "In"})
		if err != nil {
			return err
		}
		for _, f := range fl.Flows {
			if strings.Contains(f.Text, "tcp_dst=0x1f90") || strings.Contains(f.Text, "tcp_dst=8080") {
				return nil
			}
		}
		var texts []string
		for _, f := range fl.Flows {
			texts = append(texts, f.Text)
		}
		return fmt.Errorf("no flow of %s matches port 8080:\n%s", npRef, strings.Join(texts, "\n"))
	})
	ag2.RealizedOn(t, npRef)
	checkConnections(t, env, "controller restarted",
		connection{a, b, 80, true},
		connection{a, b, 8080, true},
		connection{a, cc, 80, true},
		connection{cc, b, 80, false},
	)
}

// checkQueryAndMetrics reads the agent's query socket and metrics after
// traffic went through: the ANP's deny rule has flows, a cookie, and
// counted the dropped packets.
// checkUpdateTimings: the agent's /v1/updates times its updates stage by
// stage, in order, and one delta from the controller that changed flows
// (the last one) has every stage stamped.
func checkUpdateTimings(t *testing.T, ag *livecluster.Agent) {
	t.Helper()
	u, err := ag.Q.Updates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var last *agentquery.UpdateTiming
	for i, ut := range u.Updates {
		stages := []time.Time{ut.Changed, ut.Queued, ut.Sent, ut.Received, ut.Realizing, ut.BundleStart, ut.Committed, ut.Done}
		var prev time.Time
		for j, at := range stages {
			if at.IsZero() {
				continue
			}
			if at.Before(prev) {
				t.Errorf("update %d: stage %d at %v before the one before it (%v): %+v", ut.Version, j, at, prev, ut)
			}
			prev = at
		}
		if !ut.Full && ut.FlowChanges > 0 {
			last = &u.Updates[i]
		}
	}
	if last == nil {
		t.Fatalf("no delta that changed flows among %+v", u.Updates)
	}
	for name, at := range map[string]time.Time{"changed": last.Changed, "queued": last.Queued, "sent": last.Sent, "received": last.Received,
		"realizing": last.Realizing, "bundleStart": last.BundleStart, "committed": last.Committed, "done": last.Done} {
		if at.IsZero() {
			t.Errorf("update %d has no %s time: %+v", last.Version, name, last)
		}
	}
}

func checkQueryAndMetrics(t *testing.T, ag *livecluster.Agent, policy string) {
	t.Helper()
	ctx := context.Background()
	rules, err := ag.Q.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range rules.Rules {
		if r.Policy.String() == policy && r.Table == "EgressAdmin" && r.Action == "Deny" {
			found = true
		}
	}
	if !found {
		t.Errorf("rules of %s: no Deny rule in EgressAdmin: %+v", ag.Node, rules.Rules)
	}
	fl, err := ag.Q.Flows(ctx, agentquery.FlowFilter{Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	var packets uint64
	for _, f := range fl.Flows {
		if f.Role == "action" {
			packets += f.Packets
		}
		if f.Rule == nil && f.Role != "clause" {
			t.Errorf("flow without its rule: %+v", f)
		}
	}
	if len(fl.Flows) == 0 || packets == 0 {
		t.Errorf("flows of %s on %s: %d flows, %d packets on action flows; want flows that counted the denied SYNs", policy, ag.Node, len(fl.Flows), packets)
	}
	podFlows, err := ag.Q.Flows(ctx, agentquery.FlowFilter{Pod: "default/a", Table: "Classifier"})
	if err != nil {
		t.Fatal(err)
	}
	if len(podFlows.Flows) == 0 {
		t.Errorf("no Classifier flow for pod default/a on %s", ag.Node)
	}
	if _, err := ag.Q.Flows(ctx, agentquery.FlowFilter{Table: "NoSuchTable"}); err == nil {
		t.Errorf("unknown table accepted")
	}
	pods, err := ag.Q.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Pods) != 1 || pods.Pods[0].Name != "a" || pods.Pods[0].Error != "" || pods.Uplink == 0 {
		t.Errorf("pods of %s: %+v", ag.Node, pods)
	}

	// Metrics: the agent listens on a free port its status names.
	body := scrape(t, ag)
	for _, want := range []string{
		"tierflow_agent_realization_duration_seconds_count",
		`tierflow_rule_packets_total{action="Deny"`,
		`tierflow_flows{table="EgressAdmin"}`,
		"tierflow_agent_openflow_connections_total",
		"tierflow_agent_ready 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics of %s lack %s", ag.Node, want)
		}
	}
}

func scrape(t *testing.T, ag *livecluster.Agent) string {
	t.Helper()
	st, err := ag.Q.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.MetricsAddress == "" {
		t.Fatal("status has no metrics address")
	}
	resp, err := http.Get("http://" + st.MetricsAddress + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkTraces asks both agents to trace connections: the source node's
// trace names the ANP's deny, the destination node's the NP's allow.
func checkTraces(t *testing.T, ag1, ag2 *livecluster.Agent, a, b, c *ovsenv.Pod, anpRef, npRef string) {
	t.Helper()
	ctx := context.Background()
	hasRule := func(tr *agentquery.Trace, policy string) bool {
		for _, r := range tr.Rules {
			if r.Policy.String() == policy {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		ag      *livecluster.Agent
		req     agentquery.TraceRequest
		dropped bool
		rule    string
	}{
		{ag1, agentquery.TraceRequest{Src: "default/a", Dst: c.IPv4().String(), Port: 80}, true, anpRef},
		{ag1, agentquery.TraceRequest{Src: "default/a", Dst: b.IPv4().String(), Port: 80}, false, ""},
		{ag2, agentquery.TraceRequest{Src: a.IPv4().String(), Dst: b.IPv4().String(), Port: 80}, false, npRef},
		{ag2, agentquery.TraceRequest{Src: a.IPv4().String(), Dst: b.IPv4().String(), Protocol: "TCP", Port: 8080}, true, ""},
	} {
		tr, err := tc.ag.Q.Trace(ctx, tc.req)
		if err != nil {
			t.Errorf("trace %+v on %s: %v", tc.req, tc.ag.Node, err)
			continue
		}
		if tr.Dropped != tc.dropped || (tc.rule != "" && !hasRule(tr, tc.rule)) {
			t.Errorf("trace %+v on %s: dropped %v (actions %q), rules %+v; want dropped %v by/through %q\n%s",
				tc.req, tc.ag.Node, tr.Dropped, tr.DatapathActions, tr.Rules, tc.dropped, tc.rule, tr.Output)
		}
	}
	if _, err := ag1.Q.Trace(ctx, agentquery.TraceRequest{Src: "default/nobody", Dst: "10.0.0.2", Port: 80}); err == nil {
		t.Errorf("trace from an unknown pod accepted")
	}
}
