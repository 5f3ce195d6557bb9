package crosscheck

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/explain/load"
	"github.com/tierflow/tierflow/pkg/model"
)

const (
	seed  = 20261122
	cases = 1000
)

// excludedCases are the inputs on which cyclonus departs from the API text;
// the generator consults this list (see doc.go for the reasons).
var excludedCases = map[string]string{
	"NotInOnMissingKey":     "cyclonus: NotIn does not match an object without the key; Kubernetes: it does",
	"MatchLabelsEmptyValue": "cyclonus: matchLabels {k: \"\"} matches an object without k; Kubernetes: it does not",
}

var (
	namespaces = []string{"x", "y", "z"}
	podNames   = []string{"a", "b", "c"}
	externals  = []string{"192.168.7.9", "10.0.9.200"}
	probePorts = []explain.PortSpec{
		{Protocol: model.ProtocolTCP, Port: 80}, {Protocol: model.ProtocolTCP, Port: 81},
		{Protocol: model.ProtocolTCP, Port: 8080}, {Protocol: model.ProtocolUDP, Port: 53},
		{Protocol: model.ProtocolTCP, Port: 53}, {Protocol: model.ProtocolUDP, Port: 80},
		{Protocol: model.ProtocolSCTP, Port: 81},
	}
	// namedPortChoices: each name with the number/protocol pairs it may have
	// on a pod, so one name resolves differently per pod.
	namedPortChoices = map[string][]corev1.ContainerPort{
		"http": {{ContainerPort: 80, Protocol: corev1.ProtocolTCP}, {ContainerPort: 81, Protocol: corev1.ProtocolTCP}, {ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		"dns":  {{ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 53, Protocol: corev1.ProtocolTCP}},
		"sctp": {{ContainerPort: 81, Protocol: corev1.ProtocolSCTP}},
		"alt":  {{ContainerPort: 80, Protocol: corev1.ProtocolUDP}, {ContainerPort: 8080, Protocol: ""}},
	}
	portNames = []string{"alt", "dns", "http", "nope", "sctp"}
	cidrs     = map[string][]string{ // CIDR → excepts it may have (inside it)
		"0.0.0.0/0":      {"10.0.0.0/8", "10.0.1.0/24", "192.168.0.0/16"},
		"10.0.0.0/8":     {"10.0.1.0/24", "10.0.2.2/32", "10.0.9.0/24"},
		"10.0.0.0/16":    {"10.0.0.0/24", "10.0.2.0/24", "10.0.1.1/32"},
		"10.0.1.0/24":    {"10.0.1.2/31"},
		"10.0.2.2/32":    nil,
		"192.168.0.0/16": {"192.168.7.0/24"},
	}
)

// gen generates one case's world and policies.
type gen struct {
	r *rand.Rand
	// features counts what the corpus exercised, to prove it is not vacuous.
	features map[string]int
}

func (g *gen) pick(n int) int        { return g.r.IntN(n) }
func (g *gen) chance(p float64) bool { return g.r.Float64() < p }
func (g *gen) note(f string)         { g.features[f]++ }

func pickOne[T any](g *gen, xs []T) T { return xs[g.pick(len(xs))] }

func (g *gen) world() ([]*corev1.Namespace, []*corev1.Pod) {
	var nss []*corev1.Namespace
	var pods []*corev1.Pod
	for i, ns := range namespaces {
		n := &corev1.Namespace{}
		n.Name = ns
		n.Labels = map[string]string{"team": pickOne(g, []string{"a", "b"})}
		if g.chance(0.5) {
			n.Labels["env"] = pickOne(g, []string{"prod", "dev"})
		}
		nss = append(nss, n)
		for j, name := range podNames {
			p := &corev1.Pod{}
			p.Namespace, p.Name = ns, name
			p.Labels = map[string]string{"app": pickOne(g, []string{"web", "db"})}
			if g.chance(0.5) {
				p.Labels["tier"] = pickOne(g, []string{"front", "back"})
			}
			if g.chance(0.3) {
				p.Labels["role"] = "x"
			}
			p.Spec.NodeName = fmt.Sprintf("node-%d", (i+j)%2+1)
			c := corev1.Container{Name: "main"}
			used := map[string]bool{}
			for _, name := range []string{"alt", "dns", "http", "sctp"} {
				if !g.chance(0.6) {
					continue
				}
				cp := pickOne(g, namedPortChoices[name])
				proto := cp.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				k := fmt.Sprintf("%s/%d", proto, cp.ContainerPort)
				if used[k] {
					continue
				}
				used[k] = true
				cp.Name = name
				c.Ports = append(c.Ports, cp)
			}
			p.Spec.Containers = []corev1.Container{c}
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = fmt.Sprintf("10.0.%d.%d", i, j+1)
			pods = append(pods, p)
		}
	}
	return nss, pods
}

// selector generates a label selector over keys: always lists keys every
// object has (the only keys NotIn may use), values maps every key to its
// possible values.
func (g *gen) selector(what string, always []string, values map[string][]string) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{}
	if g.chance(0.3) {
		g.note(what + ":empty")
		return sel
	}
	var keys []string
	for k := range values {
		keys = append(keys, k)
	}
	sortStrings(keys)
	if g.chance(0.6) {
		sel.MatchLabels = map[string]string{}
		for n := 1 + g.pick(2); n > 0; n-- {
			k := pickOne(g, keys)
			sel.MatchLabels[k] = pickOne(g, values[k])
		}
		g.note(what + ":matchLabels")
	}
	if len(sel.MatchLabels) == 0 || g.chance(0.4) {
		for n := 1 + g.pick(2); n > 0; n-- {
			op := pickOne(g, []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist})
			k := pickOne(g, keys)
			if op == metav1.LabelSelectorOpNotIn {
				k = pickOne(g, always) // see excludedCases["NotInOnMissingKey"]
			}
			req := metav1.LabelSelectorRequirement{Key: k, Operator: op}
			if op == metav1.LabelSelectorOpIn || op == metav1.LabelSelectorOpNotIn {
				vs := values[k]
				req.Values = []string{pickOne(g, vs)}
				if g.chance(0.3) {
					req.Values = append(req.Values, pickOne(g, vs))
				}
			}
			sel.MatchExpressions = append(sel.MatchExpressions, req)
			g.note(what + ":" + string(op))
		}
	}
	return sel
}

