package compute

import (
	"testing"

	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/model"
)

func anpYAML(t testing.TB, doc string) *v1alpha1.AdminNetworkPolicy {
	o := &v1alpha1.AdminNetworkPolicy{}
	mustYAML(t, doc, o)
	return o
}

func banpYAML(t testing.TB, doc string) *v1alpha1.BaselineAdminNetworkPolicy {
	o := &v1alpha1.BaselineAdminNetworkPolicy{}
	mustYAML(t, doc, o)
	return o
}

func cnpYAML(t testing.TB, doc string) *v1alpha2.ClusterNetworkPolicy {
	o := &v1alpha2.ClusterNetworkPolicy{}
	mustYAML(t, doc, o)
	return o
}

// adminWorld extends world with the namespaces of the KEP-2091 stories.
func adminWorld(e *Engine) {
	world(e)
	e.UpsertNamespace(mkNS("monitoring", "kubernetes.io/metadata.name=monitoring"))
	e.UpsertNamespace(mkNS("sensitive", "security=internal"))
	e.UpsertNamespace(mkNS("tenant-a1", "tenant=a"))
	e.UpsertNamespace(mkNS("tenant-b1", "tenant=b"))
	e.UpsertPod(mkPod("monitoring", "prom", "n1", "10.0.3.1", []string{"app=prometheus"}, withPort("metrics", "TCP", 9090)))
	e.UpsertPod(mkPod("sensitive", "vault", "n2", "10.0.4.1", []string{"app=vault"}))
	e.UpsertPod(mkPod("tenant-a1", "a", "n1", "10.0.5.1", nil))
	e.UpsertPod(mkPod("tenant-b1", "b", "n2", "10.0.6.1", nil))
}

// The user stories of KEP-2091 (AdminNetworkPolicy) and the examples of the
// API comments, as policies, with what tierflow must compute for each.
func TestKEP2091Stories(t *testing.T) {
	t.Run("story 1: deny traffic at a cluster level", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: cluster-wide-deny-example}
spec:
  priority: 10
  subject:
    namespaces: {matchLabels: {security: internal}}
  ingress:
  - action: Deny
    from:
    - namespaces: {}
`))
		s := e.Snapshot()
		p := policyByName(t, s, model.KindAdminNetworkPolicy, "", "cluster-wide-deny-example")
		if p.Tier != model.TierAdmin || p.Priority != 10 || p.ID != "AdminNetworkPolicy/cluster-wide-deny-example" {
			t.Errorf("header %+v", p)
		}
		equalStrings(t, "subject", atgPods(t, s, p.AppliedToGroups[0]), []string{"sensitive/vault@n2"})
		r := p.Rules[0]
		if r.Action != model.ActionDeny || r.Direction != model.DirectionIn {
			t.Errorf("rule %+v", r)
		}
		equalStrings(t, "from", peerMembers(t, s, r), []string{"dev/client", "dev/web", "monitoring/prom", "prod/db", "prod/web", "sensitive/vault", "tenant-a1/a", "tenant-b1/b"})
		if len(p.Isolates) != 0 {
			t.Errorf("admin policies do not isolate: %v", p.Isolates)
		}
	})
	t.Run("story 2: allow traffic at a cluster level (monitoring)", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: cluster-wide-allow-example}
spec:
  priority: 30
  subject:
    namespaces: {}
  ingress:
  - name: allow-monitoring
    action: Allow
    from:
    - namespaces:
        matchLabels: {kubernetes.io/metadata.name: monitoring}
`))
		s := e.Snapshot()
		p := policyByName(t, s, model.KindAdminNetworkPolicy, "", "cluster-wide-allow-example")
		if len(atgPods(t, s, p.AppliedToGroups[0])) != 8 {
			t.Errorf("subject should be every pod: %v", atgPods(t, s, p.AppliedToGroups[0]))
		}
		equalStrings(t, "span", p.Span, []string{"n1", "n2"})
		r := p.Rules[0]
		if r.Action != model.ActionAllow || r.Name != "allow-monitoring" {
			t.Errorf("rule %+v", r)
		}
		equalStrings(t, "from", peerMembers(t, s, r), []string{"monitoring/prom"})
	})
	t.Run("story 3: delegate to namespace owners (Pass)", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: pass-example}
spec:
  priority: 20
  subject:
    namespaces: {}
  ingress:
  - action: Pass
    from:
    - namespaces:
        matchLabels: {kubernetes.io/metadata.name: monitoring}
