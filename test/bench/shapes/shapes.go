// Package shapes builds the API objects of the benchmark scenarios: the
// shapes of Antrea's controller performance test listed in
// ../shared/BENCH-REFERENCES.md (relative to the repository root) plus
// tierflow's admin-heavy shape, at full or reduced scale, together with
// the single-object changes the incremental benchmarks time, and the
// compute engine's own mixed target. test/bench's drivers and pkg/compute's
// benchmarks both build their clusters here; this package's tests hold the
// from-informer-start benchmarks (informers over a fake clientset).
//
// Objects are deterministic for a given shape and scale: pods are spread
// over the nodes with a seeded random generator and get unique random
// 10.x.y.z addresses, as in the reference runs.
package shapes

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// Engine is what a scenario's objects are fed to: the policy engine
// (pkg/compute.Engine), named by its methods so shapes stays free of it.
type Engine interface {
	UpsertNamespace(*corev1.Namespace)
	UpsertNode(*corev1.Node)
	UpsertPod(*corev1.Pod)
	UpsertNetworkPolicy(*networkingv1.NetworkPolicy)
	UpsertAdminNetworkPolicy(*v1alpha1.AdminNetworkPolicy)
}

// FeedTo upserts the scenario's objects into e in the order informers
// typically deliver them at start: namespaces, nodes, pods, then policies.
func (c *Cluster) FeedTo(e Engine) {
	for _, o := range c.Namespaces {
		e.UpsertNamespace(o)
	}
	for _, o := range c.Nodes {
		e.UpsertNode(o)
	}
	for _, o := range c.Pods {
		e.UpsertPod(o)
	}
	for _, o := range c.NPs {
		e.UpsertNetworkPolicy(o)
	}
	for _, o := range c.ANPs {
		e.UpsertAdminNetworkPolicy(o)
	}
}

// Cluster is the set of API objects of one scenario.
type Cluster struct {
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	Pods       []*corev1.Pod
	NPs        []*networkingv1.NetworkPolicy
	ANPs       []*v1alpha1.AdminNetworkPolicy

	// Changes for the incremental benchmarks: PodRelabel gives Pods[0] the
	// labels of a pod in another group; NamespaceRelabel is Namespaces[0]
	// with changed labels; a policy added is built by AddedPolicy.
	PodRelabel       *corev1.Pod
	NamespaceRelabel *corev1.Namespace
	// AddedNP / AddedANP is one more policy like the scenario's others
	// (exactly one is set).
	AddedNP  *networkingv1.NetworkPolicy
	AddedANP *v1alpha1.AdminNetworkPolicy
}

// Objects is the number of API objects (without nodes).
func (c *Cluster) Objects() int {
	return len(c.Namespaces) + len(c.Pods) + len(c.NPs) + len(c.ANPs)
}

// Policies is the number of policies the engine must compute.
func (c *Cluster) Policies() int { return len(c.NPs) + len(c.ANPs) }

// Shape is one scenario.
type Shape struct {
	Name string
	// Description says what the full-scale shape is.
	Description string
	build       func(quick bool, o buildOptions) *Cluster
}

// Build makes the scenario's objects; quick reduces the scale (same
// structure).
func (s Shape) Build(quick bool) *Cluster { return s.build(quick, buildOptions{keep: AllKinds}) }

// BuildKinds makes only the scenario's objects of the kinds keep: objects
// equal to those Build makes of those kinds (the random choices of the
// others are still drawn, then dropped), so a harness can make a kind's
// objects again whenever it serves them instead of holding them. Unlike
// Build's, no two of its objects share a map or a pointer (Build's pods
// may share one label map, a policy may share it), as objects decoded
// from an apiserver's answer do not.
func (s Shape) BuildKinds(quick bool, keep Kinds) *Cluster {
	return s.build(quick, buildOptions{keep: keep | unshared}).compact()
}

