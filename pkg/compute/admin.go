package compute

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/model"
)

// The three cluster-scoped kinds share one shape: a subject (namespaces or
// pods), ordered Allow/Deny/Pass rules, peers (namespaces, pods, nodes,
// networks, domain names) and ports. Each kind is first converted to the
// neutral forms below, then compiled by the same code.

type adminPods struct{ ns, pods metav1.LabelSelector }

type adminPeer struct {
	namespaces  *metav1.LabelSelector
	pods        *adminPods
	nodes       *metav1.LabelSelector
	networks    []string
	hasNetworks bool
	domainNames bool
}

func (p adminPeer) fieldsSet() int {
	n := 0
	for _, set := range []bool{p.namespaces != nil, p.pods != nil, p.nodes != nil, p.hasNetworks, p.domainNames} {
		if set {
			n++
		}
	}
	return n
}

// adminPort is one port entry, already translated or with the reason it
// cannot be.
type adminPort struct {
	port   model.Port
	reason string
	err    error
	// warning, if set, is a finding that does not change enforcement.
	warning string
}

type adminRule struct {
	name      string
	action    model.Action
	rawAction string
	actionOK  bool
	peers     []adminPeer
	ports     []adminPort
	portsSet  bool // nil ports: every port
}

type adminSpec struct {
	tier       model.Tier
	priority   int32
	subjectNS  *metav1.LabelSelector
	subjectPod *adminPods
	ingress    []adminRule
	egress     []adminRule
	maxRules   int
	broken     bool // set by the kind's own checks (tier, priority)
}

func compileAdmin(k *compiler, s adminSpec) {
	c := k.c
	c.tier, c.priority, c.prioritized = s.tier, s.priority, true
	c.subject, s.broken = adminSubject(k, s.subjectNS, s.subjectPod, s.broken)
	for field, rules := range [2][]adminRule{s.ingress, s.egress} {
		if len(rules) > s.maxRules {
			k.warnf(ReasonTooManyRules, "spec.%s has %d rules, more than the API's %d; tierflow enforces all of them",
				[2]string{"ingress", "egress"}[field], len(rules), s.maxRules)
		}
	}
	for i, r := range s.ingress {
		compileAdminRule(k, r, i, model.DirectionIn, s.broken)
	}
	for i, r := range s.egress {
		compileAdminRule(k, r, i, model.DirectionOut, s.broken)
	}
}

// adminSubject translates "exactly one of namespaces, pods". A subject that
// cannot be read selects every pod and the policy's rules fail closed.
func adminSubject(k *compiler, nsSel *metav1.LabelSelector, pods *adminPods, broken bool) (groupSpec, bool) {
	allPods := podGroupInNamespaces(everything, everything)
	const consequence = "the policy applies to every pod and each of its rules fails closed"
	switch {
	case nsSel != nil && pods != nil:
		k.errorf(ReasonInvalidSubject, "spec.subject: both namespaces and pods are set (exactly one must be); %s", consequence)
		return allPods, true
	case nsSel != nil:
		s, err := selector(nsSel)
		if err != nil {
			k.errorf(ReasonInvalidSubject, "spec.subject.namespaces: %v; %s", err, consequence)
			return allPods, true
		}
		return podGroupInNamespaces(s, everything), broken
	case pods != nil:
		ns, err := selector(&pods.ns)
		if err != nil {
			k.errorf(ReasonInvalidSubject, "spec.subject.pods.namespaceSelector: %v; %s", err, consequence)
			return allPods, true
		}
		ps, err := selector(&pods.pods)
		if err != nil {
			k.errorf(ReasonInvalidSubject, "spec.subject.pods.podSelector: %v; %s", err, consequence)
			return allPods, true
		}
		return podGroupInNamespaces(ns, ps), broken
	}
	k.errorf(ReasonInvalidSubject, "spec.subject: no field set (exactly one of namespaces, pods must be); %s", consequence)
	return allPods, true
}