`))
		p := policyByName(t, e.Snapshot(), model.KindAdminNetworkPolicy, "", "pass-example")
		if p.Rules[0].Action != model.ActionPass {
			t.Errorf("rule %+v", p.Rules[0])
		}
	})
	t.Run("story 4: isolate tenants (pass within, deny across)", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: tenant-creation-example}
spec:
  priority: 50
  subject:
    namespaces:
      matchExpressions: [{key: tenant, operator: Exists}]
  ingress:
  - action: Pass
    from:
    - namespaces: {matchLabels: {tenant: a}}
  - action: Deny
    from:
    - namespaces: {matchExpressions: [{key: tenant, operator: Exists}]}
`))
		s := e.Snapshot()
		p := policyByName(t, s, model.KindAdminNetworkPolicy, "", "tenant-creation-example")
		equalStrings(t, "subject", atgPods(t, s, p.AppliedToGroups[0]), []string{"tenant-a1/a@n1", "tenant-b1/b@n2"})
		if p.Rules[0].Action != model.ActionPass || p.Rules[1].Action != model.ActionDeny || p.Rules[1].Index != 1 {
			t.Errorf("rule order %+v", p.Rules)
		}
		equalStrings(t, "pass from", peerMembers(t, s, p.Rules[0]), []string{"tenant-a1/a"})
		equalStrings(t, "deny from", peerMembers(t, s, p.Rules[1]), []string{"tenant-a1/a", "tenant-b1/b"})
	})
	t.Run("story 5: cluster-wide default guardrails (BANP)", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertBaselineAdminNetworkPolicy(banpYAML(t, `
metadata: {name: default}
spec:
  subject:
    namespaces: {}
  ingress:
  - action: Deny
    from:
    - namespaces: {}
  egress:
  - action: Allow
    to:
    - networks: ["10.0.0.0/8", "fd00::/8"]
    ports:
    - portNumber: {port: 53, protocol: UDP}
`))
		s := e.Snapshot()
		p := policyByName(t, s, model.KindBaselineAdminNetworkPolicy, "", "default")
		if p.Tier != model.TierBaseline || p.Priority != 0 || len(p.Rules) != 2 {
			t.Errorf("header %+v", p)
		}
		eg := p.Rules[1]
		if eg.Direction != model.DirectionOut || eg.Action != model.ActionAllow || eg.Index != 0 {
			t.Errorf("egress rule %+v", eg)
		}
		equalStrings(t, "networks", blocks(eg.Peer.IPBlocks), []string{"10.0.0.0/8", "fd00::/8"})
		if eg.Ports[0] != (model.Port{Protocol: "UDP", Port: 53}) {
			t.Errorf("ports %+v", eg.Ports)
		}
	})
	t.Run("egress to nodes and networks", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: egress-nodes}
spec:
  priority: 5
  subject:
    pods:
      namespaceSelector: {matchLabels: {env: prod}}
      podSelector: {matchLabels: {app: web}}
  egress:
  - name: deny-kube-api
    action: Deny
    to:
    - nodes:
        matchExpressions: [{key: zone, operator: In, values: [b]}]
    ports:
    - portRange: {start: 6443, end: 6444}
  - name: allow-all-nodes
    action: Allow
    to:
    - nodes: {}
  - name: allow-internet
    action: Allow
    to:
    - networks: ["0.0.0.0/0"]
`))
		s := e.Snapshot()
		p := policyByName(t, s, model.KindAdminNetworkPolicy, "", "egress-nodes")
		equalStrings(t, "subject", atgPods(t, s, p.AppliedToGroups[0]), []string{"prod/web@n1"})
		ag := s.AddressGroups[p.Rules[0].Peer.AddressGroups[0]]
		if len(ag.Members) != 1 || ag.Members[0].Node != "n2" || ag.Members[0].Pod != nil {
			t.Fatalf("node group %+v", ag.Members)
		}
		if got := ag.Members[0].IPs; len(got) != 2 || got[0].String() != "192.168.0.2" || got[1].String() != "203.0.113.2" {
			t.Errorf("node IPs %v", got)
		}
		equalStrings(t, "node group span", ag.Span, []string{"n1"})
		if p.Rules[0].Ports[0] != (model.Port{Protocol: "TCP", Port: 6443, EndPort: 6444}) || p.Rules[0].Name != "deny-kube-api" {
			t.Errorf("rule 0 %+v", p.Rules[0])
		}
		equalStrings(t, "all nodes", peerMembers(t, s, p.Rules[1]), []string{"node:n1", "node:n2"})
		equalStrings(t, "internet", blocks(p.Rules[2].Peer.IPBlocks), []string{"0.0.0.0/0"})
	})
	t.Run("named ports have no protocol", func(t *testing.T) {
		e := New()
		adminWorld(e)
		e.UpsertAdminNetworkPolicy(anpYAML(t, `
