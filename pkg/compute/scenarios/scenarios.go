package scenarios

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// Cluster is a set of API objects to feed a policy engine.
type Cluster struct {
	Namespaces           []*corev1.Namespace
	Nodes                []*corev1.Node
	Pods                 []*corev1.Pod
	NetworkPolicies      []*networkingv1.NetworkPolicy
	AdminNetworkPolicies []*v1alpha1.AdminNetworkPolicy
}

// Objects counts the objects of c.
func (c *Cluster) Objects() int {
	return len(c.Namespaces) + len(c.Nodes) + len(c.Pods) + len(c.NetworkPolicies) + len(c.AdminNetworkPolicies)
}

func kv(pairs ...string) map[string]string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

func namespace(name string, lbls ...string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kv(lbls...)}}
}

func node(name string, lbls []string, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kv(lbls...)},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

// builder makes objects the way the reference benchmarks do: pods spread
// over 1000 nodes at random, with random unique IPs.
type builder struct {
	rng   *rand.Rand
	used  map[netip.Addr]bool
	nodes int
	uid   int
}

func newBuilder() *builder {
	return &builder{rng: rand.New(rand.NewPCG(1, 2)), used: map[netip.Addr]bool{}, nodes: 1000}
}

func (b *builder) nextUID() types.UID {
	b.uid++
	return types.UID(fmt.Sprintf("uid-%d", b.uid))
}

func (b *builder) ip() string {
	for {
		a := netip.AddrFrom4([4]byte{10, byte(b.rng.IntN(256)), byte(b.rng.IntN(256)), byte(1 + b.rng.IntN(254))})
		if !b.used[a] {
			b.used[a] = true
			return a.String()
		}
	}
}

func (b *builder) nodeObjs() []*corev1.Node {
	out := make([]*corev1.Node, b.nodes)
	for i := range out {
		out[i] = node(fmt.Sprintf("node-%d", i), []string{fmt.Sprintf("rack=r%d", i%10)}, fmt.Sprintf("192.168.%d.%d", i/250, 1+i%250))
	}
	return out
}

func (b *builder) pod(ns, name string, lbls map[string]string) *corev1.Pod {
	ip := b.ip()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, UID: b.nextUID()},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", b.rng.IntN(b.nodes)),
			Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func (b *builder) np(ns, name string, podSel map[string]string, from []networkingv1.NetworkPolicyPeer, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: b.nextUID()},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: podSel}, PolicyTypes: types},
	}
	if from != nil {
		port := intstr.FromInt32(80)
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}
	}
	return np
}

func podPeer(lbls map[string]string) []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: lbls}}}
}

// SmallNamespaces: 25,000 namespaces × (4 pods, default-deny-all, np-1, np-2).
func SmallNamespaces() *Cluster {
	bd := newBuilder()
	c := &Cluster{Nodes: bd.nodeObjs()}
	for i := 0; i < 25000; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, namespace(ns))
		for j, l := range []map[string]string{{"app-1": "scale-1"}, {"app-1": "scale-1"}, {"app-2": "scale-2"}, {"app-2": "scale-2"}} {
			c.Pods = append(c.Pods, bd.pod(ns, fmt.Sprintf("pod-%d", j), l))
		}
		c.NetworkPolicies = append(c.NetworkPolicies,
			bd.np(ns, "default-deny-all", nil, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress),
			bd.np(ns, "np-1", map[string]string{"app-1": "scale-1"}, podPeer(map[string]string{"app-1": "scale-1"})),
			bd.np(ns, "np-2", map[string]string{"app-2": "scale-2"}, podPeer(map[string]string{"app-2": "scale-2"})))
	}
	return c
}

// LargeNamespaces: 100 namespaces × (default-deny-all + 100 policies, 10 pods per label).
func LargeNamespaces() *Cluster {
	bd := newBuilder()
	c := &Cluster{Nodes: bd.nodeObjs()}
	for i := 0; i < 100; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, namespace(ns))
		c.NetworkPolicies = append(c.NetworkPolicies, bd.np(ns, "default-deny-all", nil, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		for l := 0; l < 100; l++ {
			lbl := map[string]string{fmt.Sprintf("app-%d", l): fmt.Sprintf("scale-%d", l)}
			for p := 0; p < 10; p++ {
				c.Pods = append(c.Pods, bd.pod(ns, fmt.Sprintf("pod-%d-%d", l, p), lbl))
			}
			c.NetworkPolicies = append(c.NetworkPolicies, bd.np(ns, fmt.Sprintf("np-%d", l), lbl, podPeer(lbl)))
		}
	}
	return c
}

// OneNamespace: 10,000 pods labelled app-1=scale-1, 10,000 identical policies.
func OneNamespace() *Cluster {
	bd := newBuilder()
	c := &Cluster{Nodes: bd.nodeObjs(), Namespaces: []*corev1.Namespace{namespace("ns")}}
	lbl := map[string]string{"app-1": "scale-1"}
	for i := 0; i < 10000; i++ {
		c.Pods = append(c.Pods, bd.pod("ns", fmt.Sprintf("pod-%d", i), lbl))
		c.NetworkPolicies = append(c.NetworkPolicies, bd.np("ns", fmt.Sprintf("np-%d", i), lbl, podPeer(lbl)))
	}
	return c
}

