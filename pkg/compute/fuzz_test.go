package compute

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/model"
)

// FuzzPolicyObjects feeds garbled policy objects of all four kinds into an
// engine holding a small cluster: it must never panic, and what it computes
// must be consistent and fail closed.
func FuzzPolicyObjects(f *testing.F) {
	f.Add(uint8(0), []byte(`{"metadata":{"name":"p","namespace":"prod"},"spec":{"podSelector":{},"ingress":[{"from":[{}]}]}}`))
	f.Add(uint8(1), []byte(`{"metadata":{"name":"a"},"spec":{"priority":5,"subject":{"namespaces":{}},"egress":[{"action":"Deny","to":[{"networks":["10.0.0.0/8"]}],"ports":[{"portRange":{"start":9,"end":1}}]}]}}`))
	f.Add(uint8(2), []byte(`{"metadata":{"name":"default"},"spec":{"subject":{"pods":{"namespaceSelector":{},"podSelector":{}}},"ingress":[{"action":"Pass","from":[{"namespaces":{}}]}]}}`))
	f.Add(uint8(3), []byte(`{"metadata":{"name":"c"},"spec":{"tier":"Baseline","priority":2000,"subject":{"namespaces":{}},"egress":[{"action":"Accept","to":[{"domainNames":["x.io"]}],"protocols":[{"tcp":{}}]}]}}`))
	f.Fuzz(func(t *testing.T, kind uint8, doc []byte) {
		e := New()
		adminWorld(e)
		switch kind % 4 {
		case 0:
			o := &networkingv1.NetworkPolicy{}
			if yaml.Unmarshal(doc, o) != nil {
				return
			}
			e.UpsertNetworkPolicy(o)
			e.UpsertNetworkPolicy(o)
			defer e.DeleteNetworkPolicy(o.Namespace, o.Name)
		case 1:
			o := &v1alpha1.AdminNetworkPolicy{}
			if yaml.Unmarshal(doc, o) != nil {
				return
			}
			e.UpsertAdminNetworkPolicy(o)
			defer e.DeleteAdminNetworkPolicy(o.Name)
		case 2:
			o := &v1alpha1.BaselineAdminNetworkPolicy{}
			if yaml.Unmarshal(doc, o) != nil {
				return
			}
			e.UpsertBaselineAdminNetworkPolicy(o)
			defer e.DeleteBaselineAdminNetworkPolicy(o.Name)
		case 3:
			o := &v1alpha2.ClusterNetworkPolicy{}
			if yaml.Unmarshal(doc, o) != nil {
				return
			}
			e.UpsertClusterNetworkPolicy(o)
			defer e.DeleteClusterNetworkPolicy(o.Name)
		}
		checkSnapshot(t, e.Snapshot())
	})
}

// checkSnapshot asserts the invariants every snapshot must satisfy.
func checkSnapshot(t *testing.T, s *model.Snapshot) {
	t.Helper()
	for i, p := range s.Policies {
		if i > 0 && model.ComparePolicies(s.Policies[i-1], p) >= 0 {
			t.Fatalf("policies out of order at %d", i)
		}
		if len(p.AppliedToGroups) != 1 || s.AppliedToGroups[p.AppliedToGroups[0]] == nil {
			t.Fatalf("policy %s: applied-to groups %v missing", p.ID, p.AppliedToGroups)
		}
		if !slices.Equal(p.Span, s.AppliedToGroups[p.AppliedToGroups[0]].Span) {
			t.Fatalf("policy %s span %v differs from its group's", p.ID, p.Span)
		}
		if p.Priority < 0 || p.Priority > 1000 {
			t.Fatalf("priority %d out of range", p.Priority)
		}
		hasError := false
		for _, c := range p.Conditions {
			if c.Reason == "" || c.Message == "" {
				t.Fatalf("empty condition %+v", c)
			}
			hasError = hasError || c.Severity == model.SeverityError
		}
		for _, r := range p.Rules {
			switch r.Action {
			case model.ActionAllow, model.ActionDeny, model.ActionPass:
			default:
				t.Fatalf("rule action %q", r.Action)
			}
			if p.Tier == model.TierNetworkPolicy && r.Action != model.ActionAllow {
				t.Fatalf("NetworkPolicy rule with action %s", r.Action)
			}
			for _, id := range r.Peer.AddressGroups {
				ag := s.AddressGroups[id]
				if ag == nil {
					t.Fatalf("policy %s: address group %s missing", p.ID, id)
				}
				for _, n := range p.Span {
					if !slices.Contains(ag.Span, n) {
						t.Fatalf("address group %s span %v lacks policy node %s", id, ag.Span, n)
					}
				}
			}
			for _, b := range r.Peer.IPBlocks {
				if !b.CIDR.IsValid() || b.CIDR != b.CIDR.Masked() {
					t.Fatalf("bad IPBlock %v", b)
				}
			}
			for _, pt := range r.Ports {
				if pt.Port < 0 || pt.Port > 65535 || (pt.EndPort != 0 && pt.EndPort <= pt.Port) {
					t.Fatalf("bad port %+v", pt)
				}
			}
		}
		_ = hasError
	}
	for id, g := range s.AppliedToGroups {
		if !slices.IsSorted(g.Span) || g.ID != id {
			t.Fatalf("group %s: span %v", id, g.Span)
		}
		// One entry per node of the span, in the span's (sorted) order,
		// none empty.
		if len(g.MembersByNode) != len(g.Span) {
			t.Fatalf("group %s: span %v but members on %d nodes", id, g.Span, len(g.MembersByNode))
		}
		for i, e := range g.MembersByNode {
			if e.Node != g.Span[i] || len(e.Members) == 0 {
				t.Fatalf("group %s: entry %d is node %s with %d members, span %v", id, i, e.Node, len(e.Members), g.Span)
			}
		}
	}
}