metadata: {name: named}
spec:
  priority: 1000
  subject: {namespaces: {}}
  egress:
  - action: Allow
    to: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: prometheus}}}}]
    ports: [{namedPort: metrics}]
`))
		s := e.Snapshot()
		p := policyByName(t, s, model.KindAdminNetworkPolicy, "", "named")
		if p.Rules[0].Ports[0] != (model.Port{Name: "metrics"}) || p.Priority != 1000 {
			t.Errorf("rule %+v", p.Rules[0])
		}
		m := s.AddressGroups[p.Rules[0].Peer.AddressGroups[0]].Members
		if len(m) != 1 || len(m[0].Ports) != 1 || m[0].Ports[0] != (model.NamedPort{Name: "metrics", Protocol: "TCP", Port: 9090}) {
			t.Errorf("peer named ports %+v", m)
		}
	})
}

func TestBaselineOnlyDefault(t *testing.T) {
	e := New()
	adminWorld(e)
	rec := record(e)
	e.UpsertBaselineAdminNetworkPolicy(banpYAML(t, `
metadata: {name: other}
spec:
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
`))
	if s := e.Snapshot(); len(s.Policies) != 0 || len(s.AppliedToGroups) != 0 {
		t.Errorf("non-default BANP produced objects: %+v", s.Policies)
	}
	equalStrings(t, "changes", rec.take(), nil)
	conds := e.PolicyConditions(model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: "other"})
	equalStrings(t, "conditions", reasons(conds), []string{"NotDefaultBaseline"})
	e.DeleteBaselineAdminNetworkPolicy("other")
	if c := e.PolicyConditions(model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: "other"}); c != nil {
		t.Errorf("conditions after delete: %+v", c)
	}
}

func TestClusterNetworkPolicy(t *testing.T) {
	e := New()
	adminWorld(e)
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: admin-cnp, uid: c1}
spec:
  tier: Admin
  priority: 7
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: db}}}}
  ingress:
  - name: accept-web
    action: Accept
    from: [{pods: {namespaceSelector: {matchLabels: {env: prod}}, podSelector: {matchLabels: {app: web}}}}]
    protocols:
    - tcp: {destinationPort: {number: 5432}}
    - udp: {destinationPort: {range: {start: 1000, end: 2000}}}
    - sctp: {destinationPort: {number: 9}}
    - destinationNamedPort: sql
  egress:
  - action: Pass
    to: [{networks: ["192.168.0.0/16"]}]
  - action: Deny
    to: [{nodes: {matchLabels: {zone: a}}}]
`))
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: baseline-cnp}
spec:
  tier: Baseline
  priority: 7
  subject: {namespaces: {}}
  egress:
  - action: Pass
    to: [{namespaces: {}}]
  - action: Deny
    to: [{networks: ["0.0.0.0/0", "::/0"]}]
