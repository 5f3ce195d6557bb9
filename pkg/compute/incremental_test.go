package compute

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/bench/shapes"
)

// incWorld: prod/web on n1, prod/db on n2, an NP on web allowing from db,
// and an ANP denying egress from every prod pod to nodes in zone b.
func incWorld(t *testing.T) (*Engine, *recorder, ids) {
	e := New()
	world(e)
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod, uid: np-web}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}]}]
`))
	e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: nodes, uid: anp-nodes}
spec:
  priority: 1
  subject: {namespaces: {matchLabels: {env: prod}}}
  egress: [{action: Deny, to: [{nodes: {matchLabels: {zone: b}}}]}]
`))
	s := e.Snapshot()
	np := policyByName(t, s, model.KindNetworkPolicy, "prod", "web")
	anp := policyByName(t, s, model.KindAdminNetworkPolicy, "", "nodes")
	return e, record(e), ids{
		webATG: np.AppliedToGroups[0], dbAG: np.Rules[0].Peer.AddressGroups[0],
		prodATG: anp.AppliedToGroups[0], nodeAG: anp.Rules[0].Peer.AddressGroups[0],
	}
}

type ids struct{ webATG, dbAG, prodATG, nodeAG string }

func TestIncrementalPodLifecycle(t *testing.T) {
	e, rec, id := incWorld(t)
	s := e.Snapshot()
	equalStrings(t, "db address group span", s.AddressGroups[id.dbAG].Span, []string{"n1"})
	equalStrings(t, "node group span", s.AddressGroups[id.nodeAG].Span, []string{"n1", "n2"})

	// A second db pod on a node already in every span: only the groups
	// holding it change.
	e.UpsertPod(mkPod("prod", "db2", "n1", "10.0.1.3", []string{"app=db"}))
	equalStrings(t, "db2 created", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AppliedToGroup " + id.prodATG,
	}))
	// The same object again: nothing.
	e.UpsertPod(mkPod("prod", "db2", "n1", "10.0.1.3", []string{"app=db"}))
	equalStrings(t, "no-op upsert", rec.take(), nil)

	// A web pod on a new node n3: the NP's applied-to group and policy gain
	// n3, so does the address group the policy uses.
	e.UpsertPod(mkPod("prod", "web3", "n3", "10.0.1.4", []string{"app=web"}))
	equalStrings(t, "web3 on n3", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AddressGroup " + id.nodeAG,
		"Updated AppliedToGroup " + id.prodATG,
		"Updated AppliedToGroup " + id.webATG,
		"Updated Policy anp-nodes",
		"Updated Policy np-web",
	}))
	s = e.Snapshot()
	equalStrings(t, "np span", policyByName(t, s, model.KindNetworkPolicy, "prod", "web").Span, []string{"n1", "n3"})
	equalStrings(t, "db ag span", s.AddressGroups[id.dbAG].Span, []string{"n1", "n3"})

	// Relabel web3 to db: leaves web's group (n3 leaves the NP span), joins db's.
	e.UpsertPod(mkPod("prod", "web3", "n3", "10.0.1.4", []string{"app=db"}))
	equalStrings(t, "web3 relabelled", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AppliedToGroup " + id.webATG,
		"Updated Policy np-web",
	}))
	s = e.Snapshot()
	equalStrings(t, "db members", agMembers(t, s, id.dbAG), []string{"prod/db", "prod/db2", "prod/web3"})
	equalStrings(t, "db ag span", s.AddressGroups[id.dbAG].Span, []string{"n1"})
	equalStrings(t, "web subjects", atgPods(t, s, id.webATG), []string{"prod/web@n1"})

	// A label no selector looks at: nothing changes.
	e.UpsertPod(mkPod("prod", "web3", "n3", "10.0.1.4", []string{"app=db", "version=2"}))
	equalStrings(t, "irrelevant label", rec.take(), nil)

	// IP change: groups holding the pod change, no span changes.
	e.UpsertPod(mkPod("prod", "web3", "n3", "10.0.1.5", []string{"app=db", "version=2"}))
	equalStrings(t, "ip change", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AppliedToGroup " + id.prodATG,
	}))

	// Pod loses its IP (its sandbox being recreated): it stays a subject
	// (isolated by port, from its first packet) and a peer member with no
	// address; spans keep its node.
	e.UpsertPod(mkPod("prod", "web3", "n3", "", []string{"app=db"}))
	equalStrings(t, "no IP", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AppliedToGroup " + id.prodATG,
	}))
	s = e.Snapshot()
	equalStrings(t, "subjects without IP", atgPods(t, s, id.prodATG), []string{"prod/db2@n1", "prod/db@n2", "prod/web3@n3", "prod/web@n1"})
	for _, m := range s.AddressGroups[id.dbAG].Members {
		if m.Pod.Name == "web3" && len(m.IPs) != 0 {
			t.Errorf("web3 still has addresses %v", m.IPs)
		}
	}
	// Its IP comes back: only the groups holding it change.
	e.UpsertPod(mkPod("prod", "web3", "n3", "10.0.1.6", []string{"app=db"}))
	equalStrings(t, "IP back", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AppliedToGroup " + id.prodATG,
	}))
	// Host-network and terminated pods never count.
	hn := mkPod("prod", "hn", "n1", "192.168.0.1", []string{"app=db"})
	hn.Spec.HostNetwork = true
	e.UpsertPod(hn)
	done := mkPod("prod", "done", "n1", "10.0.1.9", []string{"app=db"})
	done.Status.Phase = corev1.PodSucceeded
	e.UpsertPod(done)
	equalStrings(t, "ineligible pods", rec.take(), nil)

	e.DeletePod("prod", "db2")
	equalStrings(t, "db2 deleted", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AppliedToGroup " + id.prodATG,
	}))
	e.DeletePod("prod", "nope")
	equalStrings(t, "unknown pod deleted", rec.take(), nil)
}

