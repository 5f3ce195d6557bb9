package compute

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tierflow/tierflow/pkg/model"
)

// Condition reasons.
const (
	ReasonInvalidSelector   = "InvalidSelector"
	ReasonInvalidSubject    = "InvalidSubject"
	ReasonInvalidPeer       = "InvalidPeer"
	ReasonUnsupportedPeer   = "UnsupportedPeer"
	ReasonInvalidCIDR       = "InvalidCIDR"
	ReasonInvalidPort       = "InvalidPort"
	ReasonUnknownProtocol   = "UnknownProtocol"
	ReasonUnknownAction     = "UnknownAction"
	ReasonUnknownTier       = "UnknownTier"
	ReasonInvalidPriority   = "InvalidPriority"
	ReasonInvalidPolicyType = "InvalidPolicyType"
	ReasonRulesIgnored      = "RulesIgnored"
	ReasonTooManyRules      = "TooManyRules"
	ReasonNamedPortNoPods   = "NamedPortWithoutPods"
	ReasonNotDefault        = "NotDefaultBaseline"
	ReasonSamePriority      = "SamePriority"
	ReasonPortOmitted       = "DestinationPortOmitted"
)

// allAddresses is "every address": the peer of an NP rule with no from/to,
// and of a fail-closed Deny rule.
func allAddresses() []model.IPBlock {
	return []model.IPBlock{
		{CIDR: netip.MustParsePrefix("0.0.0.0/0")},
		{CIDR: netip.MustParsePrefix("::/0")},
	}
}

// compiledPolicy is an API policy object translated to the model, before
// group membership and spans: everything that depends only on the object.
type compiledPolicy struct {
	ref       model.PolicyRef
	id        string
	sourceGen int64
	tier      model.Tier
	priority  int32
	// prioritized policies take part in same-priority warnings.
	prioritized bool
	isolates    isolation
	subject     groupSpec
	rules       []model.Rule
	// peers are the groups the rules' AddressGroups refer to, one per ID.
	peers []groupSpec
	conds []model.Condition
}

// sameAs reports whether two compilations give the same model content;
// selectors are compared by their normalized keys.
func (c *compiledPolicy) sameAs(o *compiledPolicy) bool {
	if c.ref != o.ref || c.id != o.id || c.sourceGen != o.sourceGen || c.tier != o.tier ||
		c.priority != o.priority || c.prioritized != o.prioritized || c.subject.key != o.subject.key ||
		len(c.peers) != len(o.peers) {
		return false
	}
	for i := range c.peers {
		if c.peers[i].key != o.peers[i].key {
			return false
		}
	}
	return c.isolates == o.isolates && reflect.DeepEqual(c.rules, o.rules) &&
		reflect.DeepEqual(c.conds, o.conds)
}

// policyID is the stable ID of a policy: its UID, or KIND/[NS/]NAME for
// objects without one (offline files).
func policyID(r model.PolicyRef) string {
	if r.UID != "" {
		return string(r.UID)
	}
	return r.String()
}

// compiler collects a policy's rules, peer groups and conditions.
type compiler struct {
	c *compiledPolicy
	// peerKeys indexes c.peers once there are many (most policies have a
	// handful, where a scan is cheaper than a map).
	peerKeys map[string]bool
}

func newCompiler(ref model.PolicyRef, sourceGen int64) *compiler {
	return &compiler{c: &compiledPolicy{ref: ref, id: policyID(ref), sourceGen: sourceGen}}
}