`))
	s := e.Snapshot()
	a := policyByName(t, s, model.KindClusterNetworkPolicy, "", "admin-cnp")
	b := policyByName(t, s, model.KindClusterNetworkPolicy, "", "baseline-cnp")
	if a.Tier != model.TierAdmin || a.Priority != 7 || a.ID != "c1" || b.Tier != model.TierBaseline {
		t.Errorf("headers %+v %+v", a, b)
	}
	if s.Policies[0] != a || s.Policies[1] != b {
		t.Errorf("order: admin tier first")
	}
	r := a.Rules[0]
	if r.Action != model.ActionAllow || r.Name != "accept-web" {
		t.Errorf("Accept maps to Allow: %+v", r)
	}
	want := []model.Port{{Protocol: "TCP", Port: 5432}, {Protocol: "UDP", Port: 1000, EndPort: 2000}, {Protocol: "SCTP", Port: 9}, {Name: "sql"}}
	for i := range want {
		if i >= len(r.Ports) || r.Ports[i] != want[i] {
			t.Errorf("ports %+v want %+v", r.Ports, want)
			break
		}
	}
	equalStrings(t, "from", peerMembers(t, s, r), []string{"prod/web"})
	if a.Rules[1].Action != model.ActionPass || a.Rules[2].Action != model.ActionDeny {
		t.Errorf("egress %+v", a.Rules[1:])
	}
	equalStrings(t, "nodes", peerMembers(t, s, a.Rules[2]), []string{"node:n1"})
	if b.Rules[0].Action != model.ActionPass || len(a.Conditions)+len(b.Conditions) != 0 {
		t.Errorf("baseline %+v conds %v %v", b.Rules, a.Conditions, b.Conditions)
	}
}

// "If DestinationPort is omitted, all ports for the specified protocol
// match" (API overview). The v0.2.0 CRD rejects it, so tierflow also warns;
// the rule is enforced as the overview describes, not failed closed.
func TestClusterNetworkPolicyProtocolWithoutPort(t *testing.T) {
	e := New()
	adminWorld(e)
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: x}
spec:
  tier: Admin
  priority: 3
  subject: {namespaces: {}}
  ingress:
  - action: Deny
    from: [{namespaces: {}}]
    protocols: [{udp: {}}, {tcp: {destinationPort: {number: 80}}}]
`))
	p := policyByName(t, e.Snapshot(), model.KindClusterNetworkPolicy, "", "x")
	r := p.Rules[0]
	if r.Action != model.ActionDeny || len(r.Peer.AddressGroups) != 1 || len(r.Peer.IPBlocks) != 0 {
		t.Errorf("rule should stay a Deny of the namespaces peer: %+v", r)
	}
	want := []model.Port{{Protocol: "UDP"}, {Protocol: "TCP", Port: 80}}
	if len(r.Ports) != 2 || r.Ports[0] != want[0] || r.Ports[1] != want[1] {
		t.Errorf("ports %+v want %+v", r.Ports, want)
	}
	equalStrings(t, "conditions", reasons(p.Conditions), []string{ReasonPortOmitted})
	if p.Conditions[0].Severity != model.SeverityWarning {
		t.Errorf("condition %+v should be a warning", p.Conditions[0])
	}
}