func TestIncrementalPodMovesNode(t *testing.T) {
	e, rec, id := incWorld(t)
	e.UpsertPod(mkPod("prod", "web", "n2", "10.0.1.1", []string{"app=web"}, withPort("http", "TCP", 8080)))
	equalStrings(t, "web moved", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.dbAG,
		"Updated AddressGroup " + id.nodeAG, // n1 leaves the ANP span (only prod/db on n2 now)
		"Updated AppliedToGroup " + id.prodATG,
		"Updated AppliedToGroup " + id.webATG,
		"Updated Policy anp-nodes",
		"Updated Policy np-web",
	}))
	s := e.Snapshot()
	equalStrings(t, "np span", policyByName(t, s, model.KindNetworkPolicy, "prod", "web").Span, []string{"n2"})
	equalStrings(t, "db ag span", s.AddressGroups[id.dbAG].Span, []string{"n2"})
	equalStrings(t, "node ag span", s.AddressGroups[id.nodeAG].Span, []string{"n2"})
}

func TestIncrementalNamespaceRelabel(t *testing.T) {
	e, rec, id := incWorld(t)
	// dev becomes prod-labelled: its pods join the ANP subject.
	e.UpsertNamespace(mkNS("dev", "env=prod"))
	equalStrings(t, "dev relabelled", rec.take(), sortedIDs([]string{"Updated AppliedToGroup " + id.prodATG}))
	s := e.Snapshot()
	equalStrings(t, "anp subjects", atgPods(t, s, id.prodATG), []string{"dev/client@n1", "dev/web@n2", "prod/db@n2", "prod/web@n1"})
	// prod loses the label: prod pods leave; the NP (fixed namespace) is untouched.
	e.UpsertNamespace(mkNS("prod", "env=staging"))
	equalStrings(t, "prod relabelled", rec.take(), sortedIDs([]string{"Updated AppliedToGroup " + id.prodATG}))
	s = e.Snapshot()
	equalStrings(t, "anp subjects", atgPods(t, s, id.prodATG), []string{"dev/client@n1", "dev/web@n2"})
	e.DeleteNamespace("dev")
	equalStrings(t, "dev deleted", rec.take(), sortedIDs([]string{
		"Updated AddressGroup " + id.nodeAG,
		"Updated AppliedToGroup " + id.prodATG,
		"Updated Policy anp-nodes",
	}))
	if p := policyByName(t, e.Snapshot(), model.KindAdminNetworkPolicy, "", "nodes"); len(p.Span) != 0 {
		t.Errorf("span %v", p.Span)
	}
}

