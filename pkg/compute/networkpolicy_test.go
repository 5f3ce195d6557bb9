package compute

import (
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// world is a small cluster used by the table tests: two namespaces with
// two pods each, on two nodes.
func world(e *Engine) {
	e.UpsertNamespace(mkNS("prod", "env=prod"))
	e.UpsertNamespace(mkNS("dev", "env=dev"))
	e.UpsertNode(mkNode("n1", []string{"zone=a"}, "192.168.0.1"))
	e.UpsertNode(mkNode("n2", []string{"zone=b"}, "192.168.0.2", "203.0.113.2"))
	e.UpsertPod(mkPod("prod", "web", "n1", "10.0.1.1", []string{"app=web"}, withPort("http", "TCP", 8080)))
	e.UpsertPod(mkPod("prod", "db", "n2", "10.0.1.2", []string{"app=db"}, withPort("sql", "TCP", 5432), withPort("dns", "UDP", 53)))
	e.UpsertPod(mkPod("dev", "web", "n2", "10.0.2.1", []string{"app=web"}, withPort("http", "TCP", 8081)))
	e.UpsertPod(mkPod("dev", "client", "n1", "10.0.2.2", []string{"app=client"}))
}

func TestNetworkPolicyBasics(t *testing.T) {
	e := New()
	world(e)
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: allow-web, namespace: prod, uid: u1, generation: 3}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - podSelector: {matchLabels: {app: db}}
    - namespaceSelector: {matchLabels: {env: dev}}
    - namespaceSelector: {matchLabels: {env: dev}}
      podSelector: {matchLabels: {app: client}}
    - ipBlock: {cidr: 172.16.0.0/16, except: [172.16.1.0/24]}
    ports:
    - port: 8080
    - protocol: UDP
      port: 53
      endPort: 60
    - port: http
    - protocol: SCTP
`))
	s := e.Snapshot()
	p := policyByName(t, s, model.KindNetworkPolicy, "prod", "allow-web")
	if p.ID != "u1" || p.SourceGeneration != 3 || p.Tier != model.TierNetworkPolicy {
		t.Errorf("policy header: %+v", p)
	}
	equalStrings(t, "isolates", []string{string(p.Isolates[0])}, []string{"In"})
	if len(p.Isolates) != 1 {
		t.Errorf("isolates %v, want only In", p.Isolates)
	}
	equalStrings(t, "applied-to", atgPods(t, s, p.AppliedToGroups[0]), []string{"prod/web@n1"})
	equalStrings(t, "span", p.Span, []string{"n1"})
	if len(p.Rules) != 1 {
		t.Fatalf("rules: %+v", p.Rules)
	}
	r := p.Rules[0]
	if r.Action != model.ActionAllow || r.Direction != model.DirectionIn || r.Index != 0 {
		t.Errorf("rule header %+v", r)
	}
	if len(r.Peer.AddressGroups) != 3 {
		t.Errorf("want 3 address groups, got %v", r.Peer.AddressGroups)
	}
	equalStrings(t, "peer[0]", agMembers(t, s, r.Peer.AddressGroups[0]), []string{"prod/db"})
	equalStrings(t, "peer[1]", agMembers(t, s, r.Peer.AddressGroups[1]), []string{"dev/client", "dev/web"})
	equalStrings(t, "peer[2]", agMembers(t, s, r.Peer.AddressGroups[2]), []string{"dev/client"})
	equalStrings(t, "ipblocks", blocks(r.Peer.IPBlocks), []string{"172.16.0.0/16 -172.16.1.0/24"})
	want := []model.Port{
		{Protocol: "TCP", Port: 8080},
		{Protocol: "UDP", Port: 53, EndPort: 60},
		{Protocol: "TCP", Name: "http"},
		{Protocol: "SCTP"},
	}
	if len(r.Ports) != len(want) {
		t.Fatalf("ports %+v", r.Ports)
	}
	for i := range want {
		if r.Ports[i] != want[i] {
			t.Errorf("port %d: got %+v want %+v", i, r.Ports[i], want[i])
		}
	}
	// Address groups span the nodes of the policies that use them.
	for _, id := range r.Peer.AddressGroups {
		equalStrings(t, "address group span", s.AddressGroups[id].Span, []string{"n1"})
	}
	// Named ports travel with members.
	web := s.AppliedToGroups[p.AppliedToGroups[0]].MembersByNode["n1"][0]
	if len(web.Ports) != 1 || web.Ports[0] != (model.NamedPort{Name: "http", Protocol: "TCP", Port: 8080}) {
		t.Errorf("named ports of prod/web: %+v", web.Ports)
	}
	if len(p.Conditions) != 0 {
		t.Errorf("unexpected conditions %+v", p.Conditions)
	}
}
