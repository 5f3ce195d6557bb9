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
	web := s.AppliedToGroups[p.AppliedToGroups[0]].MembersByNode.Get("n1")[0]
	if len(web.Ports) != 1 || web.Ports[0] != (model.NamedPort{Name: "http", Protocol: "TCP", Port: 8080}) {
		t.Errorf("named ports of prod/web: %+v", web.Ports)
	}
	if len(p.Conditions) != 0 {
		t.Errorf("unexpected conditions %+v", p.Conditions)
	}
}

func TestNetworkPolicyFields(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		check func(t *testing.T, s *model.Snapshot, p *model.Policy)
	}{
		{
			name: "no policyTypes and no rules isolates ingress only",
			yaml: `spec: {podSelector: {}}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "isolates", dirs(p.Isolates), []string{"In"})
				equalStrings(t, "subjects", atgPods(t, s, p.AppliedToGroups[0]), []string{"prod/db@n2", "prod/web@n1"})
				if len(p.Rules) != 0 {
					t.Errorf("rules %+v", p.Rules)
				}
				equalStrings(t, "span", p.Span, []string{"n1", "n2"})
			},
		},
		{
			name: "egress rules default policyTypes to both",
			yaml: `spec: {podSelector: {}, egress: [{}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "isolates", dirs(p.Isolates), []string{"In", "Out"})
				// An egress rule with no "to" and no ports allows everything.
				equalStrings(t, "to", blocks(p.Rules[0].Peer.IPBlocks), []string{"0.0.0.0/0", "::/0"})
				if p.Rules[0].Direction != model.DirectionOut || len(p.Rules[0].Ports) != 0 {
					t.Errorf("rule %+v", p.Rules[0])
				}
			},
		},
		{
			name: "explicit Egress only: deny all egress, ingress rules ignored",
			yaml: `spec: {podSelector: {}, policyTypes: [Egress], ingress: [{}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "isolates", dirs(p.Isolates), []string{"Out"})
				if len(p.Rules) != 0 {
					t.Errorf("rules %+v", p.Rules)
				}
				equalStrings(t, "conditions", reasons(p.Conditions), []string{"RulesIgnored"})
			},
		},
		{
			name: "unknown policy type isolates both directions",
			yaml: `spec: {podSelector: {}, policyTypes: [Ingres]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "isolates", dirs(p.Isolates), []string{"In", "Out"})
				equalStrings(t, "conditions", reasons(p.Conditions), []string{"InvalidPolicyType"})
			},
		},
		{
			name: "empty from with ports: every source on those ports",
			yaml: `spec: {podSelector: {matchLabels: {app: db}}, ingress: [{ports: [{port: sql}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "from", blocks(p.Rules[0].Peer.IPBlocks), []string{"0.0.0.0/0", "::/0"})
				if len(p.Rules[0].Ports) != 1 || p.Rules[0].Ports[0] != (model.Port{Protocol: "TCP", Name: "sql"}) {
					t.Errorf("ports %+v", p.Rules[0].Ports)
				}
			},
		},
		{
			name: "empty podSelector peer selects the policy's namespace only",
			yaml: `spec: {podSelector: {}, ingress: [{from: [{podSelector: {}}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "from", peerMembers(t, s, p.Rules[0]), []string{"prod/db", "prod/web"})
			},
		},
		{
			name: "empty namespaceSelector selects all namespaces",
			yaml: `spec: {podSelector: {}, egress: [{to: [{namespaceSelector: {}}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "to", peerMembers(t, s, p.Rules[0]), []string{"dev/client", "dev/web", "prod/db", "prod/web"})
			},
		},
		{
			name: "namespace by name via kubernetes.io/metadata.name",
			yaml: `spec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: dev}}, podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [web]}]}}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "from", peerMembers(t, s, p.Rules[0]), []string{"dev/client"})
			},
		},
		{
			name: "peer with nothing set matches nothing",
			yaml: `spec: {podSelector: {}, ingress: [{from: [{}, {podSelector: {}}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				r := p.Rules[0]
				if len(r.Peer.AddressGroups)+len(r.Peer.IPBlocks)+len(r.Ports) != 0 || r.Action != model.ActionAllow {
					t.Errorf("rule not fail-closed: %+v", r)
				}
				equalStrings(t, "conditions", reasons(p.Conditions), []string{"InvalidPeer"})
				equalStrings(t, "isolates", dirs(p.Isolates), []string{"In"})
			},
		},
		{
			name:  "ipBlock with a selector is invalid",
			yaml:  `spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}]}`,
			check: failClosedAllow("InvalidPeer"),
		},
		{
			name:  "bad CIDR",
			yaml:  `spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]}`,
			check: failClosedAllow("InvalidCIDR"),
		},
		{
			name:  "except outside cidr",
			yaml:  `spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24]}}]}]}`,
			check: failClosedAllow("InvalidCIDR"),
		},
		{
			name: "ipv6 ipBlock, host bits masked",
			yaml: `spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: "2001:db8::1/64", except: ["2001:db8::/80"]}}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "to", blocks(p.Rules[0].Peer.IPBlocks), []string{"2001:db8::/64 -2001:db8::/80"})
			},
		},
		{
			name:  "endPort below port",
			yaml:  `spec: {podSelector: {}, ingress: [{ports: [{port: 90, endPort: 80}]}]}`,
			check: failClosedAllow("InvalidPort"),
		},
		{
			name:  "endPort with named port",
			yaml:  `spec: {podSelector: {}, ingress: [{ports: [{port: http, endPort: 80}]}]}`,
			check: failClosedAllow("InvalidPort"),
		},
		{
			name: "endPort equal to port is one port",
			yaml: `spec: {podSelector: {}, ingress: [{ports: [{port: 80, endPort: 80}]}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				if p.Rules[0].Ports[0] != (model.Port{Protocol: "TCP", Port: 80}) {
					t.Errorf("ports %+v", p.Rules[0].Ports)
				}
			},
		},
		{
			name:  "unknown protocol",
			yaml:  `spec: {podSelector: {}, ingress: [{ports: [{protocol: ICMP}]}]}`,
			check: failClosedAllow("UnknownProtocol"),
		},
		{
			name:  "port out of range",
			yaml:  `spec: {podSelector: {}, ingress: [{ports: [{port: 70000}]}]}`,
			check: failClosedAllow("InvalidPort"),
		},
		{
			name:  "bad peer selector operator",
			yaml:  `spec: {podSelector: {}, ingress: [{from: [{podSelector: {matchExpressions: [{key: a, operator: Near}]}}]}]}`,
			check: failClosedAllow("InvalidSelector"),
		},
		{
			name: "bad subject selector: whole namespace isolated, rules match nothing",
			yaml: `spec: {podSelector: {matchExpressions: [{key: app, operator: In}]}, ingress: [{}]}`,
			check: func(t *testing.T, s *model.Snapshot, p *model.Policy) {
				equalStrings(t, "subjects", atgPods(t, s, p.AppliedToGroups[0]), []string{"prod/db@n2", "prod/web@n1"})
				failClosedAllow("InvalidSubject")(t, s, p)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New()
			world(e)
			np := npYAML(t, tc.yaml)
			np.Namespace, np.Name = "prod", "p"
			e.UpsertNetworkPolicy(np)
			s := e.Snapshot()
			tc.check(t, s, policyByName(t, s, model.KindNetworkPolicy, "prod", "p"))
		})
	}
}

func dirs(ds []model.Direction) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d))
	}
	return out
}

// failClosedAllow checks that the policy's only rule is an Allow rule
// matching nothing and that the policy carries exactly the given conditions.
func failClosedAllow(reasonsWant ...string) func(t *testing.T, s *model.Snapshot, p *model.Policy) {
	return func(t *testing.T, s *model.Snapshot, p *model.Policy) {
		t.Helper()
		if len(p.Rules) != 1 {
			t.Fatalf("rules %+v", p.Rules)
		}
		r := p.Rules[0]
		if r.Action != model.ActionAllow || len(r.Peer.AddressGroups)+len(r.Peer.IPBlocks)+len(r.Ports) != 0 {
			t.Errorf("rule is not fail-closed Allow: %+v", r)
		}
		equalStrings(t, "conditions", reasons(p.Conditions), reasonsWant)
		for _, c := range p.Conditions {
			if c.Severity != model.SeverityError || c.Message == "" {
				t.Errorf("condition %+v", c)
			}
		}
	}
}