func TestIncrementalNodes(t *testing.T) {
	e, rec, id := incWorld(t)
	e.UpsertNode(mkNode("n2", []string{"zone=b"}, "192.168.0.22"))
	equalStrings(t, "address change", rec.take(), sortedIDs([]string{"Updated AddressGroup " + id.nodeAG}))
	s := e.Snapshot()
	if m := s.AddressGroups[id.nodeAG].Members; len(m) != 1 || len(m[0].IPs) != 1 || m[0].IPs[0].String() != "192.168.0.22" {
		t.Errorf("members %+v", m)
	}
	e.UpsertNode(mkNode("n1", []string{"zone=b"}, "192.168.0.1"))
	equalStrings(t, "n1 joins zone b", rec.take(), sortedIDs([]string{"Updated AddressGroup " + id.nodeAG}))
	e.UpsertNode(mkNode("n1", []string{"zone=b", "x=y"}, "192.168.0.1"))
	equalStrings(t, "irrelevant node label", rec.take(), nil)
	e.DeleteNode("n2")
	equalStrings(t, "n2 deleted", rec.take(), sortedIDs([]string{"Updated AddressGroup " + id.nodeAG}))
	equalStrings(t, "node members", agMembers(t, e.Snapshot(), id.nodeAG), []string{"node:n1"})
}

func TestIncrementalPolicyEdits(t *testing.T) {
	e, rec, id := incWorld(t)
	before, _ := e.Policy("np-web")
	// Same content, new resourceVersion: nothing.
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod, uid: np-web, resourceVersion: "9"}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}]}]
`))
	equalStrings(t, "no-op edit", rec.take(), nil)
	// Change the peer: the old address group goes, a new one comes.
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod, uid: np-web, generation: 2}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: client}}, namespaceSelector: {}}]}]
`))
	after, _ := e.Policy("np-web")
	newAG := after.Rules[0].Peer.AddressGroups[0]
	equalStrings(t, "peer edit", rec.take(), sortedIDs([]string{
		"Added AddressGroup " + newAG,
		"Deleted AddressGroup " + id.dbAG,
		"Updated Policy np-web",
	}))
	if after.Generation <= before.Generation || after.SourceGeneration != 2 {
		t.Errorf("generation %d -> %d, source %d", before.Generation, after.Generation, after.SourceGeneration)
	}
	if _, ok := e.AddressGroup(id.dbAG); ok {
		t.Errorf("old address group still served")
	}
	g, ok := e.AddressGroup(newAG)
	if !ok || len(g.Members) != 1 || g.Members[0].Pod.String() != "dev/client" {
		t.Errorf("new address group %+v", g)
	}
	// Delete: the policy and its groups go.
	e.DeleteNetworkPolicy("prod", "web")
	equalStrings(t, "delete", rec.take(), sortedIDs([]string{
		"Deleted AddressGroup " + newAG,
		"Deleted AppliedToGroup " + id.webATG,
		"Deleted Policy np-web",
	}))
	// Recreated with a new UID: a new policy ID.
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod, uid: np-web-2}
spec: {podSelector: {matchLabels: {app: web}}}
`))
	equalStrings(t, "recreate", rec.take(), sortedIDs([]string{
		"Added AppliedToGroup " + id.webATG,
		"Added Policy np-web-2",
	}))
	g2, _ := e.AppliedToGroup(id.webATG)
	if g2.Generation <= after.Generation {
		t.Errorf("re-created group's generation %d not above earlier ones (%d)", g2.Generation, after.Generation)
	}
}

func TestIdenticalPoliciesShareGroups(t *testing.T) {
	e := New()
	world(e)
	for i := 0; i < 1000; i++ {
		e.UpsertNetworkPolicy(npYAML(t, fmt.Sprintf(`