func compileAdminRule(k *compiler, r adminRule, i int, dir model.Direction, broken bool) {
	field, peerField := "ingress", "from"
	if dir == model.DirectionOut {
		field, peerField = "egress", "to"
	}
	path := fieldPath{"spec." + field, i, ""}
	rb := &ruleBuilder{rule: model.Rule{Index: i, Name: r.name, Direction: dir, Action: r.action}, problem: broken}
	if !r.actionOK {
		k.errorf(ReasonUnknownAction, "%s.action: unknown action %q; the rule denies all traffic", path, r.rawAction)
		rb.rule.Action = model.ActionDeny
		rb.problem = true
	}
	failure := "the rule matches nothing"
	if rb.rule.Action != model.ActionAllow {
		failure = "the rule denies all traffic"
	}
	if len(r.peers) == 0 {
		k.errorf(ReasonInvalidPeer, "%s.%s: empty (at least one peer is required); %s", path, peerField, failure)
		rb.problem = true
	}
	nonPodPeer := false
	for j, p := range r.peers {
		where := itemPath{fieldPath{path.field, i, "." + peerField}, j}
		switch n := p.fieldsSet(); {
		case n == 0:
			k.errorf(ReasonInvalidPeer, "%s: no field set (the CRD may be newer than tierflow); %s", where, failure)
			rb.problem = true
			continue
		case n > 1:
			k.errorf(ReasonInvalidPeer, "%s: %d fields set (exactly one must be); %s", where, n, failure)
			rb.problem = true
			continue
		}
		switch {
		case p.domainNames:
			k.errorf(ReasonUnsupportedPeer, "%s.domainNames: not implemented by tierflow; %s", where, failure)
			rb.problem = true
		case p.namespaces != nil:
			s, err := selector(p.namespaces)
			if err != nil {
				k.errorf(ReasonInvalidSelector, "%s.namespaces: %v; %s", where, err, failure)
				rb.problem = true
				continue
			}
			rb.addGroup(podGroupInNamespaces(s, everything))
		case p.pods != nil:
			ns, err := selector(&p.pods.ns)
			if err != nil {
				k.errorf(ReasonInvalidSelector, "%s.pods.namespaceSelector: %v; %s", where, err, failure)
				rb.problem = true
				continue
			}
			ps, err := selector(&p.pods.pods)
			if err != nil {
				k.errorf(ReasonInvalidSelector, "%s.pods.podSelector: %v; %s", where, err, failure)
				rb.problem = true
				continue
			}
			rb.addGroup(podGroupInNamespaces(ns, ps))
		case p.nodes != nil:
			nonPodPeer = true
			s, err := selector(p.nodes)
			if err != nil {
				k.errorf(ReasonInvalidSelector, "%s.nodes: %v; %s", where, err, failure)
				rb.problem = true
				continue
			}
			rb.addGroup(nodeGroup(s))
		case p.hasNetworks:
			nonPodPeer = true
			if len(p.networks) == 0 {
				k.errorf(ReasonInvalidCIDR, "%s.networks: empty list; %s", where, failure)
				rb.problem = true
			}
			for m, n := range p.networks {
				cidr, err := parseCIDR(n)
				if err != nil {
					k.errorf(ReasonInvalidCIDR, "%s.networks[%d]: %q: %v; %s", where, m, n, err, failure)
					rb.problem = true
					continue
				}
				rb.rule.Peer.IPBlocks = append(rb.rule.Peer.IPBlocks, model.IPBlock{CIDR: cidr})
			}
		}
	}
	if r.portsSet && len(r.ports) == 0 {
		k.errorf(ReasonInvalidPort, "%s: ports/protocols set but empty (at least one entry is required); %s", path, failure)
		rb.problem = true
	}
	named := false
	for j, p := range r.ports {
		if p.err != nil {
			k.errorf(p.reason, "%s ports[%d]: %v; %s", path, j, p.err, failure)
			rb.problem = true
			continue
		}
		if p.warning != "" {
			k.warnf(p.reason, "%s ports[%d]: %s", path, j, p.warning)
		}
		named = named || p.port.Name != ""
		rb.rule.Ports = append(rb.rule.Ports, p.port)
	}
	if named && nonPodPeer && !rb.problem {
		k.warnf(ReasonNamedPortNoPods, "%s: a named port never matches nodes or networks peers (they have no container ports)", path)
	}
	k.finish(rb)
}

// checkPriority clamps a priority outside 0–1000 (CRD validation may be
// off); the policy's rules then fail closed.
func checkPriority(k *compiler, p int32) (int32, bool) {
	switch {
	case p < 0:
		k.errorf(ReasonInvalidPriority, "spec.priority %d is below 0; tierflow uses 0 and every rule fails closed", p)
		return 0, true
	case p > 1000:
		k.errorf(ReasonInvalidPriority, "spec.priority %d is above 1000; tierflow uses 1000 and every rule fails closed", p)
		return 1000, true
	}
	return p, false
}

