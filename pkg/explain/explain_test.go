package explain

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// world builds snapshots by hand: pods, then groups made of those pods,
// then policies.
type world struct {
	pods []Pod
	snap *model.Snapshot
}

func newWorld(pods ...Pod) *world {
	return &world{pods: pods, snap: &model.Snapshot{
		AppliedToGroups: map[string]*model.AppliedToGroup{},
		AddressGroups:   map[string]*model.AddressGroup{},
	}}
}

func mkPod(ref string, ips ...string) Pod {
	ns, name, _ := strings.Cut(ref, "/")
	p := Pod{Ref: model.PodRef{Namespace: ns, Name: name}, Node: "node-1"}
	for _, ip := range ips {
		p.IPs = append(p.IPs, netip.MustParseAddr(ip))
	}
	return p
}

func (p Pod) withPorts(ports ...model.NamedPort) Pod { p.Ports = ports; return p }

func (w *world) member(ref string) model.GroupMember {
	for _, p := range w.pods {
		if p.Ref.String() == ref {
			r := p.Ref
			return model.GroupMember{Pod: &r, Node: p.Node, IPs: p.IPs, Ports: p.Ports}
		}
	}
	panic("no pod " + ref)
}

// atg adds an applied-to group of the named pods and returns its ID.
func (w *world) atg(id string, refs ...string) string {
	g := &model.AppliedToGroup{Meta: model.Meta{ID: id}, MembersByNode: model.MembersByNode{}}
	for _, r := range refs {
		m := w.member(r)
		g.MembersByNode.Append(m.Node, m)
	}
	w.snap.AppliedToGroups[id] = g
	return id
}

// ag adds an address group of the named pods and returns its ID.
func (w *world) ag(id string, refs ...string) string {
	g := &model.AddressGroup{Meta: model.Meta{ID: id}}
	for _, r := range refs {
		g.Members = append(g.Members, w.member(r))
	}
	w.snap.AddressGroups[id] = g
	return id
}

func (w *world) policy(kind model.PolicyKind, ns, name string, tier model.Tier, prio int32, atgs []string, rules ...model.Rule) *model.Policy {
	p := &model.Policy{Source: model.PolicyRef{Kind: kind, Namespace: ns, Name: name}, Tier: tier, Priority: prio, AppliedToGroups: atgs, Rules: rules}
	w.snap.Policies = append(w.snap.Policies, p)
	return p
}

func (w *world) anp(name string, prio int32, atg string, rules ...model.Rule) {
	w.policy(model.KindAdminNetworkPolicy, "", name, model.TierAdmin, prio, []string{atg}, rules...)
}

func (w *world) banp(atg string, rules ...model.Rule) {
	w.policy(model.KindBaselineAdminNetworkPolicy, "", "default", model.TierBaseline, 0, []string{atg}, rules...)
}

func (w *world) np(ns, name string, atg string, isolates []model.Direction, rules ...model.Rule) {
	p := w.policy(model.KindNetworkPolicy, ns, name, model.TierNetworkPolicy, 0, []string{atg}, rules...)
	p.Isolates = isolates
}

func rule(dir model.Direction, idx int, action model.Action, peer model.Peer, ports ...model.Port) model.Rule {
	return model.Rule{Index: idx, Name: strings.ToLower(string(dir)) + "-" + string(rune('a'+idx)), Direction: dir, Action: action, Peer: peer, Ports: ports}
}

func fromGroups(ids ...string) model.Peer { return model.Peer{AddressGroups: ids} }

func cidr(c string, except ...string) model.Peer {
	b := model.IPBlock{CIDR: netip.MustParsePrefix(c)}
	for _, x := range except {
		b.Except = append(b.Except, netip.MustParsePrefix(x))
	}
	return model.Peer{IPBlocks: []model.IPBlock{b}}
}