// PolicyPerPod: 10,000 pods in 5,000 uniquely labelled pairs, one policy per
// pod allowing ingress only from its partner.
func PolicyPerPod() *Cluster {
	bd := newBuilder()
	c := &Cluster{Nodes: bd.nodeObjs(), Namespaces: []*corev1.Namespace{namespace("ns")}}
	for i := 0; i < 5000; i++ {
		for side := 0; side < 2; side++ {
			me := map[string]string{"pair": fmt.Sprint(i), "side": fmt.Sprint(side)}
			partner := map[string]string{"pair": fmt.Sprint(i), "side": fmt.Sprint(1 - side)}
			name := fmt.Sprintf("pod-%d-%d", i, side)
			c.Pods = append(c.Pods, bd.pod("ns", name, me))
			c.NetworkPolicies = append(c.NetworkPolicies, bd.np("ns", name, me, podPeer(partner)))
		}
	}
	return c
}

// ClusterScoped: 1,000 namespaces × 100 pods, 10 policies per namespace,
// each policy's peers 100 pods in 10 namespaces (namespaceSelector AND
// podSelector).
func ClusterScoped() *Cluster {
	bd := newBuilder()
	c := &Cluster{Nodes: bd.nodeObjs()}
	for i := 0; i < 1000; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, namespace(ns, fmt.Sprintf("group=g%d", i/10)))
		for p := 0; p < 100; p++ {
			c.Pods = append(c.Pods, bd.pod(ns, fmt.Sprintf("pod-%d", p), map[string]string{"app": fmt.Sprintf("app-%d", p%10)}))
		}
		for j := 0; j < 10; j++ {
			app := map[string]string{"app": fmt.Sprintf("app-%d", j)}
			np := bd.np(ns, fmt.Sprintf("np-%d", j), app, []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": fmt.Sprintf("g%d", (i/10+j+1)%100)}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: app},
			}})
			c.NetworkPolicies = append(c.NetworkPolicies, np)
		}
	}
	return c
}

// teamCluster is the base of Mixed and AdminHeavy: 1,000 namespaces of ten
// teams (team=tN), each with ten pods app=app-0 … app-9.
func teamCluster(bd *builder) *Cluster {
	c := &Cluster{Nodes: bd.nodeObjs()}
	for i := 0; i < 1000; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, namespace(ns, fmt.Sprintf("team=t%d", i%10)))
		for p := 0; p < 10; p++ {
			c.Pods = append(c.Pods, bd.pod(ns, fmt.Sprintf("pod-%d", p), map[string]string{"app": fmt.Sprintf("app-%d", p)}))
		}
	}
	return c
}

// Mixed is the engine's own target: 10k pods in 1k namespaces, nps
// NetworkPolicies spread over the namespaces, 100 AdminNetworkPolicies × 20
// rules.
func Mixed(nps int) *Cluster {
	bd := newBuilder()
	c := teamCluster(bd)
	for j := 0; j < nps; j++ {
		ns := fmt.Sprintf("ns-%d", j%1000)
		k := j / 1000
		c.NetworkPolicies = append(c.NetworkPolicies, bd.np(ns, fmt.Sprintf("np-%d", k),
			map[string]string{"app": fmt.Sprintf("app-%d", k%10)},
			podPeer(map[string]string{"app": fmt.Sprintf("app-%d", (k+1)%10)})))
	}
	actions := []v1alpha1.AdminNetworkPolicyRuleAction{"Allow", "Deny", "Pass"}
	for k := 0; k < 100; k++ {
		anp := &v1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("anp-%d", k), UID: bd.nextUID()}}
		anp.Spec.Priority = int32(k * 10)
		anp.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", k%10)}}
		for r := 0; r < 20; r++ {
			anp.Spec.Ingress = append(anp.Spec.Ingress, v1alpha1.AdminNetworkPolicyIngressRule{
				Name:   fmt.Sprintf("r%d", r),
				Action: actions[r%3],
				From: []v1alpha1.AdminNetworkPolicyIngressPeer{{Pods: &v1alpha1.NamespacedPod{
					NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", (k+r)%10)}},
					PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", r%10)}},
				}}},
			})
		}
		c.AdminNetworkPolicies = append(c.AdminNetworkPolicies, anp)
	}
	return c
}

// AdminHeavy: 1,001 AdminNetworkPolicies (every priority 0–1000) × 25
// ingress rules (Allow / Deny / Pass in turn) over 10,000 pods in 1,000
// namespaces of ten teams; each policy's subject is one team's
// namespaces, each rule's peer one app in one team (test/bench's
// admin-heavy shape).
func AdminHeavy() *Cluster {
	bd := newBuilder()
	c := teamCluster(bd)
	actions := []v1alpha1.AdminNetworkPolicyRuleAction{"Allow", "Deny", "Pass"}
	for k := 0; k <= 1000; k++ {
		anp := &v1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("anp-%d", k), UID: bd.nextUID()}}
		anp.Spec.Priority = int32(k)
		anp.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", k%10)}}
		port := int32(80 + k%20)
		for r := 0; r < 25; r++ {
			anp.Spec.Ingress = append(anp.Spec.Ingress, v1alpha1.AdminNetworkPolicyIngressRule{
				Name:   fmt.Sprintf("r%d", r),
				Action: actions[r%3],
				From: []v1alpha1.AdminNetworkPolicyIngressPeer{{Pods: &v1alpha1.NamespacedPod{
					NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", (k+r)%10)}},
					PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", r%10)}},
				}}},
				Ports: &[]v1alpha1.AdminNetworkPolicyPort{{PortNumber: &v1alpha1.Port{Protocol: corev1.ProtocolTCP, Port: port}}},
			})
		}
		c.AdminNetworkPolicies = append(c.AdminNetworkPolicies, anp)
	}
	return c
}