// StreamKinds hands emit the objects BuildKinds makes, each as soon as it
// is made (of each kind in BuildKinds' order), holding none of them: a
// harness serving a stream of them holds one object at a time, not the
// scenario's.
func (s Shape) StreamKinds(quick bool, keep Kinds, emit func(any)) {
	s.build(quick, buildOptions{keep: keep | unshared, emit: emit})
}

// buildOptions say which objects a build makes and where they go.
type buildOptions struct {
	keep Kinds
	// emit, if set, takes each kept object of the scenario instead of the
	// built Cluster (its lists get nil).
	emit func(any)
}

// Kinds is a set of object kinds of a scenario.
type Kinds uint8

// The kinds of a scenario's objects.
const (
	NamespaceKind Kinds = 1 << iota
	NodeKind
	PodKind
	NetworkPolicyKind
	AdminNetworkPolicyKind
	AllKinds = NamespaceKind | NodeKind | PodKind | NetworkPolicyKind | AdminNetworkPolicyKind

	// unshared makes every object with maps and pointers of its own.
	unshared Kinds = 1 << 7
)

// compact drops the objects a build did not keep (nil) from c's lists.
func (c *Cluster) compact() *Cluster {
	c.Namespaces = slices.DeleteFunc(c.Namespaces, func(o *corev1.Namespace) bool { return o == nil })
	c.Pods = slices.DeleteFunc(c.Pods, func(o *corev1.Pod) bool { return o == nil })
	c.NPs = slices.DeleteFunc(c.NPs, func(o *networkingv1.NetworkPolicy) bool { return o == nil })
	c.ANPs = slices.DeleteFunc(c.ANPs, func(o *v1alpha1.AdminNetworkPolicy) bool { return o == nil })
	return c
}

// All lists every scenario, in report order.
func All() []Shape {
	return []Shape{
		{"small-namespaces", "25,000 namespaces × (4 pods, default-deny-all, np-1, np-2)", smallNamespaces},
		{"large-namespaces", "100 namespaces × (default-deny-all + 100 policies, 10 pods per label): 100,000 pods, 10,100 policies", largeNamespaces},
		{"one-namespace", "1 namespace, 10,000 pods app-1=scale-1, 10,000 identical policies", oneNamespace},
		{"policy-per-pod", "1 namespace, 10,000 pods in 5,000 uniquely labelled pairs, one policy per pod allowing its partner", policyPerPod},
		{"cluster-scoped", "1,000 namespaces × 100 pods, 10 policies each, peers 100 pods in 10 namespaces", clusterScoped},
		{"admin-heavy", "1,001 AdminNetworkPolicies (every priority 0–1000) × 25 rules over 10,000 pods in 1,000 namespaces", adminHeavy},
	}
}

// Get returns the shape called name.
func Get(name string) (Shape, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	return Shape{}, fmt.Errorf("no benchmark shape %q", name)
}

// builder makes objects the way the reference benchmarks do. Objects of
// kinds it does not keep are nil (their random choices still drawn, so the
// kept ones are the same).
type builder struct {
	rng   *rand.Rand
	used  map[netip.Addr]bool
	nodes int
	uid   int
	keep  Kinds
	emit  func(any)
}

func newBuilder(nodes int, o buildOptions) *builder {
	return &builder{rng: rand.New(rand.NewPCG(1, 2)), used: map[netip.Addr]bool{}, nodes: nodes, keep: o.keep, emit: o.emit}
}

// emitted hands o to the build's emit, if it has one, and says whether it
// did (the object is then not the Cluster's).
func (b *builder) emitted(o any) bool {
	if b.emit == nil {
		return false
	}
	b.emit(o)
	return true
}

// done ends the scenario's objects: the changes built after it (a pod
// relabelled, a policy added) are not emitted.
func (b *builder) done() { b.emit = nil }

// nextUID numbers the next pod or policy (its UID is uidOf the number).
func (b *builder) nextUID() int {
	b.uid++
	return b.uid
}

