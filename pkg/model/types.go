package model

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/types"
)

// Tier is one of the three evaluation stages. Lower values are evaluated first.
type Tier int

const (
	// TierAdmin holds AdminNetworkPolicies and ClusterNetworkPolicies with tier Admin.
	TierAdmin Tier = 1
	// TierNetworkPolicy holds networking.k8s.io/v1 NetworkPolicies.
	TierNetworkPolicy Tier = 2
	// TierBaseline holds the BaselineAdminNetworkPolicy "default" and
	// ClusterNetworkPolicies with tier Baseline.
	TierBaseline Tier = 3
)

func (t Tier) String() string {
	switch t {
	case TierAdmin:
		return "Admin"
	case TierNetworkPolicy:
		return "NetworkPolicy"
	case TierBaseline:
		return "Baseline"
	}
	return "Unknown"
}

// Direction says which end of a connection a rule's applied-to pods are.
type Direction string

const (
	// DirectionIn rules match traffic to the applied-to pods (ingress).
	DirectionIn Direction = "In"
	// DirectionOut rules match traffic from the applied-to pods (egress).
	DirectionOut Direction = "Out"
)

// Action is what a matching rule does with a new connection.
type Action string

const (
	// ActionAllow accepts the connection; in the Admin tier it is final and
	// skips the NetworkPolicy and Baseline tiers. ClusterNetworkPolicy's
	// "Accept" maps here.
	ActionAllow Action = "Allow"
	// ActionDeny drops the connection silently.
	ActionDeny Action = "Deny"
	// ActionPass skips the rest of the policy's tier: from the Admin tier to
	// the NetworkPolicy tier, from the Baseline tier to the default allow.
	ActionPass Action = "Pass"
)

// Protocol is an L4 protocol a port refers to.
type Protocol string

const (
	ProtocolTCP  Protocol = "TCP"
	ProtocolUDP  Protocol = "UDP"
	ProtocolSCTP Protocol = "SCTP"
)

// PolicyKind names the API kind a Policy was computed from.
type PolicyKind string

const (
	KindNetworkPolicy              PolicyKind = "NetworkPolicy"
	KindAdminNetworkPolicy         PolicyKind = "AdminNetworkPolicy"
	KindBaselineAdminNetworkPolicy PolicyKind = "BaselineAdminNetworkPolicy"
	KindClusterNetworkPolicy       PolicyKind = "ClusterNetworkPolicy"
)

// PolicyRef names the API object a Policy was computed from.
type PolicyRef struct {
	Kind      PolicyKind `json:"kind"`
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name"`
	UID       types.UID  `json:"uid,omitempty"`
}

// String renders the reference as KIND/[NAMESPACE/]NAME.
func (r PolicyRef) String() string {
	if r.Namespace == "" {
		return string(r.Kind) + "/" + r.Name
	}
	return string(r.Kind) + "/" + r.Namespace + "/" + r.Name
}

// Meta is what every distributed object carries.
type Meta struct {
	// ID is stable for the life of the object (a policy's is derived from its
	// API object's UID, a group's from its normalized selector).
	ID string `json:"id"`
	// Generation increases whenever the object's content changes.
	Generation int64 `json:"generation"`
	// Span is the sorted set of node names that need this object.
	Span []string `json:"span,omitempty"`
}

// Policy is one API policy object in tierflow's internal form.
type Policy struct {
	Meta
	Source PolicyRef `json:"source"`
	// SourceGeneration is metadata.generation of the API object, reported
	// back in realization status.
	SourceGeneration int64 `json:"sourceGeneration"`
	Tier             Tier  `json:"tier"`
	// Priority orders policies inside the Admin and Baseline tiers: lower
	// numbers are evaluated first. NetworkPolicies have priority 0 (their
	// order does not matter: they are additive).
	Priority int32 `json:"priority"`
	// AppliedToGroups are the IDs of the groups holding the pods this policy
	// applies to (subject pods; NetworkPolicy podSelector).
	AppliedToGroups []string `json:"appliedToGroups"`
	// Isolates lists the directions in which the applied-to pods become
	// isolated (NetworkPolicy tier only): traffic of an isolated pod in that
	// direction that no NetworkPolicy rule allows is dropped.
	Isolates []Direction `json:"isolates,omitempty"`
	// Rules, ingress rules first then egress rules, each in API order.
	Rules []Rule `json:"rules"`
	// Conditions are validation findings the controller reports on the API
	// object's status (or as Events for NetworkPolicy).
	Conditions []Condition `json:"conditions,omitempty"`
}