// Fail-closed handling of the cluster-scoped kinds, per the API comments.
func TestAdminFailClosed(t *testing.T) {
	all := []string{"0.0.0.0/0", "::/0"}
	cases := []struct {
		name     string
		cnp      bool
		yaml     string
		conds    []string
		action   model.Action // of rule 0 after fail-closed
		nothing  bool         // rule 0 matches nothing (Allow)
		everyPod bool         // the subject became every pod
		priority int32
	}{
		{name: "ingress peer with no field, Allow", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Allow, from: [{}]}]}`,
			conds: []string{"InvalidPeer"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "ingress peer with no field, Deny", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{}]}]}`,
			conds: []string{"InvalidPeer"}, action: model.ActionDeny, priority: 1},
		{name: "Pass with no-field peer becomes deny all", yaml: `{priority: 1, subject: {namespaces: {}}, egress: [{action: Pass, to: [{}]}]}`,
			conds: []string{"InvalidPeer"}, action: model.ActionDeny, priority: 1},
		{name: "domainNames Allow matches nothing", yaml: `{priority: 1, subject: {namespaces: {}}, egress: [{action: Allow, to: [{domainNames: ["*.example.com"]}, {namespaces: {}}]}]}`,
			conds: []string{"UnsupportedPeer"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "domainNames Deny denies all", yaml: `{priority: 1, subject: {namespaces: {}}, egress: [{action: Deny, to: [{domainNames: ["example.com"]}]}]}`,
			conds: []string{"UnsupportedPeer"}, action: model.ActionDeny, priority: 1},
		{name: "two fields in one peer", yaml: `{priority: 1, subject: {namespaces: {}}, egress: [{action: Allow, to: [{namespaces: {}, networks: ["10.0.0.0/8"]}]}]}`,
			conds: []string{"InvalidPeer"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "empty from", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: []}]}`,
			conds: []string{"InvalidPeer"}, action: model.ActionDeny, priority: 1},
		{name: "bad network", yaml: `{priority: 1, subject: {namespaces: {}}, egress: [{action: Allow, to: [{networks: ["10.0.0.300/8"]}]}]}`,
			conds: []string{"InvalidCIDR"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "port range start > end", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}], ports: [{portRange: {start: 90, end: 80}}]}]}`,
			conds: []string{"InvalidPort"}, action: model.ActionDeny, priority: 1},
		{name: "port entry with two fields", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Allow, from: [{namespaces: {}}], ports: [{portNumber: {port: 80, protocol: TCP}, namedPort: http}]}]}`,
			conds: []string{"InvalidPort"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "empty ports list", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Allow, from: [{namespaces: {}}], ports: []}]}`,
			conds: []string{"InvalidPort"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "unknown protocol", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Allow, from: [{namespaces: {}}], ports: [{portNumber: {port: 1, protocol: ICMP}}]}]}`,
			conds: []string{"UnknownProtocol"}, action: model.ActionAllow, nothing: true, priority: 1},
		{name: "unknown action", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Allowed, from: [{namespaces: {}}]}]}`,
			conds: []string{"UnknownAction"}, action: model.ActionDeny, priority: 1},
		{name: "bad peer selector", yaml: `{priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {matchExpressions: [{key: x, operator: Exists, values: [y]}]}}]}]}`,
			conds: []string{"InvalidSelector"}, action: model.ActionDeny, priority: 1},
		{name: "priority above 1000", yaml: `{priority: 1001, subject: {namespaces: {}}, ingress: [{action: Allow, from: [{namespaces: {}}]}]}`,
			conds: []string{"InvalidPriority"}, action: model.ActionAllow, nothing: true, priority: 1000},
		{name: "negative priority", yaml: `{priority: -1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}`,
			conds: []string{"InvalidPriority"}, action: model.ActionDeny, priority: 0},
		{name: "subject with no field", yaml: `{priority: 3, subject: {}, ingress: [{action: Allow, from: [{namespaces: {}}]}]}`,
			conds: []string{"InvalidSubject"}, action: model.ActionAllow, nothing: true, everyPod: true, priority: 3},
		{name: "subject with bad selector", yaml: `{priority: 3, subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {"a b": c}}}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}`,
			conds: []string{"InvalidSubject"}, action: model.ActionDeny, everyPod: true, priority: 3},
		{name: "CNP unknown tier", cnp: true, yaml: `{tier: Platform, priority: 3, subject: {namespaces: {}}, ingress: [{action: Accept, from: [{namespaces: {}}]}]}`,
			conds: []string{"UnknownTier"}, action: model.ActionAllow, nothing: true, priority: 3},
		// The v1alpha2 enum is Accept/Deny/Pass: v1alpha1's "Allow" is not
		// a CNP action (and "Accept" is not an ANP one).
		{name: "CNP action Allow is unknown", cnp: true, yaml: `{tier: Admin, priority: 3, subject: {namespaces: {}}, ingress: [{action: Allow, from: [{namespaces: {}}]}]}`,
			conds: []string{"UnknownAction"}, action: model.ActionDeny, priority: 3},
		{name: "ANP action Accept is unknown", yaml: `{priority: 3, subject: {namespaces: {}}, ingress: [{action: Accept, from: [{namespaces: {}}]}]}`,
			conds: []string{"UnknownAction"}, action: model.ActionDeny, priority: 3},
		{name: "CNP port with number and range", cnp: true, yaml: `{tier: Admin, priority: 3, subject: {namespaces: {}}, ingress: [{action: Accept, from: [{namespaces: {}}], protocols: [{udp: {destinationPort: {number: 5, range: {start: 1, end: 9}}}}]}]}`,
			conds: []string{"InvalidPort"}, action: model.ActionAllow, nothing: true, priority: 3},
		{name: "CNP range start == end", cnp: true, yaml: `{tier: Baseline, priority: 3, subject: {namespaces: {}}, ingress: [{action: Pass, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {range: {start: 80, end: 80}}}}]}]}`,
			conds: []string{"InvalidPort"}, action: model.ActionDeny, priority: 3},
		{name: "CNP domainNames Accept", cnp: true, yaml: `{tier: Admin, priority: 3, subject: {namespaces: {}}, egress: [{action: Accept, to: [{domainNames: ["kubernetes.io"]}]}]}`,
			conds: []string{"UnsupportedPeer"}, action: model.ActionAllow, nothing: true, priority: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New()
			adminWorld(e)
			var p *model.Policy
			if tc.cnp {
				o := cnpYAML(t, "metadata: {name: x}\nspec: "+tc.yaml)
				e.UpsertClusterNetworkPolicy(o)
				p = policyByName(t, e.Snapshot(), model.KindClusterNetworkPolicy, "", "x")
			} else {
				o := anpYAML(t, "metadata: {name: x}\nspec: "+tc.yaml)
				e.UpsertAdminNetworkPolicy(o)
				p = policyByName(t, e.Snapshot(), model.KindAdminNetworkPolicy, "", "x")
			}
			s := e.Snapshot()
			equalStrings(t, "conditions", reasons(p.Conditions), tc.conds)
			if p.Priority != tc.priority {
				t.Errorf("priority %d want %d", p.Priority, tc.priority)
			}
			r := p.Rules[0]
			if r.Action != tc.action {
				t.Errorf("action %s want %s", r.Action, tc.action)
			}
			if tc.nothing {
				if len(r.Peer.AddressGroups)+len(r.Peer.IPBlocks)+len(r.Ports) != 0 {
					t.Errorf("rule should match nothing: %+v", r)
				}
			} else {
				equalStrings(t, "deny-all peer", blocks(r.Peer.IPBlocks), all)
				if len(r.Peer.AddressGroups)+len(r.Ports) != 0 {
					t.Errorf("deny-all rule has groups or ports: %+v", r)
				}
			}
			if tc.everyPod && len(atgPods(t, s, p.AppliedToGroups[0])) != 8 {
				t.Errorf("subject should be every pod, got %v", atgPods(t, s, p.AppliedToGroups[0]))
			}
			if !conditionsEqual(e.PolicyConditions(p.Source), p.Conditions) {
				t.Errorf("PolicyConditions disagrees with the policy")
			}
		})
	}
}