metadata: {name: p%d, namespace: prod}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}]}]
`, i)))
	}
	s := e.Snapshot()
	if len(s.Policies) != 1000 || len(s.AppliedToGroups) != 1 || len(s.AddressGroups) != 1 {
		t.Fatalf("policies %d, applied-to groups %d, address groups %d", len(s.Policies), len(s.AppliedToGroups), len(s.AddressGroups))
	}
	rec := record(e)
	e.UpsertPod(mkPod("prod", "db9", "n2", "10.0.1.9", []string{"app=db"}))
	if got := rec.take(); len(got) != 1 {
		t.Errorf("one pod in a shared group: want one change, got %d", len(got))
	}
	for i := 0; i < 999; i++ {
		e.DeleteNetworkPolicy("prod", fmt.Sprintf("p%d", i))
	}
	if s := e.Snapshot(); len(s.AppliedToGroups) != 1 || len(s.AddressGroups) != 1 {
		t.Errorf("groups must live while one policy uses them")
	}
	e.DeleteNetworkPolicy("prod", "p999")
	if s := e.Snapshot(); len(s.AppliedToGroups)+len(s.AddressGroups)+len(s.Policies) != 0 || len(e.groups) != 0 {
		t.Errorf("objects left after deleting every policy: %+v, %d groups", s, len(e.groups))
	}
}

func TestSamePriorityConditions(t *testing.T) {
	e := New()
	adminWorld(e)
	rec := record(e)
	anp := func(name string, prio int) {
		e.UpsertAdminNetworkPolicy(anpYAML(t, fmt.Sprintf(`
