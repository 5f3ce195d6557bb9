package realizer_test

import (
	"context"
	"net/netip"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// corePod is the Kubernetes pod behind a test pod, for pkg/compute.
func corePod(p *testPod) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ref.Namespace, Name: p.ref.Name, UID: types.UID(p.ref.String()),
			Labels: map[string]string{"app": p.ref.Name}},
		Spec:   corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IPv4().String()},
	}
	for _, a := range p.Addrs {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: a.Addr().String()})
	}
	for _, np := range p.ports {
		pod.Spec.Containers[0].Ports = append(pod.Spec.Containers[0].Ports,
			corev1.ContainerPort{Name: np.Name, Protocol: corev1.Protocol(np.Protocol), ContainerPort: np.Port})
	}
	return pod
}

// nodeInput is what an agent on n realizes: the controller's per-node
// slice (wire.ForNode) and its local pods, whose named ports come from the
// groups that list them, as the agent runtime does.
func nodeInput(snap *model.Snapshot, n *node) policyflows.Input {
	st := wire.ForNode(snap, n.name)
	in := policyflows.Input{Node: n.name, AppliedToGroups: st.AppliedToGroups, AddressGroups: st.AddressGroups}
	for _, p := range st.Policies {
		in.Policies = append(in.Policies, p)
	}
	sort.Slice(in.Policies, func(i, j int) bool { return in.Policies[i].ID < in.Policies[j].ID })
	ports := map[model.PodRef][]model.NamedPort{}
	add := func(m model.GroupMember) {
		if m.Pod != nil && len(m.Ports) > 0 {
			ports[*m.Pod] = m.Ports
		}
	}
	for _, g := range st.AppliedToGroups {
		for _, m := range g.MembersByNode.Get(n.name) {
			add(m)
		}
	}
	for _, g := range st.AddressGroups {
		for _, m := range g.Members {
			add(m)
		}
	}
	for _, p := range n.pods {
		lp := p.local()
		lp.Ports = ports[p.ref]
		in.Pods = append(in.Pods, lp)
	}
	return in
}

// TestEgressNamedPortToIPBlocks: a NetworkPolicy egress rule with a named
// port and no `to`, or ipBlock `to`, computed by pkg/compute, sent per
// node by the distribution's ForNode and realized on two real bridges: the
// name resolves on the destination pod, on the same node and on the other
// one, never on a pod outside the block; every probe agrees with
// pkg/explain on the same snapshot.
func TestEgressNamedPortToIPBlocks(t *testing.T) {
	env := ovsenv.Start(t)
	n1 := newNode(t, env, "n1", 1)
	n2 := newNode(t, env, "n2", 2)
	joinNodes(t, env, n1, n2)
	serve := func(port int32) model.NamedPort {
		return model.NamedPort{Name: "serve-80-tcp", Protocol: model.ProtocolTCP, Port: port}
	}
	a := n1.addPod(t, "a", 1)              // the policy's subject
	l := n1.addPod(t, "l", 2, serve(80))   // same node, declares the name
	r := n2.addPod(t, "r", 3, serve(80))   // other node, declares the name
	o := n2.addPod(t, "o", 4, serve(80))   // other node, outside 10.0.0.0/30
	x := n2.addPod(t, "x", 5)              // declares no such name
	w := n2.addPod(t, "w", 6, serve(8080)) // the name is 8080 here
	all := []*testPod{a, l, r, o, x, w}
	for _, p := range all[1:] {
		for _, port := range []uint16{80, 8080} {
			srv := p.ListenTCP(port)
			t.Cleanup(srv.Close)
		}
	}
	n1.start(t)
	n2.start(t)

	e := compute.New()
	for _, p := range all {
		e.UpsertPod(corePod(p))
	}
	var pods []explain.Pod
	for _, p := range all {
		m := p.member()
		pods = append(pods, explain.Pod{Ref: p.ref, Node: p.node, IPs: m.IPs, Ports: p.ports})
	}
	inv, err := explain.NewInventory(pods)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, egress string
		expect       []expectation
	}{
		{"no to", `[{ports: [{port: serve-80-tcp}]}]`, []expectation{
			{src: a, dst: l, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: l, proto: "TCP", port: 8080, allowed: false},
			{src: a, dst: r, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: r, v6: true, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: r, proto: "TCP", port: 8080, allowed: false},
			{src: a, dst: o, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: x, proto: "TCP", port: 80, allowed: false},
			{src: a, dst: w, proto: "TCP", port: 8080, allowed: true},
			{src: a, dst: w, proto: "TCP", port: 80, allowed: false},
		}},
		{"ipBlock to", `[{to: [{ipBlock: {cidr: 10.0.0.0/30}}], ports: [{port: serve-80-tcp}]}]`, []expectation{
			{src: a, dst: l, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: l, proto: "TCP", port: 8080, allowed: false},
			{src: a, dst: r, proto: "TCP", port: 80, allowed: true},
			{src: a, dst: r, v6: true, proto: "TCP", port: 80, allowed: false}, // not in the block
			{src: a, dst: o, proto: "TCP", port: 80, allowed: false},           // has the name, outside the block
			{src: a, dst: w, proto: "TCP", port: 8080, allowed: false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var pol networkingv1.NetworkPolicy
			doc := "metadata: {name: named-out, namespace: default, uid: np1}\nspec:\n  podSelector: {matchLabels: {app: a}}\n  policyTypes: [Egress]\n  egress: " + tc.egress + "\n"
			if err := yaml.Unmarshal([]byte(doc), &pol); err != nil {
				t.Fatal(err)
			}
			e.UpsertNetworkPolicy(&pol)
			snap := e.Snapshot()
			for _, n := range []*node{n1, n2} {
				if _, err := n.r.Update(context.Background(), nodeInput(snap, n)); err != nil {
					t.Fatalf("update %s: %v", n.name, err)
				}
				n.settle(t)
			}
			if w := append(n1.r.Warnings(), n2.r.Warnings()...); len(w) > 0 {
				t.Errorf("realizer warnings: %v", w)
			}
			for _, ex := range tc.expect {
				dstIP := ex.dst.IPv4()
				if ex.v6 {
					dstIP = ex.dst.IPv6()
				}
				res, err := explain.Explain(snap, inv, explain.Query{Src: explain.Endpoint{Pod: &ex.src.ref}, Dst: explain.Endpoint{IP: dstIP}, Protocol: ex.proto, Port: ex.port})
				if err != nil {
					t.Fatalf("explain: %v", err)
				}
				ref := res.Verdict == explain.VerdictAllow
				got := probe(t, ex.src, dstIP, ex.proto, ex.port, ex.allowed)
				if got != ex.allowed || ref != ex.allowed {
					t.Errorf("%s -> %s %s/%d: datapath allowed=%v, explain allowed=%v, want %v", ex.src.ref, netip.AddrPortFrom(dstIP, uint16(ex.port)), ex.proto, ex.port, got, ref, ex.allowed)
				}
			}
			// Egress is enforced on the source node.
			if got := flowPackets(t, n1, pipeline.EgressNetworkPolicy, pipeline.RoleAction, "named-out", true); got == 0 {
				t.Errorf("no packet counted by the named-port allow on n1")
			}
		})
	}
}
