package compute

import (
	"slices"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// An NP egress rule with a named port and no `to` (or ipBlocks) keeps its
// ipBlock peer and gets a NamedPortGroups entry: every pod declaring a
// container port of that name, spanning the policy's nodes.
func TestNamedPortGroupOnIPBlockEgress(t *testing.T) {
	e := New()
	world(e)
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: out, namespace: dev, uid: u-out}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress:
  - ports: [{port: http}]
  - to: [{ipBlock: {cidr: 10.0.1.0/24}}]
    ports: [{port: http}, {port: sql}, {port: 9000}]
  - to: [{podSelector: {}}]
    ports: [{port: http}]
`))
	s := e.Snapshot()
	p := policyByName(t, s, model.KindNetworkPolicy, "dev", "out")
	if len(p.Rules) != 3 {
		t.Fatalf("rules %+v", p.Rules)
	}
	r0, r1, r2 := p.Rules[0], p.Rules[1], p.Rules[2]
	// The peer does not widen.
	equalStrings(t, "rule 0 blocks", blocks(r0.Peer.IPBlocks), []string{"0.0.0.0/0", "::/0"})
	if len(r0.Peer.AddressGroups) != 0 || len(r1.Peer.AddressGroups) != 0 {
		t.Errorf("named-port groups leaked into peers: %v %v", r0.Peer.AddressGroups, r1.Peer.AddressGroups)
	}
	if len(r0.NamedPortGroups) != 1 {
		t.Fatalf("rule 0 named-port groups %v", r0.NamedPortGroups)
	}
	http := r0.NamedPortGroups[0]
	equalStrings(t, "http group", agMembers(t, s, http), []string{"dev/web", "prod/web"})
	equalStrings(t, "http group span", s.AddressGroups[http].Span, []string{"n1"})
	if len(r1.NamedPortGroups) != 2 || r1.NamedPortGroups[0] != http {
		t.Fatalf("rule 1 named-port groups %v", r1.NamedPortGroups)
	}
	equalStrings(t, "sql group", agMembers(t, s, r1.NamedPortGroups[1]), []string{"prod/db"})
	// Pod peers resolve on their own members: no extra group.
	if len(r2.NamedPortGroups) != 0 {
		t.Errorf("rule 2 (pod peers) got named-port groups %v", r2.NamedPortGroups)
	}

	// Incremental: a pod gaining, changing and losing the name.
	rec := record(e)
	e.UpsertPod(mkPod("dev", "client", "n1", "10.0.2.2", []string{"app=client"}, withPort("http", "TCP", 80)))
	s = e.Snapshot()
	equalStrings(t, "after add", agMembers(t, s, http), []string{"dev/client", "dev/web", "prod/web"})
	if ch := rec.take(); !slices.Contains(ch, "Updated AddressGroup "+http) {
		t.Errorf("changes after add %v lack the named-port group", ch)
	}
	e.UpsertPod(mkPod("prod", "web", "n1", "10.0.1.1", []string{"app=web"}, withPort("web", "TCP", 8080)))
	s = e.Snapshot()
	equalStrings(t, "after rename", agMembers(t, s, http), []string{"dev/client", "dev/web"})
	e.DeletePod("dev", "web")
	s = e.Snapshot()
	equalStrings(t, "after delete", agMembers(t, s, http), []string{"dev/client"})
	for _, m := range s.AddressGroups[http].Members {
		if len(m.Ports) != 1 || m.Ports[0] != (model.NamedPort{Name: "http", Protocol: "TCP", Port: 80}) {
			t.Errorf("member %s ports %+v", m.Pod, m.Ports)
		}
	}

	// The span follows the policy's applied-to pods.
	e.UpsertPod(mkPod("dev", "client2", "n2", "10.0.2.3", []string{"app=client"}))
	s = e.Snapshot()
	equalStrings(t, "span with a subject on n2", s.AddressGroups[http].Span, []string{"n1", "n2"})

	// Removing the policy removes the groups.
	e.DeleteNetworkPolicy("dev", "out")
	s = e.Snapshot()
	if s.AddressGroups[http] != nil {
		t.Errorf("named-port group %s outlived its policy", http)
	}
	if len(e.namedPortGroups) != 0 {
		t.Errorf("named-port index not emptied: %v", e.namedPortGroups)
	}
}

// AdminNetworkPolicy namedPort cannot be used with networks peers (API):
// no named-port group, and the existing warning stays.
func TestNamedPortGroupNotForAdminNetworks(t *testing.T) {
	e := New()
	world(e)
	e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: a, uid: a1}
spec:
  priority: 5
  subject: {namespaces: {}}
  egress:
  - action: Allow
    to: [{networks: [10.0.0.0/8]}]
    ports: [{namedPort: http}]
`))
	s := e.Snapshot()
	p := policyByName(t, s, model.KindAdminNetworkPolicy, "", "a")
	if len(p.Rules) != 1 || len(p.Rules[0].NamedPortGroups) != 0 {
		t.Errorf("rules %+v", p.Rules)
	}
	equalStrings(t, "conditions", reasons(p.Conditions), []string{ReasonNamedPortNoPods})
}
