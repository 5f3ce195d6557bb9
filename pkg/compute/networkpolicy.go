package compute

import (
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/tierflow/tierflow/pkg/model"
)

// isolation is the directions a NetworkPolicy isolates its pods in (a
// byte in the compiled policy: the list took 24 bytes of its header and
// an allocation of every policy).
type isolation uint8

const (
	isolatesNone isolation = iota
	isolatesIn
	isolatesOut
	isolatesBoth
)

// isolationOf is the isolation of a NetworkPolicy of the given types.
func isolationOf(ingress, egress bool) isolation {
	switch {
	case ingress && egress:
		return isolatesBoth
	case ingress:
		return isolatesIn
	case egress:
		return isolatesOut
	}
	return isolatesNone
}

// isolationLists are the Isolates lists of the isolations, shared: model
// objects are immutable.
var isolationLists = [...][]model.Direction{
	isolatesNone: nil,
	isolatesIn:   {model.DirectionIn},
	isolatesOut:  {model.DirectionOut},
	isolatesBoth: {model.DirectionIn, model.DirectionOut},
}

// directions is i as the model's Isolates list.
func (i isolation) directions() []model.Direction { return isolationLists[i] }

// compileNetworkPolicy translates a NetworkPolicy (tier NetworkPolicy, all
// rules Allow).
func compileNetworkPolicy(np *networkingv1.NetworkPolicy) *compiledPolicy {
	ref := model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: np.Namespace, Name: np.Name, UID: np.UID}
	k := newCompiler(ref, np.Generation)
	c := k.c
	c.tier = model.TierNetworkPolicy

	// A policy whose subject cannot be read still isolates: it applies to
	// every pod of its namespace and its rules allow nothing (fail closed).
	broken := false
	podSel, err := selector(&np.Spec.PodSelector)
	if err != nil {
		k.errorf(ReasonInvalidSubject, "spec.podSelector: %v; the policy isolates every pod of namespace %s and allows nothing", err, np.Namespace)
		podSel = everything
		broken = true
	}
	c.subject = podGroupInNamespace(np.Namespace, podSel)

	ingress, egress := npPolicyTypes(k, np)
	c.isolates = isolationOf(ingress, egress)
	if !ingress && len(np.Spec.Ingress) > 0 {
		k.warnf(ReasonRulesIgnored, "spec.ingress has %d rules but policyTypes does not include Ingress; they are ignored", len(np.Spec.Ingress))
	}
	if !egress && len(np.Spec.Egress) > 0 {
		k.warnf(ReasonRulesIgnored, "spec.egress has %d rules but policyTypes does not include Egress; they are ignored", len(np.Spec.Egress))
	}
	if ingress {
		for i, r := range np.Spec.Ingress {
			rb := &ruleBuilder{rule: model.Rule{Index: i, Direction: model.DirectionIn, Action: model.ActionAllow}, problem: broken}
			npPeers(k, rb, np.Namespace, fieldPath{"spec.ingress", i, ".from"}, r.From)
			npPorts(k, rb, fieldPath{"spec.ingress", i, ".ports"}, r.Ports)
			k.finish(rb)
		}
	}
	if egress {
		for i, r := range np.Spec.Egress {
			rb := &ruleBuilder{rule: model.Rule{Index: i, Direction: model.DirectionOut, Action: model.ActionAllow}, problem: broken,
				namedOnBlocks: true}
			npPeers(k, rb, np.Namespace, fieldPath{"spec.egress", i, ".to"}, r.To)
			npPorts(k, rb, fieldPath{"spec.egress", i, ".ports"}, r.Ports)
			k.finish(rb)
		}
	}
	return c
}

// npPolicyTypes applies policyTypes' defaulting: Ingress always, Egress
// when egress rules exist. An unknown type isolates both directions (fail
// closed).
func npPolicyTypes(k *compiler, np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for i, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		default:
			k.errorf(ReasonInvalidPolicyType, "spec.policyTypes[%d]: unknown type %q; the policy isolates both directions", i, t)
			return true, true
		}
	}
	return ingress, egress
}

func npPeers(k *compiler, rb *ruleBuilder, ns string, path fieldPath, peers []networkingv1.NetworkPolicyPeer) {
	if len(peers) == 0 {
		// Empty or absent: every source / destination.
		rb.rule.Peer.IPBlocks = allAddresses()
		return
	}
	for j, p := range peers {
		where := itemPath{path, j}
		switch {
		case p.IPBlock != nil && (p.PodSelector != nil || p.NamespaceSelector != nil):
			k.errorf(ReasonInvalidPeer, "%s: ipBlock cannot be combined with podSelector or namespaceSelector; the rule matches nothing", where)
			rb.problem = true
		case p.IPBlock != nil:
			b, err := npIPBlock(p.IPBlock)
			if err != nil {
				k.errorf(ReasonInvalidCIDR, "%s.ipBlock: %v; the rule matches nothing", where, err)
				rb.problem = true
				continue
			}
			rb.rule.Peer.IPBlocks = append(rb.rule.Peer.IPBlocks, b)
		case p.PodSelector == nil && p.NamespaceSelector == nil:
			k.errorf(ReasonInvalidPeer, "%s: no field set; the rule matches nothing", where)
			rb.problem = true
		default:
			podSel := everything
			if p.PodSelector != nil {
				s, err := selector(p.PodSelector)
				if err != nil {
					k.errorf(ReasonInvalidSelector, "%s.podSelector: %v; the rule matches nothing", where, err)
					rb.problem = true
					continue
				}
				podSel = s
			}
			if p.NamespaceSelector == nil {
				rb.addGroup(podGroupInNamespace(ns, podSel))
				continue
			}
			nsSel, err := selector(p.NamespaceSelector)
			if err != nil {
				k.errorf(ReasonInvalidSelector, "%s.namespaceSelector: %v; the rule matches nothing", where, err)
				rb.problem = true
				continue
			}
			rb.addGroup(podGroupInNamespaces(nsSel, podSel))
		}
	}
}

func npIPBlock(b *networkingv1.IPBlock) (model.IPBlock, error) {
	cidr, err := parseCIDR(b.CIDR)
	if err != nil {
		return model.IPBlock{}, fmt.Errorf("cidr %q: %v", b.CIDR, err)
	}
	out := model.IPBlock{CIDR: cidr}
	for _, x := range b.Except {
		ex, err := parseCIDR(x)
		if err != nil {
			return model.IPBlock{}, fmt.Errorf("except %q: %v", x, err)
		}
		if !within(ex, cidr) {
			return model.IPBlock{}, fmt.Errorf("except %q is not inside cidr %q", x, b.CIDR)
		}
		out.Except = append(out.Except, ex)
	}
	return out, nil
}

// within reports whether inner is a subnet of outer.
func within(inner, outer netip.Prefix) bool {
	return inner.Addr().Is4() == outer.Addr().Is4() && inner.Bits() >= outer.Bits() && outer.Contains(inner.Addr())
}

func npPorts(k *compiler, rb *ruleBuilder, path fieldPath, ports []networkingv1.NetworkPolicyPort) {
	for j, p := range ports {
		var proto *string
		if p.Protocol != nil {
			s := string(*p.Protocol)
			proto = &s
		}
		mp, reason, err := npPort(proto, p.Port, p.EndPort)
		if err != nil {
			k.errorf(reason, "%s[%d]: %v; the rule matches nothing", path, j, err)
			rb.problem = true
			continue
		}
		rb.rule.Ports = append(rb.rule.Ports, mp)
	}
}