// FuzzIncremental applies a random sequence of pod, namespace, node and
// policy events and checks that the incrementally maintained model equals
// the one computed from scratch from the final objects.
func FuzzIncremental(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{7, 7, 7, 3, 9, 200, 100, 50, 25, 12, 6, 3, 1, 0, 255, 254})
	f.Add([]byte{0, 1, 2, 250, 3, 0, 7, 7, 7, 1, 9, 4, 2, 17, 5, 6, 1, 1, 8, 3, 3, 253, 1, 0, 9, 200, 1, 3, 2, 2})
	// Every run of prepared pods in a Batch takes applyPods' path of
	// finding groups first, however short.
	withPodRunMin(f, 1)
	f.Fuzz(func(t *testing.T, ops []byte) {
		u := newUniverse()
		inc := New()
		m := newMirror(t, inc)
		for len(ops) >= 3 {
			if ops[0] >= batchMarker {
				// The next 1–8 operations go into one Batch.
				n := 1 + int(ops[1]%8)
				ops = ops[3:]
				inc.Batch(func(b *Batch) {
					for ; n > 0 && len(ops) >= 3; n-- {
						u.apply(b, ops[0]%batchMarker, ops[1], ops[2])
						ops = ops[3:]
					}
				})
			} else {
				u.apply(inc, ops[0], ops[1], ops[2])
				ops = ops[3:]
			}
			m.check(inc.Snapshot())
		}
		scratch := New()
		u.replay(scratch)
		a, b := normalize(inc.Snapshot()), normalize(scratch.Snapshot())
		if !reflect.DeepEqual(a, b) {
			ja, _ := json.MarshalIndent(a, "", " ")
			jb, _ := json.MarshalIndent(b, "", " ")
			t.Fatalf("incremental model differs from scratch:\n%s\n---\n%s", ja, jb)
		}
		checkSnapshot(t, inc.Snapshot())
	})
}