func conditionsEqual(a, b []model.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The ClusterNetworkPolicy (v1alpha2) versions of the user stories.
func TestClusterNetworkPolicyStories(t *testing.T) {
	e := New()
	adminWorld(e)
	e.UpsertPod(mkPod("kube-system", "coredns", "n2", "10.0.9.1", []string{"app=kube-dns"}, withPort("dns", "UDP", 53)))
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: cluster-wide-deny-example}
spec:
  tier: Admin
  priority: 10
  subject:
    namespaces: {matchLabels: {kubernetes.io/metadata.name: sensitive}}
  ingress:
  - action: Deny
    name: select-all-deny-all
    from: [{namespaces: {matchLabels: {}}}]
`))
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: cluster-wide-allow-example}
spec:
  tier: Admin
  priority: 30
  subject: {namespaces: {}}
  ingress:
  - action: Accept
    name: allow-monitoring-ns-ingress
    from: [{namespaces: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  egress:
  - action: Accept
    name: allow-kube-dns-egress
    to: [{pods: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {app: kube-dns}}}}]
    protocols: [{udp: {destinationPort: {number: 53}}}, {destinationNamedPort: dns}]
`))
	e.UpsertClusterNetworkPolicy(cnpYAML(t, `
metadata: {name: baseline-rule-example}
spec:
  tier: Baseline
  priority: 10
  subject: {namespaces: {}}
  ingress:
  - action: Deny
    name: default-deny
    from: [{namespaces: {}}]
`))
	s := e.Snapshot()
	deny := policyByName(t, s, model.KindClusterNetworkPolicy, "", "cluster-wide-deny-example")
	equalStrings(t, "deny subject", atgPods(t, s, deny.AppliedToGroups[0]), []string{"sensitive/vault@n2"})
	if deny.Rules[0].Name != "select-all-deny-all" || deny.Rules[0].Action != model.ActionDeny {
		t.Errorf("deny rule %+v", deny.Rules[0])
	}
	if got := len(peerMembers(t, s, deny.Rules[0])); got != 9 {
		t.Errorf("deny from every pod: %d members", got)
	}
	allow := policyByName(t, s, model.KindClusterNetworkPolicy, "", "cluster-wide-allow-example")
	equalStrings(t, "monitoring", peerMembers(t, s, allow.Rules[0]), []string{"monitoring/prom"})
	eg := allow.Rules[1]
	equalStrings(t, "kube-dns", peerMembers(t, s, eg), []string{"kube-system/coredns"})
	if eg.Action != model.ActionAllow || len(eg.Ports) != 2 || eg.Ports[0] != (model.Port{Protocol: "UDP", Port: 53}) || eg.Ports[1] != (model.Port{Name: "dns"}) {
		t.Errorf("dns rule %+v", eg)
	}
	base := policyByName(t, s, model.KindClusterNetworkPolicy, "", "baseline-rule-example")
	if base.Tier != model.TierBaseline || s.Policies[len(s.Policies)-1] != base {
		t.Errorf("baseline CNP must be last: %+v", base)
	}
	// Same priority 10 in different tiers: no warning.
	if len(deny.Conditions)+len(base.Conditions) != 0 {
		t.Errorf("conditions %v %v", deny.Conditions, base.Conditions)
	}
}