// --- AdminNetworkPolicy and BaselineAdminNetworkPolicy (v1alpha1) ---

func v1a1Pods(p *v1alpha1.NamespacedPod) *adminPods {
	if p == nil {
		return nil
	}
	return &adminPods{ns: p.NamespaceSelector, pods: p.PodSelector}
}

func v1a1Networks(n []v1alpha1.CIDR) []string {
	out := make([]string, len(n))
	for i, c := range n {
		out[i] = string(c)
	}
	return out
}

func v1a1Ports(ports *[]v1alpha1.AdminNetworkPolicyPort) ([]adminPort, bool) {
	if ports == nil {
		return nil, false
	}
	out := make([]adminPort, 0, len(*ports))
	for _, p := range *ports {
		out = append(out, v1a1Port(p))
	}
	return out, true
}

func v1a1Port(p v1alpha1.AdminNetworkPolicyPort) adminPort {
	n := 0
	for _, set := range []bool{p.PortNumber != nil, p.NamedPort != nil, p.PortRange != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("%d of portNumber, namedPort, portRange set (exactly one must be)", n)}
	}
	switch {
	case p.PortNumber != nil:
		proto, ok := validProtocol(string(p.PortNumber.Protocol))
		if !ok {
			return adminPort{reason: ReasonUnknownProtocol, err: fmt.Errorf("portNumber.protocol %q unknown (want TCP, UDP or SCTP)", p.PortNumber.Protocol)}
		}
		if !validPortNumber(p.PortNumber.Port) {
			return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("portNumber.port %d out of range 1-65535", p.PortNumber.Port)}
		}
		return adminPort{port: model.Port{Protocol: proto, Port: p.PortNumber.Port}}
	case p.PortRange != nil:
		proto, ok := validProtocol(string(p.PortRange.Protocol))
		if !ok {
			return adminPort{reason: ReasonUnknownProtocol, err: fmt.Errorf("portRange.protocol %q unknown (want TCP, UDP or SCTP)", p.PortRange.Protocol)}
		}
		return portRange(proto, p.PortRange.Start, p.PortRange.End)
	}
	if *p.NamedPort == "" {
		return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("namedPort is empty")}
	}
	// No protocol: the named container port's own protocol applies.
	return adminPort{port: model.Port{Name: *p.NamedPort}}
}

func portRange(proto model.Protocol, start, end int32) adminPort {
	if !validPortNumber(start) || !validPortNumber(end) || start >= end {
		return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("port range %d-%d invalid (need 1 <= start < end <= 65535)", start, end)}
	}
	return adminPort{port: model.Port{Protocol: proto, Port: start, EndPort: end}}
}

func anpAction(a string) (model.Action, bool) {
	switch v1alpha1.AdminNetworkPolicyRuleAction(a) {
	case v1alpha1.AdminNetworkPolicyRuleActionAllow:
		return model.ActionAllow, true
	case v1alpha1.AdminNetworkPolicyRuleActionDeny:
		return model.ActionDeny, true
	case v1alpha1.AdminNetworkPolicyRuleActionPass:
		return model.ActionPass, true
	}
	return model.ActionDeny, false
}

func banpAction(a string) (model.Action, bool) {
	switch v1alpha1.BaselineAdminNetworkPolicyRuleAction(a) {
	case v1alpha1.BaselineAdminNetworkPolicyRuleActionAllow:
		return model.ActionAllow, true
	case v1alpha1.BaselineAdminNetworkPolicyRuleActionDeny:
		return model.ActionDeny, true
	}
	return model.ActionDeny, false
}

func v1a1IngressRule(name, action string, from []v1alpha1.AdminNetworkPolicyIngressPeer, ports *[]v1alpha1.AdminNetworkPolicyPort, act func(string) (model.Action, bool)) adminRule {
	r := adminRule{name: name, rawAction: action}
	r.action, r.actionOK = act(action)
	for _, p := range from {
		r.peers = append(r.peers, adminPeer{namespaces: p.Namespaces, pods: v1a1Pods(p.Pods)})
	}
	r.ports, r.portsSet = v1a1Ports(ports)
	return r
}