var (
	podLabelValues = map[string][]string{"app": {"web", "db"}, "tier": {"front", "back"}, "role": {"x"}}
	nsLabelValues  = map[string][]string{"team": {"a", "b"}, "env": {"prod", "dev"}, "kubernetes.io/metadata.name": namespaces}
)

func (g *gen) podSelector() *metav1.LabelSelector {
	return g.selector("podSelector", []string{"app"}, podLabelValues)
}

func (g *gen) nsSelector() *metav1.LabelSelector {
	return g.selector("namespaceSelector", []string{"team", "kubernetes.io/metadata.name"}, nsLabelValues)
}

func (g *gen) peer() networkingv1.NetworkPolicyPeer {
	var p networkingv1.NetworkPolicyPeer
	switch g.pick(4) {
	case 0:
		var keys []string
		for c := range cidrs {
			keys = append(keys, c)
		}
		sortStrings(keys)
		c := pickOne(g, keys)
		p.IPBlock = &networkingv1.IPBlock{CIDR: c}
		for _, x := range cidrs[c] {
			if g.chance(0.4) {
				p.IPBlock.Except = append(p.IPBlock.Except, x)
				g.note("ipBlock:except")
			}
		}
		g.note("peer:ipBlock")
	case 1:
		p.PodSelector = g.podSelector()
		g.note("peer:podSelector")
	case 2:
		p.NamespaceSelector = g.nsSelector()
		g.note("peer:namespaceSelector")
	case 3:
		p.PodSelector, p.NamespaceSelector = g.podSelector(), g.nsSelector()
		g.note("peer:both")
	}
	return p
}

func (g *gen) port() networkingv1.NetworkPolicyPort {
	var p networkingv1.NetworkPolicyPort
	if g.chance(0.75) {
		proto := pickOne(g, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP})
		p.Protocol = &proto
		g.note("port:protocol:" + string(proto))
	} else {
		g.note("port:protocol:absent")
	}
	switch g.pick(5) {
	case 0:
		g.note("port:protocolOnly")
	case 1, 2:
		n := pickOne(g, []int32{53, 80, 81, 8080})
		p.Port = &intstr.IntOrString{Type: intstr.Int, IntVal: n}
		g.note("port:number")
		if g.chance(0.4) {
			end := n + pickOne(g, []int32{0, 1, 28, 8000})
			p.EndPort = &end
			g.note("port:endPort")
		}
	default:
		name := pickOne(g, portNames)
		p.Port = &intstr.IntOrString{Type: intstr.String, StrVal: name}
		g.note("port:named")
	}
	return p
}

// list generates nil, an empty list, or 1..max elements.
func list[T any](g *gen, what string, max int, elem func() T) []T {
	switch g.pick(5) {
	case 0:
		g.note(what + ":absent")
		return nil
	case 1:
		g.note(what + ":empty")
		return []T{}
	}
	var xs []T
	for n := 1 + g.pick(max); n > 0; n-- {
		xs = append(xs, elem())
	}
	return xs
}