metadata: {name: %s}
spec: {priority: %d, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}
`, name, prio)))
	}
	anp("b", 5)
	anp("a", 5)
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: c}
spec: {tier: Admin, priority: 5, subject: {namespaces: {}}}
`))
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: d}
spec: {tier: Baseline, priority: 5, subject: {namespaces: {}}}
`))
	s := e.Snapshot()
	for _, name := range []string{"a", "b"} {
		p := policyByName(t, s, model.KindAdminNetworkPolicy, "", name)
		equalStrings(t, name+" conditions", reasons(p.Conditions), []string{"SamePriority"})
	}
	c := policyByName(t, s, model.KindClusterNetworkPolicy, "", "c")
	equalStrings(t, "c conditions", reasons(c.Conditions), []string{"SamePriority"})
	d := policyByName(t, s, model.KindClusterNetworkPolicy, "", "d")
	equalStrings(t, "d (other tier) conditions", reasons(d.Conditions), nil)
	// Order: ANPs before CNPs at equal priority, then by name; Baseline last.
	var order []string
	for _, p := range s.Policies {
		order = append(order, p.Source.String())
	}
	equalStrings(t, "order", order, []string{"AdminNetworkPolicy/a", "AdminNetworkPolicy/b", "ClusterNetworkPolicy/c", "ClusterNetworkPolicy/d"})
	rec.take()
	// Moving b and c away clears a's warning.
	anp("b", 6)
	e.DeleteClusterNetworkPolicy("c")
	s = e.Snapshot()
	equalStrings(t, "a after", reasons(policyByName(t, s, model.KindAdminNetworkPolicy, "", "a").Conditions), nil)
	equalStrings(t, "b after", reasons(policyByName(t, s, model.KindAdminNetworkPolicy, "", "b").Conditions), nil)
	got := rec.take()
	want := "Updated Policy AdminNetworkPolicy/a"
	found := false
	for _, g := range got {
		found = found || g == want
	}
	if !found {
		t.Errorf("a's condition change not reported: %v", got)
	}
}

// Concurrent writers and readers (run with -race): subscribers see every
// change exactly once per call and may read the engine.
func TestConcurrentUse(t *testing.T) {
	e := New()
	world(e)
	done := make(chan struct{})
	var seen int
	e.Subscribe(func(cs []Change) {
		seen += len(cs) // deliveries are serialized: no lock needed
		for _, c := range cs {
			if c.Kind == KindPolicy {
				e.Policy(c.ID)
			}
		}
	})
	for w := 0; w < 4; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 200; i++ {
				e.UpsertPod(mkPod("prod", fmt.Sprintf("w%d", w), "n1", fmt.Sprintf("10.9.%d.%d", w, i%200+1), []string{fmt.Sprintf("app=%v", []string{"web", "db"}[i%2])}))
				e.UpsertNetworkPolicy(npYAML(t, fmt.Sprintf(`{metadata: {name: w%d, namespace: prod}, spec: {podSelector: {matchLabels: {app: web}}, ingress: [{ports: [{port: %d}]}]}}`, w, 1+i%3)))
				_ = e.Snapshot()
			}
		}(w)
	}
	for w := 0; w < 4; w++ {
		<-done
	}
	if seen == 0 {
		t.Fatal("no changes seen")
	}
}

// A snapshot is a consistent view: later changes replace objects, they do
// not edit the ones a snapshot holds.
func TestSnapshotIsStable(t *testing.T) {
	e, _, id := incWorld(t)
	before := e.Snapshot()
	members := agMembers(t, before, id.dbAG)
	gen := before.AddressGroups[id.dbAG].Generation
	e.UpsertPod(mkPod("prod", "db2", "n1", "10.0.1.3", []string{"app=db"}))
	e.DeletePod("prod", "db")
	e.DeleteNetworkPolicy("prod", "web")
	equalStrings(t, "old snapshot members", agMembers(t, before, id.dbAG), members)
	if before.AddressGroups[id.dbAG].Generation != gen || len(before.Policies) != 2 {
		t.Errorf("old snapshot changed")
	}
	if after := e.Snapshot(); len(after.Policies) != 1 || after.AddressGroups[id.dbAG] != nil {
		t.Errorf("new snapshot: %d policies", len(after.Policies))
	}
}

// TestSpanOnlyChangeKeepsGeneration: a pod landing on a new node widens the
// span of the policies applied to its group (and of the address groups
// they use). Those objects are reported, so distribution sends them to the
// new node, but keep their generation: nothing an agent already holding
// them installs has changed. The applied-to group's members did change, so
// its generation moves.
func TestSpanOnlyChangeKeepsGeneration(t *testing.T) {
	e, rec, id := incWorld(t)
	before := e.Snapshot()
	var got []Change
	e.Subscribe(func(cs []Change) { got = append(got, cs...) })
	e.UpsertPod(mkPod("prod", "web3", "n3", "10.0.1.4", []string{"app=web"}))
	rec.take()
	after := e.Snapshot()
	npBefore := policyByName(t, before, model.KindNetworkPolicy, "prod", "web")
	npAfter := policyByName(t, after, model.KindNetworkPolicy, "prod", "web")
	if npAfter.Generation != npBefore.Generation {
		t.Errorf("policy generation %d -> %d on a span-only change", npBefore.Generation, npAfter.Generation)
	}
	equalStrings(t, "np span", npAfter.Span, []string{"n1", "n3"})
	if g0, g1 := before.AddressGroups[id.dbAG].Generation, after.AddressGroups[id.dbAG].Generation; g0 != g1 {
		t.Errorf("address group generation %d -> %d when only its span changed", g0, g1)
	}
	if g0, g1 := before.AppliedToGroups[id.webATG].Generation, after.AppliedToGroups[id.webATG].Generation; g1 <= g0 {
		t.Errorf("applied-to group generation %d -> %d though its members changed", g0, g1)
	}
	for _, c := range got {
		if c.Kind == KindPolicy && c.ID == "np-web" && (c.Type != Updated || c.Generation != npBefore.Generation) {
			t.Errorf("policy change %+v, want Updated at generation %d", c, npBefore.Generation)
		}
	}

	// A content change in the same call as a span change still takes a
	// new generation.
	got = nil
	e.Batch(func(b *Batch) {
		b.UpsertPod(mkPod("prod", "web4", "n4", "10.0.1.6", []string{"app=web"}))
		b.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod, uid: np-web, generation: 2}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}], ports: [{port: 80}]}]
`))
	})
	p, _ := e.Policy("np-web")
	if p.Generation <= npBefore.Generation || !slices.Contains(p.Span, "n4") {
		t.Errorf("after span and rule change: generation %d (was %d), span %v", p.Generation, npBefore.Generation, p.Span)
	}
	n := 0
	for _, c := range got {
		if c.Kind == KindPolicy && c.ID == "np-web" {
			n++
			if c.Generation != p.Generation {
				t.Errorf("reported generation %d, policy has %d", c.Generation, p.Generation)
			}
		}
	}
	if n != 1 {
		t.Errorf("policy reported %d times in one batch, want once", n)
	}
}