var (
	in    = model.DirectionIn
	out   = model.DirectionOut
	tcp   = model.ProtocolTCP
	udp   = model.ProtocolUDP
	both  = []model.Direction{in, out}
	onlyI = []model.Direction{in}
	onlyE = []model.Direction{out}
)

func pid(kind model.PolicyKind, ns, name string) *PolicyID {
	return &PolicyID{Kind: kind, Namespace: ns, Name: name}
}

func ep(s string) Endpoint {
	if ip, err := netip.ParseAddr(s); err == nil {
		return Endpoint{IP: ip}
	}
	ns, name, _ := strings.Cut(s, "/")
	return Endpoint{Pod: &model.PodRef{Namespace: ns, Name: name}}
}

// want is the part of a Decision a case asserts.
type want struct {
	tier   string
	policy *PolicyID
	rule   int // -1: rule must be null
	action model.Action
	reason Reason
	passed []PolicyID
}

func check(t *testing.T, what string, got Decision, w want) {
	t.Helper()
	if got.Tier != w.tier || got.Action != w.action || got.Reason != w.reason {
		t.Errorf("%s: tier/action/reason = %s/%s/%s, want %s/%s/%s", what, got.Tier, got.Action, got.Reason, w.tier, w.action, w.reason)
	}
	if !reflect.DeepEqual(got.Policy, w.policy) {
		t.Errorf("%s: policy = %v, want %v", what, got.Policy, w.policy)
	}
	if w.rule < 0 && got.Rule != nil {
		t.Errorf("%s: rule = %v, want null", what, got.Rule)
	}
	if w.rule >= 0 && (got.Rule == nil || got.Rule.Index != w.rule) {
		t.Errorf("%s: rule = %v, want index %d", what, got.Rule, w.rule)
	}
	passed := w.passed
	if passed == nil {
		passed = []PolicyID{}
	}
	if !reflect.DeepEqual(got.PassedThrough, passed) {
		t.Errorf("%s: passedThrough = %v, want %v", what, got.PassedThrough, passed)
	}
}

var (
	defaultAllowed = want{tier: "Baseline", rule: -1, action: model.ActionAllow, reason: ReasonDefaultAllow}
	notAPod        = want{tier: "None", rule: -1, action: model.ActionAllow, reason: ReasonNotAPod}
	isolated       = want{tier: "NetworkPolicy", rule: -1, action: model.ActionDeny, reason: ReasonIsolation}
)