func compileAdminNetworkPolicy(anp *v1alpha1.AdminNetworkPolicy) *compiledPolicy {
	ref := model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: anp.Name, UID: anp.UID}
	k := newCompiler(ref, anp.Generation)
	s := adminSpec{tier: model.TierAdmin, subjectNS: anp.Spec.Subject.Namespaces, subjectPod: v1a1Pods(anp.Spec.Subject.Pods), maxRules: 100}
	s.priority, s.broken = checkPriority(k, anp.Spec.Priority)
	for _, r := range anp.Spec.Ingress {
		s.ingress = append(s.ingress, v1a1IngressRule(r.Name, string(r.Action), r.From, r.Ports, anpAction))
	}
	for _, r := range anp.Spec.Egress {
		ar := adminRule{name: r.Name, rawAction: string(r.Action)}
		ar.action, ar.actionOK = anpAction(string(r.Action))
		for _, p := range r.To {
			ar.peers = append(ar.peers, adminPeer{namespaces: p.Namespaces, pods: v1a1Pods(p.Pods), nodes: p.Nodes,
				networks: v1a1Networks(p.Networks), hasNetworks: p.Networks != nil, domainNames: p.DomainNames != nil})
		}
		ar.ports, ar.portsSet = v1a1Ports(r.Ports)
		s.egress = append(s.egress, ar)
	}
	compileAdmin(k, s)
	return k.c
}

// BaselineName is the only BaselineAdminNetworkPolicy name that takes effect.
const BaselineName = "default"

// compileBaselineAdminNetworkPolicy translates the singleton BANP; any
// other name gives no policy and a condition saying why.
func compileBaselineAdminNetworkPolicy(banp *v1alpha1.BaselineAdminNetworkPolicy) (*compiledPolicy, []model.Condition) {
	if banp.Name != BaselineName {
		return nil, []model.Condition{{
			Reason:   ReasonNotDefault,
			Severity: model.SeverityError,
			Message:  fmt.Sprintf("only the BaselineAdminNetworkPolicy named %q takes effect; %q is ignored", BaselineName, banp.Name),
		}}
	}
	ref := model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: banp.Name, UID: banp.UID}
	k := newCompiler(ref, banp.Generation)
	s := adminSpec{tier: model.TierBaseline, subjectNS: banp.Spec.Subject.Namespaces, subjectPod: v1a1Pods(banp.Spec.Subject.Pods), maxRules: 100}
	for _, r := range banp.Spec.Ingress {
		s.ingress = append(s.ingress, v1a1IngressRule(r.Name, string(r.Action), r.From, r.Ports, banpAction))
	}
	for _, r := range banp.Spec.Egress {
		ar := adminRule{name: r.Name, rawAction: string(r.Action)}
		ar.action, ar.actionOK = banpAction(string(r.Action))
		for _, p := range r.To {
			ar.peers = append(ar.peers, adminPeer{namespaces: p.Namespaces, pods: v1a1Pods(p.Pods), nodes: p.Nodes,
				networks: v1a1Networks(p.Networks), hasNetworks: p.Networks != nil})
		}
		ar.ports, ar.portsSet = v1a1Ports(r.Ports)
		s.egress = append(s.egress, ar)
	}
	compileAdmin(k, s)
	// The BANP has no priority: it is not part of same-priority checks.
	k.c.prioritized = false
	return k.c, nil
}

// --- ClusterNetworkPolicy (v1alpha2) ---

func v1a2Pods(p *v1alpha2.NamespacedPod) *adminPods {
	if p == nil {
		return nil
	}
	return &adminPods{ns: p.NamespaceSelector, pods: p.PodSelector}
}

func cnpAction(a string) (model.Action, bool) {
	switch v1alpha2.ClusterNetworkPolicyRuleAction(a) {
	case v1alpha2.ClusterNetworkPolicyRuleActionAccept:
		return model.ActionAllow, true
	case v1alpha2.ClusterNetworkPolicyRuleActionDeny:
		return model.ActionDeny, true
	case v1alpha2.ClusterNetworkPolicyRuleActionPass:
		return model.ActionPass, true
	}
	return model.ActionDeny, false
}

func cnpProtocols(ps []v1alpha2.ClusterNetworkPolicyProtocol) ([]adminPort, bool) {
	if ps == nil {
		return nil, false
	}
	out := make([]adminPort, 0, len(ps))
	for _, p := range ps {
		out = append(out, cnpProtocol(p))
	}
	return out, true
}