func (k *compiler) cond(sev model.ConditionSeverity, reason, format string, args ...any) {
	k.c.conds = append(k.c.conds, model.Condition{Reason: reason, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

func (k *compiler) errorf(reason, format string, args ...any) {
	k.cond(model.SeverityError, reason, format, args...)
}

func (k *compiler) warnf(reason, format string, args ...any) {
	k.cond(model.SeverityWarning, reason, format, args...)
}

// ruleBuilder accumulates one rule; the first problem found makes the rule
// fail closed.
type ruleBuilder struct {
	rule    model.Rule
	peers   []groupSpec
	problem bool
	// namedOnBlocks: the rule's named ports resolve on destination pods
	// inside its ipBlocks (NetworkPolicy egress, where an ipBlock, or an
	// absent `to`, still selects pods). AdminNetworkPolicy namedPort and
	// ClusterNetworkPolicy destinationNamedPort cannot be used with
	// networks peers (API text), so theirs resolve on pod peers only.
	namedOnBlocks bool
}

func (r *ruleBuilder) addGroup(g groupSpec) {
	id := groupID("ag", g.key)
	for _, have := range r.rule.Peer.AddressGroups {
		if have == id {
			return
		}
	}
	r.rule.Peer.AddressGroups = append(r.rule.Peer.AddressGroups, id)
	r.peers = append(r.peers, g)
}

// finish appends the rule. A rule with a problem fails closed, as the
// policy API says: an Allow rule matches nothing (empty peer), a Deny or
// Pass rule becomes "deny all" (every address, every port).
func (k *compiler) finish(r *ruleBuilder) {
	if r.problem {
		r.peers = nil
		r.rule.Ports = nil
		if r.rule.Action == model.ActionAllow {
			r.rule.Peer = model.Peer{}
		} else {
			r.rule.Action = model.ActionDeny
			r.rule.Peer = model.Peer{IPBlocks: allAddresses()}
		}
	}
	if r.namedOnBlocks && len(r.rule.Peer.IPBlocks) > 0 {
		for _, p := range r.rule.Ports {
			if p.Name == "" {
				continue
			}
			g := namedPortGroup(p.Name)
			id := groupID("ag", g.key)
			if !slices.Contains(r.rule.NamedPortGroups, id) {
				r.rule.NamedPortGroups = append(r.rule.NamedPortGroups, id)
				r.peers = append(r.peers, g)
			}
		}
	}
	for _, g := range r.peers {
		k.addPeer(g)
	}
	if len(r.rule.Ports) == 1 {
		r.rule.Ports = onePortLists.list(r.rule.Ports[0])
	}
	k.c.rules = append(k.c.rules, r.rule)
}

// onePortLists are the port lists of rules with one port, shared: most
// rules list one port, and a few (TCP 80, TCP 443) recur across
// thousands of policies; compiled rules and the model objects made of
// them are immutable, so many rules may hold one list (each took 48
// bytes of its own).
var onePortLists = newOneItemLists[model.Port]()

// oneItemLists shares immutable one-item lists, one per item value.
// Bounded: when full it starts over.
type oneItemLists[T comparable] struct {
	mu sync.Mutex
	m  map[T][]T
}

const oneItemListsSize = 1024

func newOneItemLists[T comparable]() *oneItemLists[T] {
	return &oneItemLists[T]{m: map[T][]T{}}
}

// list is the shared list of the one item v (never modify it).
func (o *oneItemLists[T]) list(v T) []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.m[v]; ok {
		return l
	}
	if len(o.m) >= oneItemListsSize {
		clear(o.m)
	}
	l := []T{v}
	o.m[v] = l
	return l
}

func (k *compiler) addPeer(g groupSpec) {
	if k.peerKeys == nil && len(k.c.peers) >= 16 {
		k.peerKeys = map[string]bool{}
		for _, h := range k.c.peers {
			k.peerKeys[h.key] = true
		}
	}
	if k.peerKeys != nil {
		if !k.peerKeys[g.key] {
			k.peerKeys[g.key] = true
			k.c.peers = append(k.c.peers, g)
		}
		return
	}
	if !slices.ContainsFunc(k.c.peers, func(h groupSpec) bool { return h.key == g.key }) {
		k.c.peers = append(k.c.peers, g)
	}
}

// fieldPath names a field of a rule, FIELD[RULE]SUFFIX (e.g.
// spec.ingress[2].from), and itemPath one entry of a list field. Both are
// rendered only when a finding is reported: formatting the path of every
// rule and peer up front was a measurable share of compiling policies.
type fieldPath struct {
	field  string
	rule   int
	suffix string
}

func (p fieldPath) String() string { return p.field + "[" + strconv.Itoa(p.rule) + "]" + p.suffix }

type itemPath struct {
	list fieldPath
	item int
}

func (p itemPath) String() string { return p.list.String() + "[" + strconv.Itoa(p.item) + "]" }

// parseCIDR parses a CIDR, masking host bits.
func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("IPv4-mapped IPv6 prefix %q is ambiguous", s)
	}
	return p.Masked(), nil
}

func validProtocol(p string) (model.Protocol, bool) {
	switch model.Protocol(p) {
	case "":
		return model.ProtocolTCP, true
	case model.ProtocolTCP, model.ProtocolUDP, model.ProtocolSCTP:
		return model.Protocol(p), true
	}
	return "", false
}

func validPortNumber(n int32) bool { return n >= 1 && n <= 65535 }

// npPort translates one NetworkPolicyPort.
func npPort(protocol *string, port *intstr.IntOrString, endPort *int32) (model.Port, string, error) {
	proto := ""
	if protocol != nil {
		proto = *protocol
	}
	pr, ok := validProtocol(proto)
	if !ok {
		return model.Port{}, ReasonUnknownProtocol, fmt.Errorf("unknown protocol %q (want TCP, UDP or SCTP)", proto)
	}
	out := model.Port{Protocol: pr}
	if port == nil {
		if endPort != nil {
			return model.Port{}, ReasonInvalidPort, fmt.Errorf("endPort %d set without port", *endPort)
		}
		return out, "", nil
	}
	if port.Type == intstr.String {
		if errs := validation.IsValidPortName(port.StrVal); len(errs) > 0 {
			return model.Port{}, ReasonInvalidPort, fmt.Errorf("invalid port name %q: %s", port.StrVal, strings.Join(errs, "; "))
		}
		if endPort != nil {
			return model.Port{}, ReasonInvalidPort, fmt.Errorf("endPort cannot be used with named port %q", port.StrVal)
		}
		out.Name = port.StrVal
		return out, "", nil
	}
	if !validPortNumber(port.IntVal) {
		return model.Port{}, ReasonInvalidPort, fmt.Errorf("port %d out of range 1-65535", port.IntVal)
	}
	out.Port = port.IntVal
	if endPort != nil {
		if *endPort < port.IntVal || *endPort > 65535 {
			return model.Port{}, ReasonInvalidPort, fmt.Errorf("endPort %d must be between port %d and 65535", *endPort, port.IntVal)
		}
		if *endPort > port.IntVal {
			out.EndPort = *endPort
		}
	}
	return out, "", nil
}