// TestBatchEqualsSingleCalls: a Batch computes what the same calls made
// one by one compute, and reports each object at most once.
func TestBatchEqualsSingleCalls(t *testing.T) {
	one, batched := New(), New()
	world(one)
	world(batched)
	pods := []*corev1.Pod{
		mkPod("prod", "a", "n1", "10.0.2.1", []string{"app=web"}),
		mkPod("prod", "b", "n2", "10.0.2.2", []string{"app=web"}),
		mkPod("prod", "c", "n3", "10.0.2.3", []string{"app=db"}),
		mkPod("prod", "a", "n3", "10.0.2.1", []string{"app=db"}), // moves and relabels
	}
	np := npYAML(t, `
metadata: {name: web, namespace: prod, uid: np-web}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}]}]
`)
	one.UpsertNetworkPolicy(np)
	for _, p := range pods {
		one.UpsertPod(p)
	}
	one.DeletePod("prod", "b")
	var changes []Change
	batched.Subscribe(func(cs []Change) { changes = append(changes, cs...) })
	batched.Batch(func(b *Batch) {
		b.UpsertNetworkPolicy(np)
		for _, p := range pods {
			b.UpsertPod(p)
		}
		b.DeletePod("prod", "b")
	})
	if a, b := normalize(one.Snapshot()), normalize(batched.Snapshot()); !reflect.DeepEqual(a, b) {
		t.Fatalf("batched computation differs:\n%+v\n%+v", a, b)
	}
	seen := map[string]bool{}
	for _, c := range changes {
		k := string(c.Kind) + "/" + c.ID
		if seen[k] {
			t.Errorf("%s reported twice in one batch", k)
		}
		seen[k] = true
	}
	if !seen["Policy/np-web"] {
		t.Errorf("the policy added in the batch was not reported: %v", changes)
	}
}

// TestParallelSnapshotMatchesReads: a snapshot of a large engine (its
// model objects built on every core) equals the same objects read one by
// one from an engine fed the same way (built one at a time). Under -race
// (make test-compute) this also checks the parallel build.
func TestParallelSnapshotMatchesReads(t *testing.T) {
	for _, c := range []*shapes.Cluster{shapes.PolicyPerPod(true), shapes.SmallNamespaces(true)} {
		par, seq := New(), New()
		c.FeedTo(par)
		c.FeedTo(seq)
		snap := par.Snapshot()
		if len(snap.AppliedToGroups) < 2*parallelMin && len(snap.Policies) < 2*parallelMin {
			t.Fatalf("only %d groups and %d policies: the parallel build does not run", len(snap.AppliedToGroups), len(snap.Policies))
		}
		for _, p := range snap.Policies {
			got, ok := seq.Policy(p.ID)
			if !ok || !reflect.DeepEqual(got, p) {
				t.Fatalf("policy %s: snapshot %+v, read %+v", p.ID, p, got)
			}
		}
		for id, g := range snap.AppliedToGroups {
			if got, ok := seq.AppliedToGroup(id); !ok || !reflect.DeepEqual(got, g) {
				t.Fatalf("applied-to group %s differs", id)
			}
		}
		for id, g := range snap.AddressGroups {
			if got, ok := seq.AddressGroup(id); !ok || !reflect.DeepEqual(got, g) {
				t.Fatalf("address group %s differs", id)
			}
		}
	}
}

// TestBatchedPodRunsComputeAlike: pods fed as the controller feeds them
// (prepared, in batches of 1,000 events with the policies first, so each
// batch's pods are one run that applyPods matches on every core) compute
// the same model as every object upserted one call at a time (a pod that
// comes twice in one run, relabeled, takes the usual path the second
// time). Under -race (make test-compute) this also checks that finding the
// groups only reads the engine. FuzzIncremental runs the same path on
// short runs.
func TestBatchedPodRunsComputeAlike(t *testing.T) {
	for _, c := range []*shapes.Cluster{shapes.SmallNamespaces(true), shapes.LargeNamespaces(true), shapes.OneNamespace(true)} {
		seq, batched := New(), New()
		c.FeedTo(seq)
		seq.UpsertPod(c.PodRelabel)

		pods := append(slices.Clone(c.Pods), c.PodRelabel)
		if min(len(pods), eventBatch) < podRunMin {
			t.Fatalf("%d pods: no run of %d in a batch", len(pods), podRunMin)
		}
		feedInBatches(batched, c, preparePods(pods))
		a, b := normalize(seq.Snapshot()), normalize(batched.Snapshot())
		if len(a.Policies) != len(c.NPs) {
			t.Fatalf("%d policies computed, want %d", len(a.Policies), len(c.NPs))
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("pods applied in batched runs compute another model than one by one (%d policies, %d applied-to groups)", len(a.Policies), len(a.AppliedToGroups))
		}
	}
}