func cnpProtocol(p v1alpha2.ClusterNetworkPolicyProtocol) adminPort {
	n := 0
	var proto model.Protocol
	var port *v1alpha2.Port
	if p.TCP != nil {
		n, proto, port = n+1, model.ProtocolTCP, p.TCP.DestinationPort
	}
	if p.UDP != nil {
		n, proto, port = n+1, model.ProtocolUDP, p.UDP.DestinationPort
	}
	if p.SCTP != nil {
		n, proto, port = n+1, model.ProtocolSCTP, p.SCTP.DestinationPort
	}
	if p.DestinationNamedPort != "" {
		n++
	}
	if n != 1 {
		return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("%d of tcp, udp, sctp, destinationNamedPort set (exactly one must be)", n)}
	}
	if p.DestinationNamedPort != "" {
		return adminPort{port: model.Port{Name: p.DestinationNamedPort}}
	}
	if port == nil {
		// The v0.2.0 CRD requires destinationPort (minProperties 1), but
		// the API overview says "If DestinationPort is omitted, all ports
		// for the specified protocol match": that is what it means, and
		// reading it so never widens the rule beyond the protocol written.
		return adminPort{port: model.Port{Protocol: proto}, reason: ReasonPortOmitted,
			warning: fmt.Sprintf("%s has no destinationPort (the CRD requires one); tierflow matches every %s port, as the API overview describes", strings.ToLower(string(proto)), proto)}
	}
	switch {
	case port.Number != 0 && port.Range != nil, port.Number == 0 && port.Range == nil:
		return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("%s.destinationPort: exactly one of number, range must be set", proto)}
	case port.Range != nil:
		return portRange(proto, port.Range.Start, port.Range.End)
	}
	if !validPortNumber(port.Number) {
		return adminPort{reason: ReasonInvalidPort, err: fmt.Errorf("%s.destinationPort.number %d out of range 1-65535", proto, port.Number)}
	}
	return adminPort{port: model.Port{Protocol: proto, Port: port.Number}}
}

func compileClusterNetworkPolicy(cnp *v1alpha2.ClusterNetworkPolicy) *compiledPolicy {
	ref := model.PolicyRef{Kind: model.KindClusterNetworkPolicy, Name: cnp.Name, UID: cnp.UID}
	k := newCompiler(ref, cnp.Generation)
	s := adminSpec{subjectNS: cnp.Spec.Subject.Namespaces, subjectPod: v1a2Pods(cnp.Spec.Subject.Pods), maxRules: 25}
	switch cnp.Spec.Tier {
	case v1alpha2.AdminTier:
		s.tier = model.TierAdmin
	case v1alpha2.BaselineTier:
		s.tier = model.TierBaseline
	default:
		k.errorf(ReasonUnknownTier, "spec.tier %q unknown (want Admin or Baseline); tierflow puts the policy in the Admin tier and every rule fails closed", cnp.Spec.Tier)
		s.tier, s.broken = model.TierAdmin, true
	}
	prio, bad := checkPriority(k, cnp.Spec.Priority)
	s.priority, s.broken = prio, s.broken || bad
	for _, r := range cnp.Spec.Ingress {
		ar := adminRule{name: r.Name, rawAction: string(r.Action)}
		ar.action, ar.actionOK = cnpAction(string(r.Action))
		for _, p := range r.From {
			ar.peers = append(ar.peers, adminPeer{namespaces: p.Namespaces, pods: v1a2Pods(p.Pods)})
		}
		ar.ports, ar.portsSet = cnpProtocols(r.Protocols)
		s.ingress = append(s.ingress, ar)
	}
	for _, r := range cnp.Spec.Egress {
		ar := adminRule{name: r.Name, rawAction: string(r.Action)}
		ar.action, ar.actionOK = cnpAction(string(r.Action))
		for _, p := range r.To {
			nets := make([]string, len(p.Networks))
			for i, n := range p.Networks {
				nets[i] = string(n)
			}
			ar.peers = append(ar.peers, adminPeer{namespaces: p.Namespaces, pods: v1a2Pods(p.Pods), nodes: p.Nodes,
				networks: nets, hasNetworks: p.Networks != nil, domainNames: p.DomainNames != nil})
		}
		ar.ports, ar.portsSet = cnpProtocols(r.Protocols)
		s.egress = append(s.egress, ar)
	}
	compileAdmin(k, s)
	return k.c
}
