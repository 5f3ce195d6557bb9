package compute

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/bench/shapes"
)

func mkNS(name string, lbls ...string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kv(lbls...)}}
}

// kv turns "k=v" strings into a label map.
func kv(pairs ...string) map[string]string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

type podOpt func(*corev1.Pod)

func withPort(name string, proto corev1.Protocol, port int32) podOpt {
	return func(p *corev1.Pod) {
		if len(p.Spec.Containers) == 0 {
			p.Spec.Containers = []corev1.Container{{Name: "c"}}
		}
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: name, Protocol: proto, ContainerPort: port})
	}
}

func mkPod(ns, name, node, ip string, lbls []string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: kv(lbls...), UID: types.UID(ns + "-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func mkNode(name string, lbls []string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kv(lbls...)}}
	for i, ip := range ips {
		t := corev1.NodeInternalIP
		if i > 0 {
			t = corev1.NodeExternalIP
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: t, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

// mustYAML decodes a YAML object into out or fails the test.
func mustYAML(t testing.TB, doc string, out any) {
	if err := yaml.UnmarshalStrict([]byte(doc), out); err != nil {
		if t == nil {
			panic(fmt.Sprintf("decoding test YAML: %v\n%s", err, doc))
		}
		t.Helper()
		t.Fatalf("decoding test YAML: %v\n%s", err, doc)
	}
}

func npYAML(t testing.TB, doc string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{}
	mustYAML(t, doc, np)
	return np
}

// recorder collects the changes of policies and groups the engine
// reports (NodePods changes are checked by nodepods_test.go).
type recorder struct{ batches [][]Change }

func record(e *Engine) *recorder {
	r := &recorder{}
	e.Subscribe(func(cs []Change) {
		r.batches = append(r.batches, slices.DeleteFunc(slices.Clone(cs), func(c Change) bool { return c.Kind == KindNodePods }))
	})
	return r
}

// take returns the changes since the last take, rendered as sorted
// "Type Kind ID" strings.
func (r *recorder) take() []string {
	var out []string
	for _, b := range r.batches {
		for _, c := range b {
			out = append(out, fmt.Sprintf("%s %s %s", c.Type, c.Kind, c.ID))
		}
	}
	r.batches = nil
	sort.Strings(out)
	return out
}

func policyByName(t testing.TB, s *model.Snapshot, kind model.PolicyKind, ns, name string) *model.Policy {
	t.Helper()
	for _, p := range s.Policies {
		if p.Source.Kind == kind && p.Source.Namespace == ns && p.Source.Name == name {
			return p
		}
	}
	t.Fatalf("policy %s %s/%s not in snapshot", kind, ns, name)
	return nil
}

// atgPods lists an applied-to group's pods as "ns/name@node", sorted.
func atgPods(t testing.TB, s *model.Snapshot, id string) []string {
	t.Helper()
	g := s.AppliedToGroups[id]
	if g == nil {
		t.Fatalf("applied-to group %s not in snapshot", id)
	}
	var out []string
	for _, e := range g.MembersByNode {
		node := e.Node
		for _, m := range e.Members {
			if m.Node != node {
				t.Errorf("member %v listed under node %s", m, node)
			}
			out = append(out, m.Pod.String()+"@"+node)
		}
	}
	sort.Strings(out)
	return out
}

// agMembers lists an address group's members as "ns/name" or "node:NAME".
func agMembers(t testing.TB, s *model.Snapshot, id string) []string {
	t.Helper()
	g := s.AddressGroups[id]
	if g == nil {
		t.Fatalf("address group %s not in snapshot", id)
	}
	var out []string
	for _, m := range g.Members {
		if m.Pod != nil {
			out = append(out, m.Pod.String())
		} else {
			out = append(out, "node:"+m.Node)
		}
	}
	sort.Strings(out)
	return out
}

// peerMembers lists every address group member of a rule's peer.
func peerMembers(t testing.TB, s *model.Snapshot, r model.Rule) []string {
	t.Helper()
	var out []string
	for _, id := range r.Peer.AddressGroups {
		out = append(out, agMembers(t, s, id)...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func blocks(bs []model.IPBlock) []string {
	var out []string
	for _, b := range bs {
		s := b.CIDR.String()
		for _, x := range b.Except {
			s += " -" + x.String()
		}
		out = append(out, s)
	}
	return out
}

func reasons(cs []model.Condition) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Reason)
	}
	return out
}

// sortedIDs is a recorder's expected changes in the order take gives
// them (group IDs are hashes: their order is not the test's to choose).
func sortedIDs(want []string) []string {
	want = slices.Clone(want)
	sort.Strings(want)
	return want
}

func equalStrings(t testing.TB, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

var _ = netip.Addr{}

// withPodRunMin sets podRunMin for the rest of the test.
func withPodRunMin(tb testing.TB, n int) {
	old := podRunMin
	podRunMin = n
	tb.Cleanup(func() { podRunMin = old })
}

// eventBatch is the controller's largest batch of events
// (pkg/controller's maxEventBatch).
const eventBatch = 1000

// preparePods prepares each pod, as the controller's pod informer does.
func preparePods(pods []*corev1.Pod) []PreparedPod {
	out := make([]PreparedPod, len(pods))
	for i, p := range pods {
		out[i] = PreparePod(p)
	}
	return out
}

// feedInBatches feeds c to e as the controller applies an initial list:
// its nodes, then batches of eventBatch pods, each batch with the pods'
// namespaces and a share of c's NetworkPolicies first and the pods last,
// as one run; then the policies and namespaces left.
func feedInBatches(e *Engine, c *shapes.Cluster, pods []PreparedPod) {
	for _, n := range c.Nodes {
		e.UpsertNode(n)
	}
	namespaces := map[string]*corev1.Namespace{}
	for _, ns := range c.Namespaces {
		namespaces[ns.Name] = ns
	}
	nps := c.NPs
	for i := 0; i < len(pods); i += eventBatch {
		batch := pods[i:min(i+eventBatch, len(pods))]
		e.Batch(func(b *Batch) {
			for _, p := range batch {
				if ns := namespaces[p.u.key.namespace]; ns != nil {
					b.UpsertNamespace(ns)
				}
			}
			share := min(len(nps), (len(c.NPs)*eventBatch+len(pods)-1)/len(pods))
			for _, np := range nps[:share] {
				b.UpsertNetworkPolicy(np)
			}
			nps = nps[share:]
			for _, p := range batch {
				b.UpsertPreparedPod(p)
			}
		})
	}
	for _, np := range nps {
		e.UpsertNetworkPolicy(np)
	}
	for _, ns := range c.Namespaces {
		e.UpsertNamespace(ns)
	}
}