func uidOf(n int) types.UID {
	return types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", n))
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

// NodeName is the name of the i-th simulated node.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

func (b *builder) nodeObjs() []*corev1.Node {
	if b.keep&NodeKind == 0 {
		return nil
	}
	out := make([]*corev1.Node, b.nodes)
	for i := range out {
		out[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: NodeName(i), Labels: map[string]string{"rack": fmt.Sprintf("r%d", i%10)}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.%d.%d", i/250, 1+i%250)},
				{Type: corev1.NodeHostName, Address: NodeName(i)},
			}},
		}
		if b.emitted(out[i]) {
			out[i] = nil
		}
	}
	return out
}

func (b *builder) ns(name string, lbls map[string]string) *corev1.Namespace {
	if b.keep&NamespaceKind == 0 {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	if b.emitted(ns) {
		return nil
	}
	return ns
}

func (b *builder) pod(namespace, name string, lbls map[string]string) *corev1.Pod {
	uid := b.nextUID()
	if b.keep&PodKind == 0 {
		return nil // the random generator draws for pods only: nothing to draw
	}
	ip, node := b.ip(), b.rng.IntN(b.nodes)
	if b.keep&unshared != 0 {
		lbls = maps.Clone(lbls)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: lbls, UID: uidOf(uid)},
		Spec: corev1.PodSpec{NodeName: NodeName(node),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
	if b.emitted(p) {
		return nil
	}
	return p
}

func (b *builder) np(namespace, name string, podSel map[string]string, from []networkingv1.NetworkPolicyPeer, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	uid := b.nextUID()
	if b.keep&NetworkPolicyKind == 0 {
		return nil
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uidOf(uid)},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: podSel}, PolicyTypes: types},
	}
	if from != nil {
		port := intstr.FromInt32(80)
		tcp := corev1.ProtocolTCP
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}}
		if len(types) == 0 {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		}
	}
	if b.keep&unshared != 0 {
		np = np.DeepCopy()
	}
	if b.emitted(np) {
		return nil
	}
	return np
}

func podPeer(lbls map[string]string) []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: lbls}}}
}

func relabelled(p *corev1.Pod, lbls map[string]string) *corev1.Pod {
	if p == nil {
		return nil
	}
	q := p.DeepCopy()
	q.Labels = lbls
	return q
}

func nsRelabelled(n *corev1.Namespace, lbls map[string]string) *corev1.Namespace {
	if n == nil {
		return nil
	}
	q := n.DeepCopy()
	q.Labels = lbls
	return q
}

// QuickScale says whether the benchmark drivers run the reduced shapes:
// BENCH_SCALE=quick|full (set by cmd/benchreport for each run), else
// BENCH_QUICK=1.
func QuickScale() bool {
	switch os.Getenv("BENCH_SCALE") {
	case "quick":
		return true
	case "full":
		return false
	}
	return os.Getenv("BENCH_QUICK") == "1"
}

// pick returns full or quick.
func pick(quick bool, full, small int) int {
	if quick {
		return small
	}
	return full
}

// SmallNamespaces: 25,000 namespaces (quick: 1,000) × (4 pods,
// default-deny-all, np-1, np-2).
func SmallNamespaces(quick bool) *Cluster {
	return smallNamespaces(quick, buildOptions{keep: AllKinds})
}

func smallNamespaces(quick bool, o buildOptions) *Cluster {
	bd := newBuilder(pick(quick, 1000, 100), o)
	c := &Cluster{Nodes: bd.nodeObjs()}
	n := pick(quick, 25000, 1000)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, bd.ns(name, map[string]string{"ns": name}))
		for j, l := range []map[string]string{{"app-1": "scale-1"}, {"app-1": "scale-1"}, {"app-2": "scale-2"}, {"app-2": "scale-2"}} {
			c.Pods = append(c.Pods, bd.pod(name, fmt.Sprintf("pod-%d", j), l))
		}
		c.NPs = append(c.NPs,
			bd.np(name, "default-deny-all", nil, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress),
			bd.np(name, "np-1", map[string]string{"app-1": "scale-1"}, podPeer(map[string]string{"app-1": "scale-1"})),
			bd.np(name, "np-2", map[string]string{"app-2": "scale-2"}, podPeer(map[string]string{"app-2": "scale-2"})))
	}
	bd.done()
	c.PodRelabel = relabelled(c.Pods[0], map[string]string{"app-2": "scale-2"})
	c.NamespaceRelabel = nsRelabelled(c.Namespaces[0], map[string]string{"ns": "ns-0", "bench": "relabelled"})
	c.AddedNP = bd.np("ns-0", "np-added", map[string]string{"app-1": "scale-1"}, podPeer(map[string]string{"app-2": "scale-2"}))
	return c
}

