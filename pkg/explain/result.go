package explain

import (
	"net/netip"

	"github.com/tierflow/tierflow/pkg/model"
)

// Verdict is the outcome of a whole connection.
type Verdict string

const (
	VerdictAllow Verdict = "Allow"
	VerdictDeny  Verdict = "Deny"
)

// Reason says why a direction ended the way it did. It is the field to read
// when Policy is null.
type Reason string

const (
	// ReasonRule: the Allow or Deny rule named in Decision.Rule decided.
	ReasonRule Reason = "Rule"
	// ReasonIsolation: the pod is isolated in this direction by the
	// NetworkPolicies in Decision.IsolatedBy and none of their rules allows
	// the connection. Tier NetworkPolicy, action Deny, policy and rule null.
	ReasonIsolation Reason = "Isolation"
	// ReasonDefaultAllow: no rule decided in any tier (or a Baseline-tier
	// Pass rule was taken, see PassedThrough). Tier Baseline, action Allow,
	// policy and rule null.
	ReasonDefaultAllow Reason = "DefaultAllow"
	// ReasonNotAPod: this end of the connection is a bare IP address that is
	// no known pod, so it has no policies of its own. Tier None, action
	// Allow, policy and rule null.
	ReasonNotAPod Reason = "NotAPod"
	// ReasonLoopback: source and destination are the same pod. The
	// connection stays inside the pod (its own loopback), where no policy
	// applies. Tier None, action Allow, policy and rule null, in both
	// directions.
	ReasonLoopback Reason = "Loopback"
)

// TierNone is the tier of a direction whose end is not a pod.
const TierNone = "None"

// PolicyID names the API object a decision came from. Namespace is empty for
// cluster-scoped kinds.
type PolicyID struct {
	Kind      model.PolicyKind `json:"kind"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
}

func (p PolicyID) String() string {
	if p.Namespace == "" {
		return string(p.Kind) + "/" + p.Name
	}
	return string(p.Kind) + "/" + p.Namespace + "/" + p.Name
}

func policyID(p *model.Policy) PolicyID {
	return PolicyID{Kind: p.Source.Kind, Namespace: p.Source.Namespace, Name: p.Source.Name}
}

// RuleID names a rule by its position in its direction's list (ingress[i]
// or egress[i] of the API object) and its name, if it has one.
type RuleID struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
}

// Decision is how one direction of a connection was decided.
type Decision struct {
	// Tier is Admin, NetworkPolicy or Baseline: the tier that decided; None
	// when this end is not a pod.
	Tier string `json:"tier"`
	// Policy decided, or null when no rule did (see Reason).
	Policy *PolicyID `json:"policy"`
	// Rule of Policy that decided, or null.
	Rule *RuleID `json:"rule"`
	// Action is Allow or Deny: what happens to the connection in this
	// direction. A Pass is never final; taken passes are in PassedThrough.
	Action model.Action `json:"action"`
	Reason Reason       `json:"reason"`
	// PassedThrough lists, in order, the policies whose Pass rule was taken
	// on the way (at most one Admin-tier and one Baseline-tier policy).
	PassedThrough []PolicyID `json:"passedThrough"`
	// IsolatedBy lists the NetworkPolicies that isolate the pod in this
	// direction (set whenever the pod is isolated, whether or not a rule
	// then allowed the connection).
	IsolatedBy []PolicyID `json:"isolatedBy,omitempty"`
}

// Result is the explanation of one connection.
type Result struct {
	// Verdict is Allow iff both directions allow.
	Verdict Verdict `json:"verdict"`
	// Egress is evaluated for the source pod.
	Egress Decision `json:"egress"`
	// Ingress is evaluated for the destination pod.
	Ingress Decision `json:"ingress"`
	// SrcIP and DstIP are the addresses evaluated (for dual-stack pods, the
	// family both ends share).
	SrcIP netip.Addr `json:"srcIP"`
	DstIP netip.Addr `json:"dstIP"`
}