// normalize drops generations (they depend on history) from a snapshot.
func normalize(s *model.Snapshot) *model.Snapshot {
	out := &model.Snapshot{AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	for _, p := range s.Policies {
		c := *p
		c.Generation = 0
		out.Policies = append(out.Policies, &c)
	}
	for id, g := range s.AppliedToGroups {
		c := *g
		c.Generation = 0
		out.AppliedToGroups[id] = &c
	}
	for id, g := range s.AddressGroups {
		c := *g
		c.Generation = 0
		out.AddressGroups[id] = &c
	}
	return out
}

// universe is a tiny cluster whose objects fuzz input edits.
type universe struct {
	namespaces map[string]*corev1.Namespace
	pods       map[string]*corev1.Pod
	nodes      map[string]*corev1.Node
	nps        map[string]*networkingv1.NetworkPolicy
	anps       map[string]*v1alpha1.AdminNetworkPolicy
	cnps       map[string]*v1alpha2.ClusterNetworkPolicy
}

func newUniverse() *universe {
	return &universe{
		namespaces: map[string]*corev1.Namespace{}, pods: map[string]*corev1.Pod{}, nodes: map[string]*corev1.Node{},
		nps: map[string]*networkingv1.NetworkPolicy{}, anps: map[string]*v1alpha1.AdminNetworkPolicy{}, cnps: map[string]*v1alpha2.ClusterNetworkPolicy{},
	}
}

var (
	fuzzLabels = []string{"app=a", "app=b", "tier=x", "env=prod"}
	fuzzSel    = []string{
		`{}`, `{matchLabels: {app: a}}`, `{matchLabels: {app: b}}`,
		`{matchExpressions: [{key: tier, operator: Exists}]}`,
		`{matchExpressions: [{key: app, operator: In, values: [a, b]}]}`,
		`{matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}`,
	}
)

// batchMarker: an operation byte at or above it starts a Batch.
const batchMarker = 250

// mirror is a subscriber that keeps a copy of every computed object by
// reading each one a change reports, as distribution does. After every
// engine call it must equal the engine's snapshot, generations and spans
// included: no change may go unreported. A change that keeps an object's
// generation may change its span only (what an agent holds stays valid);
// any other change must raise the generation.
type mirror struct {
	t        *testing.T
	policies map[string]*model.Policy
	atgs     map[string]*model.AppliedToGroup
	ags      map[string]*model.AddressGroup
}

func newMirror(t *testing.T, e *Engine) *mirror {
	m := &mirror{t: t, policies: map[string]*model.Policy{}, atgs: map[string]*model.AppliedToGroup{}, ags: map[string]*model.AddressGroup{}}
	e.Subscribe(func(cs []Change) {
		for _, ch := range cs {
			switch ch.Kind {
			case KindPolicy:
				p, ok := e.Policy(ch.ID)
				mirrorChange(m, ch, m.policies, p, ok, func(p *model.Policy) *model.Meta { return &p.Meta })
			case KindAppliedToGroup:
				g, ok := e.AppliedToGroup(ch.ID)
				mirrorChange(m, ch, m.atgs, g, ok, func(g *model.AppliedToGroup) *model.Meta { return &g.Meta })
			case KindAddressGroup:
				g, ok := e.AddressGroup(ch.ID)
				mirrorChange(m, ch, m.ags, g, ok, func(g *model.AddressGroup) *model.Meta { return &g.Meta })
			}
		}
	})
	return m
}

func mirrorChange[T any](m *mirror, ch Change, have map[string]*T, obj *T, ok bool, meta func(*T) *model.Meta) {
	m.t.Helper()
	if ch.Type == Deleted {
		if ok {
			m.t.Fatalf("%s %s reported deleted but still readable", ch.Kind, ch.ID)
		}
		delete(have, ch.ID)
		return
	}
	if !ok {
		m.t.Fatalf("%s %s reported %s but not readable", ch.Kind, ch.ID, ch.Type)
	}
	if g := meta(obj).Generation; g != ch.Generation {
		m.t.Fatalf("%s %s reported at generation %d, read at %d", ch.Kind, ch.ID, ch.Generation, g)
	}
	if old := have[ch.ID]; old != nil {
		og, ng := meta(old).Generation, meta(obj).Generation
		switch {
		case ng < og:
			m.t.Fatalf("%s %s generation went back from %d to %d", ch.Kind, ch.ID, og, ng)
		case ng == og:
			a, b := *old, *obj
			meta(&a).Span, meta(&b).Span = nil, nil
			if !reflect.DeepEqual(a, b) {
				m.t.Fatalf("%s %s changed beyond its span at the same generation %d:\n%+v\n%+v", ch.Kind, ch.ID, og, a, b)
			}
		}
	}
	have[ch.ID] = obj
}

func (m *mirror) check(s *model.Snapshot) {
	m.t.Helper()
	pols := map[string]*model.Policy{}
	for _, p := range s.Policies {
		pols[p.ID] = p
	}
	for _, d := range []struct {
		what      string
		got, want any
	}{{"policies", m.policies, pols}, {"applied-to groups", m.atgs, s.AppliedToGroups}, {"address groups", m.ags, s.AddressGroups}} {
		if !reflect.DeepEqual(d.got, d.want) {
			ja, _ := json.MarshalIndent(d.got, "", " ")
			jb, _ := json.MarshalIndent(d.want, "", " ")
			m.t.Fatalf("%s as a subscriber saw them differ from the snapshot:\n%s\n---\n%s", d.what, ja, jb)
		}
	}
}

func (u *universe) apply(e Writer, op, x, y byte) {
	name := func(prefix string, n byte) string { return fmt.Sprintf("%s%d", prefix, n) }
	ns := name("ns", x%3)
	lbl := []string{fuzzLabels[y%4]}
	if y&0x10 != 0 {
		lbl = append(lbl, fuzzLabels[(y>>5)%4])
	}
	switch op % 10 {
	case 0, 1, 2: // pod upsert
		ip := netip.AddrFrom4([4]byte{10, x % 3, y % 5, byte(op)}).String()
		if op%3 == 2 {
			ip = ""
		}
		p := mkPod(ns, name("p", y%6), name("n", (x>>3)%3), ip, lbl, withPort("web", "TCP", int32(80+x%2)))
		u.pods[p.Namespace+"/"+p.Name] = p
		if x&0x80 != 0 {
			// As the controller feeds pods: prepared on arrival (the
			// replay, which the incremental result is compared with,
			// upserts the objects).
			e.UpsertPreparedPod(PreparePod(p))
		} else {
			e.UpsertPod(p)
		}
	case 3:
		key := ns + "/" + name("p", y%6)
		delete(u.pods, key)
		e.DeletePod(ns, name("p", y%6))
	case 4:
		n := mkNS(ns, lbl...)
		u.namespaces[ns] = n
		e.UpsertNamespace(n)
	case 5:
		delete(u.namespaces, ns)
		e.DeleteNamespace(ns)
	case 6:
		n := mkNode(name("n", x%3), lbl, fmt.Sprintf("192.168.0.%d", y%4))
		u.nodes[n.Name] = n
		e.UpsertNode(n)
	case 7:
		np := &networkingv1.NetworkPolicy{}
		mustYAML(nil, fmt.Sprintf(`
metadata: {name: %s, namespace: %s}
spec:
  podSelector: %s
  ingress: [{from: [{podSelector: %s}], ports: [{port: web}]}]
  egress: [{to: [{namespaceSelector: %s, podSelector: %s}]}]
`, name("np", y%3), ns, fuzzSel[x%6], fuzzSel[y%6], fuzzSel[(x>>3)%6], fuzzSel[(y>>3)%6]), np)
		if y&0x80 != 0 {
			delete(u.nps, np.Namespace+"/"+np.Name)
			e.DeleteNetworkPolicy(np.Namespace, np.Name)
			return
		}
		u.nps[np.Namespace+"/"+np.Name] = np
		e.UpsertNetworkPolicy(np)
	case 8:
		anp := &v1alpha1.AdminNetworkPolicy{}
		mustYAML(nil, fmt.Sprintf(`
metadata: {name: %s}
spec:
  priority: %d
  subject: {pods: {namespaceSelector: %s, podSelector: %s}}
  ingress: [{action: Pass, from: [{namespaces: %s}]}]
  egress: [{action: Deny, to: [{nodes: %s}, {pods: {namespaceSelector: {}, podSelector: %s}}]}]
`, name("anp", y%3), x%3, fuzzSel[x%6], fuzzSel[y%6], fuzzSel[(x>>3)%6], fuzzSel[(y>>3)%6], fuzzSel[(x>>2)%6]), anp)
		if y&0x80 != 0 {
			delete(u.anps, anp.Name)
			e.DeleteAdminNetworkPolicy(anp.Name)
			return
		}
		u.anps[anp.Name] = anp
		e.UpsertAdminNetworkPolicy(anp)
	case 9:
		cnp := &v1alpha2.ClusterNetworkPolicy{}
		tier := "Admin"
		if x&1 != 0 {
			tier = "Baseline"
		}
		mustYAML(nil, fmt.Sprintf(`
metadata: {name: %s}
spec:
  tier: %s
  priority: %d
  subject: {namespaces: %s}
  egress: [{action: Accept, to: [{pods: {namespaceSelector: %s, podSelector: %s}}]}]
`, name("cnp", y%2), tier, y%3, fuzzSel[x%6], fuzzSel[(y>>3)%6], fuzzSel[(x>>3)%6]), cnp)
		if y&0x80 != 0 {
			delete(u.cnps, cnp.Name)
			e.DeleteClusterNetworkPolicy(cnp.Name)
			return
		}
		u.cnps[cnp.Name] = cnp
		e.UpsertClusterNetworkPolicy(cnp)
	}
}

// replay feeds the final objects into a fresh engine, policies first (the
// opposite of the usual order, to exercise group creation from indexes).
func (u *universe) replay(e *Engine) {
	for _, o := range u.nps {
		e.UpsertNetworkPolicy(o)
	}
	for _, o := range u.anps {
		e.UpsertAdminNetworkPolicy(o)
	}
	for _, o := range u.cnps {
		e.UpsertClusterNetworkPolicy(o)
	}
	for _, o := range u.nodes {
		e.UpsertNode(o)
	}
	for _, o := range u.pods {
		e.UpsertPod(o)
	}
	for _, o := range u.namespaces {
		e.UpsertNamespace(o)
	}
}