// LargeNamespaces: 100 namespaces (quick: 10) × (default-deny-all + 100
// policies (quick: 20) np-i selecting app-i=scale-i and allowing the same
// label, 10 pods per label).
func LargeNamespaces(quick bool) *Cluster {
	return largeNamespaces(quick, buildOptions{keep: AllKinds})
}

func largeNamespaces(quick bool, o buildOptions) *Cluster {
	bd := newBuilder(pick(quick, 1000, 100), o)
	c := &Cluster{Nodes: bd.nodeObjs()}
	n, labels := pick(quick, 100, 10), pick(quick, 100, 20)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, bd.ns(name, map[string]string{"ns": name}))
		c.NPs = append(c.NPs, bd.np(name, "default-deny-all", nil, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		for l := 0; l < labels; l++ {
			lbl := map[string]string{fmt.Sprintf("app-%d", l): fmt.Sprintf("scale-%d", l)}
			for p := 0; p < 10; p++ {
				c.Pods = append(c.Pods, bd.pod(name, fmt.Sprintf("pod-%d-%d", l, p), lbl))
			}
			c.NPs = append(c.NPs, bd.np(name, fmt.Sprintf("np-%d", l), lbl, podPeer(lbl)))
		}
	}
	bd.done()
	c.PodRelabel = relabelled(c.Pods[0], map[string]string{"app-1": "scale-1"})
	c.NamespaceRelabel = nsRelabelled(c.Namespaces[0], map[string]string{"ns": "ns-0", "bench": "relabelled"})
	c.AddedNP = bd.np("ns-0", "np-added", map[string]string{"app-0": "scale-0"}, podPeer(map[string]string{"app-1": "scale-1"}))
	return c
}

// OneNamespace: 10,000 pods (quick: 1,000) labelled app-1=scale-1 and as
// many identical policies.
func OneNamespace(quick bool) *Cluster { return oneNamespace(quick, buildOptions{keep: AllKinds}) }

func oneNamespace(quick bool, o buildOptions) *Cluster {
	bd := newBuilder(pick(quick, 1000, 100), o)
	c := &Cluster{Nodes: bd.nodeObjs(), Namespaces: []*corev1.Namespace{bd.ns("ns", map[string]string{"ns": "ns"})}}
	lbl := map[string]string{"app-1": "scale-1"}
	n := pick(quick, 10000, 1000)
	for i := 0; i < n; i++ {
		c.Pods = append(c.Pods, bd.pod("ns", fmt.Sprintf("pod-%d", i), lbl))
		c.NPs = append(c.NPs, bd.np("ns", fmt.Sprintf("np-%d", i), lbl, podPeer(lbl)))
	}
	bd.done()
	c.PodRelabel = relabelled(c.Pods[0], map[string]string{"app-1": "scale-2"})
	c.NamespaceRelabel = nsRelabelled(c.Namespaces[0], map[string]string{"ns": "ns", "bench": "relabelled"})
	c.AddedNP = bd.np("ns", "np-added", lbl, podPeer(map[string]string{"app-1": "scale-2"}))
	return c
}

// PolicyPerPod: 10,000 pods (quick: 1,000) in uniquely labelled pairs, one
// policy per pod allowing ingress only from its partner.
func PolicyPerPod(quick bool) *Cluster { return policyPerPod(quick, buildOptions{keep: AllKinds}) }