func TestTierInteractions(t *testing.T) {
	pods := []Pod{
		mkPod("a/client", "10.0.1.1", "fd00::1:1"),
		mkPod("b/server", "10.0.2.1", "fd00::2:1").withPorts(model.NamedPort{Name: "http", Protocol: tcp, Port: 8080}),
		mkPod("c/other", "10.0.3.1").withPorts(model.NamedPort{Name: "http", Protocol: tcp, Port: 9090}, model.NamedPort{Name: "dns", Protocol: udp, Port: 53}),
	}
	anpID := func(n string) *PolicyID { return pid(model.KindAdminNetworkPolicy, "", n) }
	banpID := pid(model.KindBaselineAdminNetworkPolicy, "", "default")
	cases := []struct {
		name    string
		build   func(w *world)
		src     string
		dst     string
		proto   model.Protocol
		port    int32
		verdict Verdict
		egress  want
		ingress want
	}{
		{
			name: "admin allow overrides networkpolicy isolation",
			build: func(w *world) {
				w.anp("allow-client", 10, w.atg("srv", "b/server"), rule(in, 0, model.ActionAllow, fromGroups(w.ag("cli", "a/client"))))
				w.np("b", "deny-all", "srv", onlyI)
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictAllow,
			egress:  defaultAllowed,
			ingress: want{tier: "Admin", policy: anpID("allow-client"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
		},
		{
			name: "admin deny overrides networkpolicy allow",
			build: func(w *world) {
				w.anp("deny-client", 10, w.atg("cli", "a/client"), rule(out, 0, model.ActionDeny, fromGroups(w.ag("srv", "b/server"))))
				w.np("a", "allow-all-egress", "cli", onlyE, rule(out, 0, model.ActionAllow, cidr("0.0.0.0/0")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  want{tier: "Admin", policy: anpID("deny-client"), rule: 0, action: model.ActionDeny, reason: ReasonRule},
			ingress: defaultAllowed,
		},
		{
			name: "pass goes to networkpolicy, which allows",
			build: func(w *world) {
				w.anp("pass", 5, w.atg("srv", "b/server"), rule(in, 0, model.ActionPass, cidr("0.0.0.0/0")))
				w.anp("deny-later", 6, "srv", rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
				w.np("b", "allow-client", "srv", onlyI, rule(in, 0, model.ActionAllow, fromGroups(w.ag("cli", "a/client"))))
				w.banp("srv", rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictAllow,
			egress: defaultAllowed,
			ingress: want{tier: "NetworkPolicy", policy: pid(model.KindNetworkPolicy, "b", "allow-client"), rule: 0, action: model.ActionAllow, reason: ReasonRule,
				passed: []PolicyID{*anpID("pass")}},
		},
		{
			name: "pass with no networkpolicy reaches the baseline",
			build: func(w *world) {
				w.anp("pass", 5, w.atg("srv", "b/server"), rule(in, 0, model.ActionPass, cidr("0.0.0.0/0")))
				w.banp("srv", rule(in, 0, model.ActionDeny, fromGroups(w.ag("cli", "a/client"))))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  defaultAllowed,
			ingress: want{tier: "Baseline", policy: banpID, rule: 0, action: model.ActionDeny, reason: ReasonRule, passed: []PolicyID{*anpID("pass")}},
		},
		{
			name: "networkpolicy isolation wins over baseline allow",
			build: func(w *world) {
				w.np("b", "only-c", w.atg("srv", "b/server"), onlyI, rule(in, 0, model.ActionAllow, fromGroups(w.ag("oth", "c/other"))))
				w.banp("srv", rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  defaultAllowed,
			ingress: isolated,
		},
		{
			name: "baseline deny",
			build: func(w *world) {
				w.banp(w.atg("cli", "a/client"), rule(out, 0, model.ActionAllow, cidr("10.0.3.0/24")), rule(out, 1, model.ActionDeny, cidr("10.0.0.0/8")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  want{tier: "Baseline", policy: banpID, rule: 1, action: model.ActionDeny, reason: ReasonRule},
			ingress: defaultAllowed,
		},
		{
			name: "baseline cnp pass is the default allow, later baseline deny not reached",
			build: func(w *world) {
				w.policy(model.KindClusterNetworkPolicy, "", "pass-web", model.TierBaseline, 10, []string{w.atg("srv", "b/server")},
					rule(in, 0, model.ActionPass, cidr("10.0.0.0/8")))
				w.banp("srv", rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictAllow,
			egress: defaultAllowed,
			ingress: want{tier: "Baseline", rule: -1, action: model.ActionAllow, reason: ReasonDefaultAllow,
				passed: []PolicyID{*pid(model.KindClusterNetworkPolicy, "", "pass-web")}},
		},
		{
			name: "named port resolves per destination pod (in rule)",
			build: func(w *world) {
				g := w.atg("srvs", "b/server", "c/other")
				w.np("x", "http", g, onlyI, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0"), model.Port{Protocol: tcp, Name: "http"}))
			},
			src: "a/client", dst: "c/other", proto: tcp, port: 8080, verdict: VerdictDeny,
			egress: defaultAllowed, ingress: isolated,
		},
		{
			name: "named port resolves per destination pod, matching port",
			build: func(w *world) {
				g := w.atg("srvs", "b/server", "c/other")
				w.np("x", "http", g, onlyI, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0"), model.Port{Protocol: tcp, Name: "http"}))
			},
			src: "a/client", dst: "c/other", proto: tcp, port: 9090, verdict: VerdictAllow,
			egress:  defaultAllowed,
			ingress: want{tier: "NetworkPolicy", policy: pid(model.KindNetworkPolicy, "x", "http"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
		},
		{
			name: "named port of an out rule resolves on the peer pod",
			build: func(w *world) {
				w.np("a", "egress-http", w.atg("cli", "a/client"), onlyE,
					rule(out, 0, model.ActionAllow, fromGroups(w.ag("srvs", "b/server", "c/other")), model.Port{Protocol: tcp, Name: "http"}))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 8080, verdict: VerdictAllow,
			egress:  want{tier: "NetworkPolicy", policy: pid(model.KindNetworkPolicy, "a", "egress-http"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
			ingress: defaultAllowed,
		},
		{
			name: "named port with empty protocol takes the pod port's protocol",
			build: func(w *world) {
				w.anp("deny-dns", 1, w.atg("cli", "a/client"), rule(out, 0, model.ActionDeny, fromGroups(w.ag("oth", "c/other")), model.Port{Name: "dns"}))
			},
			src: "a/client", dst: "c/other", proto: udp, port: 53, verdict: VerdictDeny,
			egress:  want{tier: "Admin", policy: anpID("deny-dns"), rule: 0, action: model.ActionDeny, reason: ReasonRule},
			ingress: defaultAllowed,
		},
		{
			name: "named port name that resolves nowhere matches nothing",
			build: func(w *world) {
				w.anp("deny-nope", 1, w.atg("cli", "a/client"), rule(out, 0, model.ActionDeny, cidr("0.0.0.0/0"), model.Port{Name: "nope"}))
			},
			src: "a/client", dst: "c/other", proto: udp, port: 53, verdict: VerdictAllow,
			egress: defaultAllowed, ingress: defaultAllowed,
		},
		{
			name: "ipBlock except excludes",
			build: func(w *world) {
				w.np("a", "egress", w.atg("cli", "a/client"), onlyE, rule(out, 0, model.ActionAllow, cidr("10.0.0.0/8", "10.0.2.0/24")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress: isolated, ingress: defaultAllowed,
		},
		{
			name: "ipBlock outside except includes, bare IP destination",
			build: func(w *world) {
				w.np("a", "egress", w.atg("cli", "a/client"), onlyE, rule(out, 0, model.ActionAllow, cidr("10.0.0.0/8", "10.0.2.0/24")))
			},
			src: "a/client", dst: "10.9.9.9", proto: tcp, port: 80, verdict: VerdictAllow,
			egress:  want{tier: "NetworkPolicy", policy: pid(model.KindNetworkPolicy, "a", "egress"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
			ingress: notAPod,
		},
		{
			name: "IPv6 destination uses the source's IPv6 address",
			build: func(w *world) {
				w.anp("deny-v6", 1, w.atg("srv", "b/server"), rule(in, 0, model.ActionDeny, cidr("fd00::1:0/112")))
				w.anp("deny-v4", 2, "srv", rule(in, 0, model.ActionDeny, cidr("10.0.1.0/24")))
			},
			src: "a/client", dst: "fd00::2:1", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  defaultAllowed,
			ingress: want{tier: "Admin", policy: anpID("deny-v6"), rule: 0, action: model.ActionDeny, reason: ReasonRule},
		},
		{
			name: "IPv4 ipBlock does not match IPv6 traffic",
			build: func(w *world) {
				w.anp("deny-v4", 2, w.atg("srv", "b/server"), rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
			},
			src: "fd00::1:1", dst: "fd00::2:1", proto: tcp, port: 80, verdict: VerdictAllow,
			egress: defaultAllowed, ingress: defaultAllowed,
		},
		{
			name: "port range includes its end",
			build: func(w *world) {
				w.np("b", "range", w.atg("srv", "b/server"), onlyI, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0"), model.Port{Protocol: tcp, Port: 8000, EndPort: 8080}))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 8080, verdict: VerdictAllow,
			egress:  defaultAllowed,
			ingress: want{tier: "NetworkPolicy", policy: pid(model.KindNetworkPolicy, "b", "range"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
		},
		{
			name: "port range excludes the next port",
			build: func(w *world) {
				w.np("b", "range", w.atg("srv", "b/server"), onlyI, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0"), model.Port{Protocol: tcp, Port: 8000, EndPort: 8080}))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 8081, verdict: VerdictDeny,
			egress: defaultAllowed, ingress: isolated,
		},
		{
			name: "port range is per protocol",
			build: func(w *world) {
				w.np("b", "range", w.atg("srv", "b/server"), onlyI, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0"), model.Port{Protocol: tcp, Port: 8000, EndPort: 8080}))
			},
			src: "a/client", dst: "b/server", proto: udp, port: 8000, verdict: VerdictDeny,
			egress: defaultAllowed, ingress: isolated,
		},
		{
			name: "protocol-only port matches every port of it",
			build: func(w *world) {
				w.anp("deny-udp", 1, w.atg("srv", "b/server"), rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0"), model.Port{Protocol: udp}))
			},
			src: "a/client", dst: "b/server", proto: udp, port: 65535, verdict: VerdictDeny,
			egress:  defaultAllowed,
			ingress: want{tier: "Admin", policy: anpID("deny-udp"), rule: 0, action: model.ActionDeny, reason: ReasonRule},
		},
		{
			name: "same priority: alphabetical by name",
			build: func(w *world) {
				g := w.atg("srv", "b/server")
				w.anp("b-allow", 7, g, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0")))
				w.anp("a-deny", 7, g, rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  defaultAllowed,
			ingress: want{tier: "Admin", policy: anpID("a-deny"), rule: 0, action: model.ActionDeny, reason: ReasonRule},
		},
		{
			name: "same priority: AdminNetworkPolicy before ClusterNetworkPolicy",
			build: func(w *world) {
				g := w.atg("srv", "b/server")
				w.policy(model.KindClusterNetworkPolicy, "", "a-deny", model.TierAdmin, 7, []string{g}, rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
				w.anp("z-allow", 7, g, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictAllow,
			egress:  defaultAllowed,
			ingress: want{tier: "Admin", policy: anpID("z-allow"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
		},
		{
			name: "lower priority number first, rules in order",
			build: func(w *world) {
				g := w.atg("srv", "b/server")
				w.anp("second", 20, g, rule(in, 0, model.ActionAllow, cidr("0.0.0.0/0")))
				w.anp("first", 3, g, rule(in, 0, model.ActionDeny, cidr("192.168.0.0/16")), rule(in, 1, model.ActionDeny, cidr("10.0.1.1/32")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictDeny,
			egress:  defaultAllowed,
			ingress: want{tier: "Admin", policy: anpID("first"), rule: 1, action: model.ActionDeny, reason: ReasonRule},
		},
		{
			name: "a pod's IP given bare is that pod",
			build: func(w *world) {
				w.np("b", "deny-all", w.atg("srv", "b/server"), both)
			},
			src: "a/client", dst: "10.0.2.1", proto: tcp, port: 80, verdict: VerdictDeny,
			egress: defaultAllowed, ingress: isolated,
		},
		{
			name: "bare IP source has no egress policy",
			build: func(w *world) {
				w.np("b", "allow-10", w.atg("srv", "b/server"), onlyI, rule(in, 0, model.ActionAllow, cidr("192.0.2.0/24")))
			},
			src: "192.0.2.7", dst: "b/server", proto: tcp, port: 80, verdict: VerdictAllow,
			egress:  notAPod,
			ingress: want{tier: "NetworkPolicy", policy: pid(model.KindNetworkPolicy, "b", "allow-10"), rule: 0, action: model.ActionAllow, reason: ReasonRule},
		},
		{
			name: "ingress-only isolation does not isolate egress",
			build: func(w *world) {
				w.np("a", "in-only", w.atg("cli", "a/client"), onlyI, rule(out, 0, model.ActionAllow, cidr("1.1.1.1/32")))
			},
			src: "a/client", dst: "b/server", proto: tcp, port: 80, verdict: VerdictAllow,
			egress: defaultAllowed, ingress: defaultAllowed,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(pods...)
			tc.build(w)
			inv, err := NewInventory(w.pods)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Explain(w.snap, inv, Query{Src: ep(tc.src), Dst: ep(tc.dst), Protocol: tc.proto, Port: tc.port})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict {
				t.Errorf("verdict = %s, want %s (%+v)", res.Verdict, tc.verdict, res)
			}
			check(t, "egress", res.Egress, tc.egress)
			check(t, "ingress", res.Ingress, tc.ingress)
		})
	}
}

func TestIsolatedByListsEveryIsolatingPolicy(t *testing.T) {
	w := newWorld(mkPod("a/x", "10.0.0.1"), mkPod("a/y", "10.0.0.2"))
	g := w.atg("y", "a/y")
	w.np("a", "p1", g, onlyI)
	w.np("a", "p2", g, both, rule(in, 0, model.ActionAllow, fromGroups(w.ag("x", "a/x"))))
	inv, _ := NewInventory(w.pods)
	res, err := Explain(w.snap, inv, Query{Src: ep("a/x"), Dst: ep("a/y"), Protocol: tcp, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []PolicyID{*pid(model.KindNetworkPolicy, "a", "p1"), *pid(model.KindNetworkPolicy, "a", "p2")}
	if !reflect.DeepEqual(res.Ingress.IsolatedBy, want) || res.Verdict != VerdictAllow || res.Ingress.Policy.Name != "p2" {
		t.Errorf("got %+v", res.Ingress)
	}
}

func TestBadInputIsAnError(t *testing.T) {
	w := newWorld(mkPod("a/x", "10.0.0.1"), mkPod("a/v6", "fd00::1"), mkPod("a/pending"))
	inv, _ := NewInventory(w.pods)
	good := Query{Src: ep("a/x"), Dst: ep("10.1.1.1"), Protocol: tcp, Port: 80}
	cases := map[string]func(q *Query){
		"unknown pod":      func(q *Query) { q.Src = ep("a/nope") },
		"pod without IP":   func(q *Query) { q.Dst = ep("a/pending") },
		"no shared family": func(q *Query) { q.Dst = ep("a/v6") },
		"port zero":        func(q *Query) { q.Port = 0 },
		"port too big":     func(q *Query) { q.Port = 65536 },
		"bad protocol":     func(q *Query) { q.Protocol = "ICMP" },
		"empty endpoint":   func(q *Query) { q.Dst = Endpoint{} },
	}
	for name, mutate := range cases {
		q := good
		mutate(&q)
		if _, err := Explain(w.snap, inv, q); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Explain(w.snap, inv, good); err != nil {
		t.Fatalf("good query: %v", err)
	}
}

func TestInconsistentSnapshotIsRefused(t *testing.T) {
	bad := map[string]func(w *world){
		"missing applied-to group": func(w *world) { w.anp("x", 1, "nope") },
		"missing address group": func(w *world) {
			w.anp("x", 1, w.atg("g", "a/x"), rule(in, 0, model.ActionDeny, fromGroups("nope")))
		},
		"deny in networkpolicy tier": func(w *world) {
			w.np("a", "x", w.atg("g", "a/x"), onlyI, rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
		},
		"numeric port without protocol": func(w *world) {
			w.anp("x", 1, w.atg("g", "a/x"), rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0"), model.Port{Port: 80}))
		},
		"inverted range": func(w *world) {
			w.anp("x", 1, w.atg("g", "a/x"), rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0"), model.Port{Protocol: tcp, Port: 90, EndPort: 80}))
		},
	}
	for name, build := range bad {
		w := newWorld(mkPod("a/x", "10.0.0.1"))
		build(w)
		inv, _ := NewInventory(w.pods)
		if _, err := NewEvaluator(w.snap, inv); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMatrixCoversOrderedPairs(t *testing.T) {
	w := newWorld(mkPod("a/x", "10.0.0.1"), mkPod("a/y", "10.0.0.2"), mkPod("b/z", "10.0.0.3"), mkPod("b/pending"))
	w.np("a", "deny-in", w.atg("y", "a/y"), onlyI)
	inv, _ := NewInventory(w.pods)
	e, err := NewEvaluator(w.snap, inv)
	if err != nil {
		t.Fatal(err)
	}
	cells, skipped, err := e.Matrix([]PortSpec{{tcp, 80}, {udp, 53}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 12 || len(skipped) != 1 || !strings.Contains(skipped[0], "b/pending") {
		t.Fatalf("got %d cells, skipped %v", len(cells), skipped)
	}
	for _, c := range cells {
		wantDeny := c.Dst == "a/y"
		if (c.Verdict == VerdictDeny) != wantDeny {
			t.Errorf("%s -> %s %s: %s", c.Src, c.Dst, c.Port, c.Verdict)
		}
	}
	if cells[0].Src != "a/x" || cells[0].Dst != "a/y" || cells[0].Port != "TCP/80" || cells[6].Port != "UDP/53" {
		t.Errorf("order: %+v %+v", cells[0], cells[6])
	}
}

func TestParsePortSpec(t *testing.T) {
	for s, want := range map[string]PortSpec{"TCP/80": {tcp, 80}, "udp/53": {udp, 53}, "Sctp/65535": {model.ProtocolSCTP, 65535}} {
		got, err := ParsePortSpec(s)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", s, got, err)
		}
	}
	for _, s := range []string{"TCP/99999", "FOO/80", "TCP/0", "TCP", "80", "TCP/http", "/80"} {
		if _, err := ParsePortSpec(s); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
}

// A pod reaching its own address never leaves the pod, so no policy (not
// even an Admin Deny or a NetworkPolicy isolating it) applies.
func TestPodToItselfIsLoopback(t *testing.T) {
	w := newWorld(mkPod("a/p", "10.0.1.1", "fd00::1"), mkPod("a/q", "10.0.1.2"))
	all := w.ag("all", "a/p", "a/q")
	w.anp("deny-all", 1, w.atg("pods", "a/p", "a/q"), rule(in, 0, model.ActionDeny, fromGroups(all)), rule(out, 0, model.ActionDeny, fromGroups(all)))
	w.np("a", "isolate", "pods", both)
	inv, err := NewInventory(w.pods)
	if err != nil {
		t.Fatal(err)
	}
	loop := want{tier: "None", rule: -1, action: model.ActionAllow, reason: ReasonLoopback}
	for _, dst := range []string{"a/p", "10.0.1.1", "fd00::1"} {
		res, err := Explain(w.snap, inv, Query{Src: ep("a/p"), Dst: ep(dst), Protocol: tcp, Port: 80})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != VerdictAllow {
			t.Errorf("a/p -> %s: verdict %s", dst, res.Verdict)
		}
		check(t, "egress to "+dst, res.Egress, loop)
		check(t, "ingress to "+dst, res.Ingress, loop)
	}
	res, err := Explain(w.snap, inv, Query{Src: ep("a/p"), Dst: ep("a/q"), Protocol: tcp, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictDeny || res.Egress.Reason != ReasonRule {
		t.Errorf("a/p -> a/q: %s, egress %s", res.Verdict, res.Egress.Reason)
	}
}
