package compute

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// cluster is a set of API objects to feed an engine. The benchmarks build
// it before the clock starts: what is timed is computation only.
type cluster struct {
	namespaces []*corev1.Namespace
	nodes      []*corev1.Node
	pods       []*corev1.Pod
	nps        []*networkingv1.NetworkPolicy
	anps       []*v1alpha1.AdminNetworkPolicy
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
		out[i] = mkNode(fmt.Sprintf("node-%d", i), []string{fmt.Sprintf("rack=r%d", i%10)}, fmt.Sprintf("192.168.%d.%d", i/250, 1+i%250))
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

func (c *cluster) load(e *Engine) {
	for _, o := range c.namespaces {
		e.UpsertNamespace(o)
	}
	for _, o := range c.nodes {
		e.UpsertNode(o)
	}
	for _, o := range c.pods {
		e.UpsertPod(o)
	}
	for _, o := range c.nps {
		e.UpsertNetworkPolicy(o)
	}
	for _, o := range c.anps {
		e.UpsertAdminNetworkPolicy(o)
	}
}

// compute runs one full computation (load and snapshot, which builds every
// model object) per iteration and reports heap in use after it.
func benchCompute(b *testing.B, c *cluster) {
	b.ReportAllocs()
	var e *Engine
	cpu0 := cpuTime()
	for b.Loop() {
		e = New()
		changes := 0
		e.Subscribe(func(cs []Change) { changes += len(cs) })
		c.load(e)
		s := e.Snapshot()
		if len(s.Policies) != len(c.nps)+len(c.anps) {
			b.Fatalf("computed %d policies, want %d", len(s.Policies), len(c.nps)+len(c.anps))
		}
		b.ReportMetric(float64(len(s.AppliedToGroups)), "appliedToGroups")
		b.ReportMetric(float64(len(s.AddressGroups)), "addressGroups")
	}
	b.StopTimer()
	// CPU seconds used per run (all threads, GC included): the machine is
	// shared, so wall time alone overstates the cost under contention.
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heapMB")
	runtime.KeepAlive(e)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// smallNamespaces: 25,000 namespaces × (4 pods, default-deny-all, np-1, np-2).
func smallNamespaces() *cluster {
	bd := newBuilder()
	c := &cluster{nodes: bd.nodeObjs()}
	for i := 0; i < 25000; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.namespaces = append(c.namespaces, mkNS(ns))
		for j, l := range []map[string]string{{"app-1": "scale-1"}, {"app-1": "scale-1"}, {"app-2": "scale-2"}, {"app-2": "scale-2"}} {
			c.pods = append(c.pods, bd.pod(ns, fmt.Sprintf("pod-%d", j), l))
		}
		c.nps = append(c.nps,
			bd.np(ns, "default-deny-all", nil, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress),
			bd.np(ns, "np-1", map[string]string{"app-1": "scale-1"}, podPeer(map[string]string{"app-1": "scale-1"})),
			bd.np(ns, "np-2", map[string]string{"app-2": "scale-2"}, podPeer(map[string]string{"app-2": "scale-2"})))
	}
	return c
}

// largeNamespaces: 100 namespaces × (default-deny-all + 100 policies, 10 pods per label).
func largeNamespaces() *cluster {
	bd := newBuilder()
	c := &cluster{nodes: bd.nodeObjs()}
	for i := 0; i < 100; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.namespaces = append(c.namespaces, mkNS(ns))
		c.nps = append(c.nps, bd.np(ns, "default-deny-all", nil, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		for l := 0; l < 100; l++ {
			lbl := map[string]string{fmt.Sprintf("app-%d", l): fmt.Sprintf("scale-%d", l)}
			for p := 0; p < 10; p++ {
				c.pods = append(c.pods, bd.pod(ns, fmt.Sprintf("pod-%d-%d", l, p), lbl))
			}
			c.nps = append(c.nps, bd.np(ns, fmt.Sprintf("np-%d", l), lbl, podPeer(lbl)))
		}
	}
	return c
}

// oneNamespace: 10,000 pods labelled app-1=scale-1, 10,000 identical policies.
func oneNamespace() *cluster {
	bd := newBuilder()
	c := &cluster{nodes: bd.nodeObjs(), namespaces: []*corev1.Namespace{mkNS("ns")}}
	lbl := map[string]string{"app-1": "scale-1"}
	for i := 0; i < 10000; i++ {
		c.pods = append(c.pods, bd.pod("ns", fmt.Sprintf("pod-%d", i), lbl))
		c.nps = append(c.nps, bd.np("ns", fmt.Sprintf("np-%d", i), lbl, podPeer(lbl)))
	}
	return c
}

// policyPerPod: 10,000 pods in 5,000 uniquely labelled pairs, one policy per
// pod allowing ingress only from its partner.
func policyPerPod() *cluster {
	bd := newBuilder()
	c := &cluster{nodes: bd.nodeObjs(), namespaces: []*corev1.Namespace{mkNS("ns")}}
	for i := 0; i < 5000; i++ {
		for side := 0; side < 2; side++ {
			me := map[string]string{"pair": fmt.Sprint(i), "side": fmt.Sprint(side)}
			partner := map[string]string{"pair": fmt.Sprint(i), "side": fmt.Sprint(1 - side)}
			name := fmt.Sprintf("pod-%d-%d", i, side)
			c.pods = append(c.pods, bd.pod("ns", name, me))
			c.nps = append(c.nps, bd.np("ns", name, me, podPeer(partner)))
		}
	}
	return c
}

// clusterScoped: 1,000 namespaces × 100 pods, 10 policies per namespace,
// each policy's peers 100 pods in 10 namespaces (namespaceSelector AND
// podSelector).
func clusterScoped() *cluster {
	bd := newBuilder()
	c := &cluster{nodes: bd.nodeObjs()}
	for i := 0; i < 1000; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.namespaces = append(c.namespaces, mkNS(ns, fmt.Sprintf("group=g%d", i/10)))
		for p := 0; p < 100; p++ {
			c.pods = append(c.pods, bd.pod(ns, fmt.Sprintf("pod-%d", p), map[string]string{"app": fmt.Sprintf("app-%d", p%10)}))
		}
		for j := 0; j < 10; j++ {
			app := map[string]string{"app": fmt.Sprintf("app-%d", j)}
			np := bd.np(ns, fmt.Sprintf("np-%d", j), app, []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": fmt.Sprintf("g%d", (i/10+j+1)%100)}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: app},
			}})
			c.nps = append(c.nps, np)
		}
	}
	return c
}