func policyPerPod(quick bool, o buildOptions) *Cluster {
	bd := newBuilder(pick(quick, 1000, 100), o)
	c := &Cluster{Nodes: bd.nodeObjs(), Namespaces: []*corev1.Namespace{bd.ns("ns", map[string]string{"ns": "ns"})}}
	pairs := pick(quick, 5000, 500)
	for i := 0; i < pairs; i++ {
		for side := 0; side < 2; side++ {
			me := map[string]string{"pair": fmt.Sprint(i), "side": fmt.Sprint(side)}
			partner := map[string]string{"pair": fmt.Sprint(i), "side": fmt.Sprint(1 - side)}
			name := fmt.Sprintf("pod-%d-%d", i, side)
			c.Pods = append(c.Pods, bd.pod("ns", name, me))
			c.NPs = append(c.NPs, bd.np("ns", name, me, podPeer(partner)))
		}
	}
	// Pod 0 joins pair 1's side 0: it leaves two groups and joins two.
	bd.done()
	c.PodRelabel = relabelled(c.Pods[0], map[string]string{"pair": "1", "side": "0"})
	c.NamespaceRelabel = nsRelabelled(c.Namespaces[0], map[string]string{"ns": "ns", "bench": "relabelled"})
	c.AddedNP = bd.np("ns", "np-added", map[string]string{"pair": "0", "side": "0"}, podPeer(map[string]string{"pair": "2", "side": "1"}))
	return c
}

// ClusterScoped: 1,000 namespaces (quick: 30) × 100 pods, 10 policies per
// namespace, each policy's peers 100 pods in 10 namespaces
// (namespaceSelector AND podSelector).
func ClusterScoped(quick bool) *Cluster { return clusterScoped(quick, buildOptions{keep: AllKinds}) }

func clusterScoped(quick bool, o buildOptions) *Cluster {
	bd := newBuilder(pick(quick, 1000, 100), o)
	c := &Cluster{Nodes: bd.nodeObjs()}
	n := pick(quick, 1000, 30)
	groups := n / 10
	peer := func(i, j int) []networkingv1.NetworkPolicyPeer {
		app := map[string]string{"app": fmt.Sprintf("app-%d", j)}
		return []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": fmt.Sprintf("g%d", (i/10+j+1)%groups)}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: app},
		}}
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, bd.ns(name, map[string]string{"group": fmt.Sprintf("g%d", i/10)}))
		for p := 0; p < 100; p++ {
			c.Pods = append(c.Pods, bd.pod(name, fmt.Sprintf("pod-%d", p), map[string]string{"app": fmt.Sprintf("app-%d", p%10)}))
		}
		for j := 0; j < 10; j++ {
			c.NPs = append(c.NPs, bd.np(name, fmt.Sprintf("np-%d", j), map[string]string{"app": fmt.Sprintf("app-%d", j)}, peer(i, j)))
		}
	}
	bd.done()
	c.PodRelabel = relabelled(c.Pods[0], map[string]string{"app": "app-1"})
	// ns-0 moves from group g0 to g1: it leaves and joins peer groups.
	c.NamespaceRelabel = nsRelabelled(c.Namespaces[0], map[string]string{"group": "g1"})
	c.AddedNP = bd.np("ns-0", "np-added", map[string]string{"app": "app-0"}, peer(0, 5))
	return c
}

// AdminHeavy: 10,000 pods (quick: 1,000) in 1,000 namespaces (quick: 100)
// of 10 teams, and 1,001 AdminNetworkPolicies (quick: 101), one at every
// priority from 0, each with 25 ingress rules (Allow, Deny, Pass in turn)
// whose peers are one app's pods in one team's namespaces. Every policy's
// subject is one team's namespaces, so every pod is a subject.
func AdminHeavy(quick bool) *Cluster { return adminHeavy(quick, buildOptions{keep: AllKinds}) }