func (g *gen) networkPolicy(i int) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{}
	np.Name = fmt.Sprintf("np-%d", i)
	np.Namespace = pickOne(g, namespaces)
	np.Spec.PodSelector = *g.podSelector()
	switch g.pick(4) {
	case 0:
		g.note("policyTypes:absent")
	case 1:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	np.Spec.Ingress = list(g, "ingress", 3, func() networkingv1.NetworkPolicyIngressRule {
		return networkingv1.NetworkPolicyIngressRule{From: list(g, "from", 2, g.peer), Ports: list(g, "ports", 2, g.port)}
	})
	np.Spec.Egress = list(g, "egress", 3, func() networkingv1.NetworkPolicyEgressRule {
		return networkingv1.NetworkPolicyEgressRule{To: list(g, "to", 2, g.peer), Ports: list(g, "ports", 2, g.port)}
	})
	return np
}

// end is one end of a probed connection, in both engines' terms.
type end struct {
	name  string
	ep    explain.Endpoint
	peer  *matcher.TrafficPeer
	pod   *corev1.Pod
	ip    string
	isPod bool
}

func sortStrings(xs []string) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

// resolvedPortName is the name of the destination pod's container port
// with this number and protocol, as cyclonus's probe resolves it.
func resolvedPortName(pod *corev1.Pod, port explain.PortSpec) string {
	if pod == nil {
		return ""
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if cp.ContainerPort == port.Port && string(proto) == string(port.Protocol) {
				return cp.Name
			}
		}
	}
	return ""
}