// Rule is one ingress or egress rule of a policy.
type Rule struct {
	// Index is the rule's position in its direction's list in the API object
	// (0-based): ingress[Index] or egress[Index].
	Index     int       `json:"index"`
	Name      string    `json:"name,omitempty"`
	Direction Direction `json:"direction"`
	Action    Action    `json:"action"`
	// Peer is the other end of the connection: the sources of an In rule,
	// the destinations of an Out rule.
	Peer Peer `json:"peer"`
	// Ports restricts the destination port. Empty means every protocol and
	// port (all IP traffic); a Port with only a Protocol means every port of
	// that protocol.
	Ports []Port `json:"ports,omitempty"`
	// NamedPortGroups are address groups used only to resolve the rule's
	// named ports on destinations matched through IPBlocks (an Out rule of
	// a NetworkPolicy whose `to` is absent or has ipBlocks): the pods that
	// declare a container port with one of the rule's port names. They
	// never widen the peer: a destination must be in Peer first; its named
	// ports are then read from its member entry in these groups. An
	// IPBlock destination in none of them resolves no named port (matches
	// nothing for that port). Additive field: absent means "no resolution
	// through ipBlocks".
	NamedPortGroups []string `json:"namedPortGroups,omitempty"`
}

// Peer is the set of addresses at the other end of a rule. The rule matches
// an address in any AddressGroup or any IPBlock. A Peer with nothing in it
// matches nothing (the fail-closed reading of an Allow rule whose peers
// tierflow cannot represent).
type Peer struct {
	AddressGroups []string  `json:"addressGroups,omitempty"`
	IPBlocks      []IPBlock `json:"ipBlocks,omitempty"`
}

// IPBlock is a CIDR minus its exceptions. "Every address" is 0.0.0.0/0 and ::/0.
type IPBlock struct {
	CIDR   netip.Prefix   `json:"cidr"`
	Except []netip.Prefix `json:"except,omitempty"`
}

// Contains reports whether ip is in the block: in its CIDR and in none of
// its exceptions. A block whose CIDR is invalid contains nothing.
func (b IPBlock) Contains(ip netip.Addr) bool {
	if !b.CIDR.Contains(ip) {
		return false
	}
	for _, x := range b.Except {
		if x.Contains(ip) {
			return false
		}
	}
	return true
}

// Port matches a destination port: a number (Port, with EndPort > Port for a
// range), a named container port (Name), or, with neither, every port of
// Protocol.
type Port struct {
	Protocol Protocol `json:"protocol"`
	Port     int32    `json:"port,omitempty"`
	EndPort  int32    `json:"endPort,omitempty"`
	// Name is a container port name. It resolves per destination pod: for an
	// In rule against the applied-to pod, for an Out rule against the peer
	// pod. A name that resolves on no pod matches nothing.
	//
	// With a Name, Protocol is either set (NetworkPolicy, where it defaults
	// to TCP: the container port must have that protocol) or empty
	// (AdminNetworkPolicy namedPort, ClusterNetworkPolicy
	// destinationNamedPort, which carry no protocol): empty means the named
	// container port's own protocol.
	Name string `json:"name,omitempty"`
}

// NamedPort is a pod's named container port.
type NamedPort struct {
	Name     string   `json:"name"`
	Protocol Protocol `json:"protocol"`
	Port     int32    `json:"port"`
}

// PodRef names a pod.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// GroupMember is a pod (or, in an address group built from a node selector,
// a node) with its addresses.
type GroupMember struct {
	// Pod is set for pod members.
	Pod *PodRef `json:"pod,omitempty"`
	// Node is the pod's node, or the node itself for node members.
	Node string `json:"node"`
	// IPs are the member's addresses (pod IPs, or a node's status addresses).
	// Empty for a pod whose IP is not reported yet: it is already a subject
	// (agents find subjects by port) but, as a peer, matches no address.
	IPs []netip.Addr `json:"ips"`
	// Ports are the pod's named container ports, for named-port resolution.
	Ports []NamedPort `json:"ports,omitempty"`
}

// AppliedToGroup is a set of pods a policy applies to, kept per node so an
// agent receives only its own node's members.
type AppliedToGroup struct {
	Meta
	// Selector describes the group in words, for tooling.
	Selector string `json:"selector"`
	// MembersByNode are the group's pods on each node.
	MembersByNode MembersByNode `json:"membersByNode"`
}

// AddressGroup is a set of addresses a rule's peers resolve to.
type AddressGroup struct {
	Meta
	Selector string        `json:"selector"`
	Members  []GroupMember `json:"members"`
}

// ConditionSeverity says whether a condition means part of a policy is not
// enforced as written.
type ConditionSeverity string

const (
	SeverityWarning ConditionSeverity = "Warning"
	SeverityError   ConditionSeverity = "Error"
)

// Condition is a validation finding on a policy.
type Condition struct {
	// Reason is a CamelCase machine-readable cause, e.g. "SamePriority",
	// "UnsupportedPeer", "InvalidCIDR".
	Reason   string            `json:"reason"`
	Severity ConditionSeverity `json:"severity"`
	Message  string            `json:"message"`
}