func adminHeavy(quick bool, o buildOptions) *Cluster {
	bd := newBuilder(pick(quick, 1000, 100), o)
	c := teams(bd, pick(quick, 1000, 100))
	n := pick(quick, 1001, 101)
	for k := 0; k < n; k++ {
		c.ANPs = append(c.ANPs, adminPolicy(bd, fmt.Sprintf("anp-%d", k), int32(k), k, 25, true))
	}
	bd.done()
	c.PodRelabel = relabelled(c.Pods[0], map[string]string{"app": "app-5"})
	c.NamespaceRelabel = nsRelabelled(c.Namespaces[0], map[string]string{"team": "t1"})
	// Priorities are all taken: the added policy shares priority 500.
	c.AddedANP = adminPolicy(bd, "anp-added", 500, 7, 25, true)
	return c
}

// teams is the base of AdminHeavy and Mixed: nss namespaces of ten teams
// (team=tN), each with ten pods app=app-0 … app-9.
func teams(bd *builder, nss int) *Cluster {
	c := &Cluster{Nodes: bd.nodeObjs()}
	for i := 0; i < nss; i++ {
		name := fmt.Sprintf("ns-%d", i)
		c.Namespaces = append(c.Namespaces, bd.ns(name, map[string]string{"team": fmt.Sprintf("t%d", i%10)}))
		for p := 0; p < 10; p++ {
			c.Pods = append(c.Pods, bd.pod(name, fmt.Sprintf("pod-%d", p), map[string]string{"app": fmt.Sprintf("app-%d", p)}))
		}
	}
	return c
}

// Mixed is the compute engine's own target (pkg/compute's benchmarks), at
// full scale only: 10,000 pods in 1,000 namespaces of ten teams, nps
// NetworkPolicies spread over the namespaces, and 100
// AdminNetworkPolicies × 20 ingress rules (Allow, Deny, Pass in turn).
func Mixed(nps int) *Cluster {
	bd := newBuilder(1000, buildOptions{keep: AllKinds})
	c := teams(bd, 1000)
	for j := 0; j < nps; j++ {
		k := j / 1000
		c.NPs = append(c.NPs, bd.np(fmt.Sprintf("ns-%d", j%1000), fmt.Sprintf("np-%d", k),
			map[string]string{"app": fmt.Sprintf("app-%d", k%10)},
			podPeer(map[string]string{"app": fmt.Sprintf("app-%d", (k+1)%10)})))
	}
	for k := 0; k < 100; k++ {
		c.ANPs = append(c.ANPs, adminPolicy(bd, fmt.Sprintf("anp-%d", k), int32(k*10), k, 20, false))
	}
	return c
}

// adminPolicy is the k-th policy of a teams cluster: its subject is team
// k%10's namespaces; rule r (Allow, Deny, Pass in turn) has one app's pods
// in one team's namespaces as peers and, withPort, one TCP port.
func adminPolicy(bd *builder, name string, prio int32, k, rules int, withPort bool) *v1alpha1.AdminNetworkPolicy {
	actions := []v1alpha1.AdminNetworkPolicyRuleAction{
		v1alpha1.AdminNetworkPolicyRuleActionAllow, v1alpha1.AdminNetworkPolicyRuleActionDeny, v1alpha1.AdminNetworkPolicyRuleActionPass}
	uid := bd.nextUID()
	if bd.keep&AdminNetworkPolicyKind == 0 {
		return nil
	}
	anp := &v1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uidOf(uid)}}
	anp.Spec.Priority = prio
	anp.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", k%10)}}
	port := int32(80 + k%20)
	for r := 0; r < rules; r++ {
		rule := v1alpha1.AdminNetworkPolicyIngressRule{
			Name:   fmt.Sprintf("r%d", r),
			Action: actions[r%3],
			From: []v1alpha1.AdminNetworkPolicyIngressPeer{{Pods: &v1alpha1.NamespacedPod{
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", (k+r)%10)}},
				PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", r%10)}},
			}}},
		}
		if withPort {
			rule.Ports = &[]v1alpha1.AdminNetworkPolicyPort{{PortNumber: &v1alpha1.Port{Protocol: corev1.ProtocolTCP, Port: port}}}
		}
		anp.Spec.Ingress = append(anp.Spec.Ingress, rule)
	}
	if bd.emitted(anp) {
		return nil
	}
	return anp
}