func TestAgainstCyclonus(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed)), features: map[string]int{}}
	var cells, disagreements, allowed, denied, policies int
	var report []string
	for c := 0; c < cases; c++ {
		nss, pods := g.world()
		objs := &load.Objects{Namespaces: nss, Pods: pods}
		for i := 1 + g.pick(4); i > 0; i-- {
			objs.NetworkPolicies = append(objs.NetworkPolicies, g.networkPolicy(len(objs.NetworkPolicies)))
		}
		policies += len(objs.NetworkPolicies)
		if c%4 == 0 {
			// Every fourth case goes through manifest text, as tierctl
			// reads it, to cover the parser and its defaults too.
			objs = roundTrip(t, objs)
		}
		objs.Complete()
		built, err := load.Build(objs)
		if err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		ev, err := explain.NewEvaluator(built.Snapshot, built.Inventory)
		if err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		cy := matcher.BuildNetworkPolicies(false, objs.NetworkPolicies)

		nsLabels := map[string]map[string]string{}
		for _, ns := range objs.Namespaces {
			nsLabels[ns.Name] = ns.Labels
		}
		var ends []end
		for _, p := range objs.Pods {
			ref := model.PodRef{Namespace: p.Namespace, Name: p.Name}
			ends = append(ends, end{name: ref.String(), ep: explain.Endpoint{Pod: &ref}, pod: p, ip: p.Status.PodIP, isPod: true,
				peer: &matcher.TrafficPeer{IP: p.Status.PodIP, Internal: &matcher.InternalPeer{
					PodLabels: p.Labels, NamespaceLabels: nsLabels[p.Namespace], Namespace: p.Namespace}}})
		}
		for _, ip := range externals {
			ends = append(ends, end{name: ip, ep: explain.Endpoint{IP: netip.MustParseAddr(ip)}, ip: ip, peer: &matcher.TrafficPeer{IP: ip}})
		}
		for _, port := range probePorts {
			for _, s := range ends {
				for _, d := range ends {
					if s.name == d.name || (!s.isPod && !d.isPod) {
						continue
					}
					cells++
					ours, err := ev.Explain(explain.Query{Src: s.ep, Dst: d.ep, Protocol: port.Protocol, Port: port.Port})
					if err != nil {
						t.Fatalf("case %d: %s -> %s %s: %v", c, s.name, d.name, port, err)
					}
					theirs := cy.IsTrafficAllowed(&matcher.Traffic{
						Source: s.peer, Destination: d.peer, Protocol: corev1.Protocol(port.Protocol),
						ResolvedPort: int(port.Port), ResolvedPortName: resolvedPortName(d.pod, port),
					})
					oursE := ours.Egress.Action == model.ActionAllow
					oursI := ours.Ingress.Action == model.ActionAllow
					if ours.Verdict == explain.VerdictAllow {
						allowed++
					} else {
						denied++
					}
					if oursE != theirs.Egress.IsAllowed() || oursI != theirs.Ingress.IsAllowed() {
						disagreements++
						if len(report) < 3 {
							report = append(report, describe(c, objs.NetworkPolicies, s.name, d.name, port, ours, theirs))
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases, %d NetworkPolicies, %d cells (%d allowed, %d denied), %d disagreements", cases, policies, cells, allowed, denied, disagreements)
	if disagreements > 0 {
		t.Errorf("%d disagreements with cyclonus; first ones:\n%s", disagreements, strings.Join(report, "\n\n"))
	}
	// The corpus must exercise what it claims to, and decide both ways.
	for _, f := range []string{
		"policyTypes:absent", "ingress:absent", "ingress:empty", "egress:empty", "from:empty", "to:absent", "ports:empty",
		"peer:ipBlock", "ipBlock:except", "peer:podSelector", "peer:namespaceSelector", "peer:both",
		"podSelector:empty", "podSelector:matchLabels", "podSelector:In", "podSelector:NotIn", "podSelector:Exists", "podSelector:DoesNotExist",
		"namespaceSelector:empty", "namespaceSelector:NotIn", "namespaceSelector:DoesNotExist",
		"port:protocol:absent", "port:protocol:SCTP", "port:protocolOnly", "port:number", "port:endPort", "port:named",
	} {
		if g.features[f] == 0 {
			t.Errorf("generator never produced %s", f)
		}
	}
	if policies < 2000 || allowed < cells/10 || denied < cells/10 {
		t.Errorf("corpus too weak: %d policies, %d allowed and %d denied of %d cells", policies, allowed, denied, cells)
	}
}

// roundTrip writes objs as one multi-document manifest and reads it back.
func roundTrip(t *testing.T, objs *load.Objects) *load.Objects {
	t.Helper()
	var docs []string
	add := func(apiVersion, kind string, obj any) {
		y, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, fmt.Sprintf("apiVersion: %s\nkind: %s\n%s", apiVersion, kind, y))
	}
	for _, ns := range objs.Namespaces {
		add("v1", "Namespace", ns)
	}
	for _, p := range objs.Pods {
		add("v1", "Pod", p)
	}
	for _, np := range objs.NetworkPolicies {
		add("networking.k8s.io/v1", "NetworkPolicy", np)
	}
	out := &load.Objects{}
	if err := out.Read(strings.NewReader(strings.Join(docs, "---\n")), "generated.yaml"); err != nil {
		t.Fatalf("reading generated manifests: %v", err)
	}
	return out
}

func describe(c int, nps []*networkingv1.NetworkPolicy, src, dst string, port explain.PortSpec, ours *explain.Result, theirs *matcher.AllowedResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "case %d: %s -> %s %s: tierflow egress %s ingress %s; cyclonus egress allowed=%t ingress allowed=%t\n",
		c, src, dst, port, ours.Egress.Action, ours.Ingress.Action, theirs.Egress.IsAllowed(), theirs.Ingress.IsAllowed())
	for _, np := range nps {
		y, _ := yaml.Marshal(np)
		fmt.Fprintf(&b, "---\n%s", y)
	}
	return b.String()
}

// TestNotInMatchesMissingKey covers the case excluded from the comparison
// (excludedCases["NotInOnMissingKey"]): tierflow must follow apimachinery,
// where NotIn matches an object that lacks the key.
func TestNotInMatchesMissingKey(t *testing.T) {
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"front"}}}}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Matches(labels.Set{"app": "web"}) {
		t.Fatal("apimachinery: NotIn should match a missing key")
	}
	ns := &corev1.Namespace{}
	ns.Name = "x"
	pod := func(name, ip string, lbls map[string]string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace, p.Name, p.Labels = "x", name, lbls
		p.Spec.NodeName, p.Status.PodIP = "n1", ip
		return p
	}
	np := &networkingv1.NetworkPolicy{}
	np.Namespace, np.Name = "x", "isolate-not-front"
	np.Spec.PodSelector = *sel
	objs := &load.Objects{Namespaces: []*corev1.Namespace{ns}, NetworkPolicies: []*networkingv1.NetworkPolicy{np},
		Pods: []*corev1.Pod{pod("client", "10.0.0.1", map[string]string{"tier": "front"}), pod("nolabel", "10.0.0.2", map[string]string{"app": "web"})}}
	objs.Complete()
	built, err := load.Build(objs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := explain.Explain(built.Snapshot, built.Inventory, explain.Query{
		Src: explain.Endpoint{Pod: &model.PodRef{Namespace: "x", Name: "client"}}, Dst: explain.Endpoint{Pod: &model.PodRef{Namespace: "x", Name: "nolabel"}},
		Protocol: model.ProtocolTCP, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != explain.VerdictDeny || res.Ingress.Reason != explain.ReasonIsolation {
		t.Errorf("pod without the key is not isolated by a NotIn selector: %+v", res.Ingress)
	}
	_ = excludedCases
}