// mixed is the engine's own target: 10k pods in 1k namespaces, nps
// NetworkPolicies spread over the namespaces, 100 AdminNetworkPolicies × 20
// rules.
func mixed(nps int) *cluster {
	bd := newBuilder()
	c := &cluster{nodes: bd.nodeObjs()}
	for i := 0; i < 1000; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		c.namespaces = append(c.namespaces, mkNS(ns, fmt.Sprintf("team=t%d", i%10)))
		for p := 0; p < 10; p++ {
			c.pods = append(c.pods, bd.pod(ns, fmt.Sprintf("pod-%d", p), map[string]string{"app": fmt.Sprintf("app-%d", p)}))
		}
	}
	for j := 0; j < nps; j++ {
		ns := fmt.Sprintf("ns-%d", j%1000)
		k := j / 1000
		c.nps = append(c.nps, bd.np(ns, fmt.Sprintf("np-%d", k),
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
		c.anps = append(c.anps, anp)
	}
	return c
}

func BenchmarkComputeSmallNamespaces(b *testing.B) { benchCompute(b, smallNamespaces()) }
func BenchmarkComputeLargeNamespaces(b *testing.B) { benchCompute(b, largeNamespaces()) }
func BenchmarkComputeOneNamespace(b *testing.B)    { benchCompute(b, oneNamespace()) }
func BenchmarkComputePolicyPerPod(b *testing.B)    { benchCompute(b, policyPerPod()) }
func BenchmarkComputeClusterScoped(b *testing.B)   { benchCompute(b, clusterScoped()) }

// BenchmarkComputeInitial: 10k pods / 1k namespaces / 1k NetworkPolicies /
// 100 AdminNetworkPolicies × 20 rules, from nothing.
func BenchmarkComputeInitial(b *testing.B) { benchCompute(b, mixed(1000)) }

// BenchmarkPodLabelChange measures one pod label change (and the snapshot
// reads of what changed) with a growing number of NetworkPolicies: the cost
// must stay flat.
func BenchmarkPodLabelChange(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			c := mixed(n)
			e := New()
			c.load(e)
			var changed []Change
			e.Subscribe(func(cs []Change) { changed = append(changed[:0], cs...) })
			pod := c.pods[0].DeepCopy()
			labelsA, labelsB := map[string]string{"app": "app-0"}, map[string]string{"app": "app-1"}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if i%2 == 0 {
					pod.Labels = labelsB
				} else {
					pod.Labels = labelsA
				}
				i++
				e.UpsertPod(pod)
				// Read back what a distribution layer would send.
				for _, ch := range changed {
					switch ch.Kind {
					case KindPolicy:
						e.Policy(ch.ID)
					case KindAppliedToGroup:
						e.AppliedToGroup(ch.ID)
					case KindAddressGroup:
						e.AddressGroup(ch.ID)
					}
				}
			}
			b.ReportMetric(float64(len(changed)), "changes/op")
		})
	}
}
