package explain

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tierflow/tierflow/pkg/model"
)

// Endpoint is one end of a connection: a pod (Pod set) or a bare address
// (only IP set). A bare address that belongs to exactly one pod of the
// inventory is that pod: traffic to a pod's IP is traffic to the pod.
type Endpoint struct {
	Pod *model.PodRef
	IP  netip.Addr
	// Service names a Service (a destination only; see ServiceTarget).
	Service *model.PodRef
}

func (e Endpoint) String() string {
	if e.Pod != nil {
		return e.Pod.String()
	}
	if e.Service != nil {
		return "service/" + e.Service.String()
	}
	return e.IP.String()
}

// ParseEndpoint reads NS/POD, service/NS/NAME or an IP address.
func ParseEndpoint(s string) (Endpoint, error) {
	if rest, ok := strings.CutPrefix(s, "service/"); ok && strings.Count(s, "/") == 2 {
		ns, name, ok := strings.Cut(rest, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return Endpoint{}, fmt.Errorf("%q: want service/NS/NAME", s)
		}
		return Endpoint{Service: &model.PodRef{Namespace: ns, Name: name}}, nil
	}
	if ns, name, ok := strings.Cut(s, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return Endpoint{}, fmt.Errorf("%q: want NS/POD or an IP address", s)
		}
		return Endpoint{Pod: &model.PodRef{Namespace: ns, Name: name}}, nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%q: want NS/POD or an IP address", s)
	}
	return Endpoint{IP: ip}, nil
}

// Query is a connection to explain: a new connection from Src to Dst on
// destination port Port of Protocol.
type Query struct {
	Src, Dst Endpoint
	Protocol model.Protocol
	Port     int32
	// ThroughService: the connection was addressed to a Service that chose
	// Dst. A pod reaching itself that way leaves the pod and is subject to
	// policy (network-policy-api's hairpin rule), unlike a connection to
	// its own address (Loopback).
	ThroughService bool
}

// Evaluator answers queries over one snapshot and inventory. It indexes
// both once; it is safe for concurrent use because it never changes.
type Evaluator struct {
	inv *Inventory
	// byTier holds each tier's policies in evaluation order.
	byTier map[model.Tier][]*model.Policy
	// applied maps an AppliedToGroup ID to its members by pod.
	applied map[string]map[model.PodRef]*model.GroupMember
	// addresses maps an AddressGroup ID to its members by address.
	addresses map[string]map[netip.Addr]*model.GroupMember
	// byPod lists, per pod and tier, the policies that apply to the pod in
	// evaluation order, with the pod's applied-to group member.
	byPod map[model.PodRef]map[model.Tier][]appliedPolicy
}

// appliedPolicy is a policy that applies to a pod, with the pod's entry in
// one of the policy's applied-to groups (its named ports).
type appliedPolicy struct {
	policy *model.Policy
	member *model.GroupMember
}

// Explain evaluates one query; see Evaluator.Explain.
func Explain(snap *model.Snapshot, inv *Inventory, q Query) (*Result, error) {
	e, err := NewEvaluator(snap, inv)
	if err != nil {
		return nil, err
	}
	return e.Explain(q)
}

// NewEvaluator indexes snap and checks that it is complete and well formed:
// a snapshot that references a missing group, or a rule explain cannot read
// unambiguously, is an error rather than a guess, because a guess could
// report as allowed what the datapath drops or the reverse.
func NewEvaluator(snap *model.Snapshot, inv *Inventory) (*Evaluator, error) {
	if snap == nil {
		return nil, fmt.Errorf("no snapshot")
	}
	if inv == nil {
		inv, _ = NewInventory(nil)
	}
	e := &Evaluator{
		inv:       inv,
		byTier:    map[model.Tier][]*model.Policy{},
		applied:   map[string]map[model.PodRef]*model.GroupMember{},
		addresses: map[string]map[netip.Addr]*model.GroupMember{},
	}
	for id, g := range snap.AppliedToGroups {
		members := map[model.PodRef]*model.GroupMember{}
		for _, e := range g.MembersByNode {
			ms := e.Members
			for i := range ms {
				if ms[i].Pod != nil {
					members[*ms[i].Pod] = &ms[i]
				}
			}
		}
		e.applied[id] = members
	}
	for id, g := range snap.AddressGroups {
		members := map[netip.Addr]*model.GroupMember{}
		for i := range g.Members {
			for _, ip := range g.Members[i].IPs {
				members[ip.Unmap()] = &g.Members[i]
			}
		}
		e.addresses[id] = members
	}
	for _, p := range snap.Policies {
		if err := e.check(p); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Source, err)
		}
		e.byTier[p.Tier] = append(e.byTier[p.Tier], p)
	}
	e.byPod = map[model.PodRef]map[model.Tier][]appliedPolicy{}
	for tier, ps := range e.byTier {
		slices.SortStableFunc(ps, model.ComparePolicies)
		for _, p := range ps {
			seen := map[model.PodRef]bool{}
			for _, id := range p.AppliedToGroups {
				for ref, m := range e.applied[id] {
					if seen[ref] {
						continue
					}
					seen[ref] = true
					tiers := e.byPod[ref]
					if tiers == nil {
						tiers = map[model.Tier][]appliedPolicy{}
						e.byPod[ref] = tiers
					}
					tiers[tier] = append(tiers[tier], appliedPolicy{policy: p, member: m})
				}
			}
		}
	}
	return e, nil
}

func (e *Evaluator) check(p *model.Policy) error {
	switch p.Tier {
	case model.TierAdmin, model.TierNetworkPolicy, model.TierBaseline:
	default:
		return fmt.Errorf("unknown tier %d", p.Tier)
	}
	for _, id := range p.AppliedToGroups {
		if _, ok := e.applied[id]; !ok {
			return fmt.Errorf("applied-to group %q is not in the snapshot", id)
		}
	}
	for _, r := range p.Rules {
		if r.Direction != model.DirectionIn && r.Direction != model.DirectionOut {
			return fmt.Errorf("rule %d: unknown direction %q", r.Index, r.Direction)
		}
		switch r.Action {
		case model.ActionAllow:
		case model.ActionDeny, model.ActionPass:
			if p.Tier == model.TierNetworkPolicy {
				return fmt.Errorf("%s rule %d: NetworkPolicy-tier rules can only allow, not %s", r.Direction, r.Index, r.Action)
			}
		default:
			return fmt.Errorf("%s rule %d: unknown action %q", r.Direction, r.Index, r.Action)
		}
		for _, id := range r.Peer.AddressGroups {
			if _, ok := e.addresses[id]; !ok {
				return fmt.Errorf("%s rule %d: address group %q is not in the snapshot", r.Direction, r.Index, id)
			}
		}
		for _, id := range r.NamedPortGroups {
			if _, ok := e.addresses[id]; !ok {
				return fmt.Errorf("%s rule %d: named-port group %q is not in the snapshot", r.Direction, r.Index, id)
			}
		}
		for _, b := range r.Peer.IPBlocks {
			if !b.CIDR.IsValid() {
				return fmt.Errorf("%s rule %d: invalid CIDR in ipBlock", r.Direction, r.Index)
			}
		}
		for _, pt := range r.Ports {
			if err := checkPort(pt); err != nil {
				return fmt.Errorf("%s rule %d: %w", r.Direction, r.Index, err)
			}
		}
	}
	return nil
}

func checkPort(p model.Port) error {
	switch p.Protocol {
	case model.ProtocolTCP, model.ProtocolUDP, model.ProtocolSCTP:
	case "":
		// Only a named port may leave the protocol to the pod's port.
		if p.Name == "" {
			return fmt.Errorf("port without protocol")
		}
	default:
		return fmt.Errorf("unknown protocol %q", p.Protocol)
	}
	if p.Name != "" && (p.Port != 0 || p.EndPort != 0) {
		return fmt.Errorf("port %q has both a name and a number", p.Name)
	}
	if p.Port < 0 || p.Port > 65535 || p.EndPort < 0 || p.EndPort > 65535 {
		return fmt.Errorf("port %d-%d out of range", p.Port, p.EndPort)
	}
	if p.EndPort != 0 && (p.Port == 0 || p.EndPort < p.Port) {
		return fmt.Errorf("invalid port range %d-%d", p.Port, p.EndPort)
	}
	return nil
}

// ParseProtocol accepts TCP, UDP and SCTP in any letter case.
func ParseProtocol(s string) (model.Protocol, error) {
	switch p := model.Protocol(strings.ToUpper(s)); p {
	case model.ProtocolTCP, model.ProtocolUDP, model.ProtocolSCTP:
		return p, nil
	}
	return "", fmt.Errorf("unknown protocol %q (want TCP, UDP or SCTP)", s)
}

// end is a resolved endpoint: its pod (nil for a bare address) and the
// address used for this query.
type end struct {
	pod *Pod
	ips []netip.Addr
}

func (e *Evaluator) resolve(ep Endpoint) (end, error) {
	if ep.Service != nil {
		return end{}, fmt.Errorf("%s is a Service: not an end of a connection (see ExplainService)", ep)
	}
	if ep.Pod != nil {
		p := e.inv.Pod(*ep.Pod)
		if p == nil {
			return end{}, fmt.Errorf("unknown pod %s", ep.Pod)
		}
		if len(p.IPs) == 0 {
			return end{}, fmt.Errorf("pod %s has no IP address", ep.Pod)
		}
		return end{pod: p, ips: p.IPs}, nil
	}
	if !ep.IP.IsValid() {
		return end{}, fmt.Errorf("endpoint has neither a pod nor an IP address")
	}
	ip := ep.IP.Unmap()
	return end{pod: e.inv.PodByIP(ip), ips: []netip.Addr{ip}}, nil
}

// ErrNoSharedFamily is returned for a source and destination that have no
// address family in common (an IPv4-only pod and an IPv6-only pod).
var ErrNoSharedFamily = errors.New("source and destination share no address family")

// pickAddresses chooses the destination's first address for which the
// source has an address of the same family, and that source address.
func pickAddresses(src, dst end) (netip.Addr, netip.Addr, error) {
	for _, d := range dst.ips {
		for _, s := range src.ips {
			if s.Unmap().Is4() == d.Unmap().Is4() {
				return s.Unmap(), d.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, netip.Addr{}, ErrNoSharedFamily
}

// Explain evaluates a query. Egress is evaluated for the source pod, ingress
// for the destination pod; the verdict is Allow iff both allow.
func (e *Evaluator) Explain(q Query) (*Result, error) {
	switch q.Protocol {
	case model.ProtocolTCP, model.ProtocolUDP, model.ProtocolSCTP:
	default:
		return nil, fmt.Errorf("unknown protocol %q (want TCP, UDP or SCTP)", q.Protocol)
	}
	if q.Port < 1 || q.Port > 65535 {
		return nil, fmt.Errorf("port %d out of range 1-65535", q.Port)
	}
	src, err := e.resolve(q.Src)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	dst, err := e.resolve(q.Dst)
	if err != nil {
		return nil, fmt.Errorf("destination: %w", err)
	}
	srcIP, dstIP, err := pickAddresses(src, dst)
	if err != nil {
		return nil, fmt.Errorf("%s to %s: %w", q.Src, q.Dst, err)
	}
	res := &Result{SrcIP: srcIP, DstIP: dstIP}
	if src.pod != nil && src.pod == dst.pod && !q.ThroughService {
		// A pod's connection to its own address is routed over its own
		// loopback: it never reaches the bridge, so no policy of any tier
		// sees it (the Kubernetes documentation: pods cannot block
		// localhost access; the upstream network policy e2e tests expect
		// every pod to reach itself).
		loop := Decision{Tier: TierNone, Action: model.ActionAllow, Reason: ReasonLoopback, PassedThrough: []PolicyID{}}
		res.Egress, res.Ingress, res.Verdict = loop, loop, VerdictAllow
		return res, nil
	}
	c := conn{srcIP: srcIP, dstIP: dstIP, dstPod: dst.pod, proto: q.Protocol, port: q.Port}
	res.Egress = e.direction(model.DirectionOut, src.pod, c)
	res.Ingress = e.direction(model.DirectionIn, dst.pod, c)
	res.Verdict = VerdictDeny
	if res.Egress.Action == model.ActionAllow && res.Ingress.Action == model.ActionAllow {
		res.Verdict = VerdictAllow
	}
	return res, nil
}

// conn is the connection being evaluated.
type conn struct {
	srcIP, dstIP netip.Addr
	dstPod       *Pod
	proto        model.Protocol
	port         int32
}

// direction evaluates the policies of subject (the source pod for Out, the
// destination pod for In) through the three tiers.
func (e *Evaluator) direction(dir model.Direction, subject *Pod, c conn) Decision {
	d := Decision{PassedThrough: []PolicyID{}}
	if subject == nil {
		d.Tier, d.Action, d.Reason = TierNone, model.ActionAllow, ReasonNotAPod
		return d
	}

	// Admin tier: the first matching rule decides; Pass leaves the tier.
	tiers := e.byPod[subject.Ref]
admin:
	for _, ap := range tiers[model.TierAdmin] {
		p, member := ap.policy, ap.member
		for i := range p.Rules {
			r := &p.Rules[i]
			if r.Direction != dir || !e.ruleMatches(r, member, c) {
				continue
			}
			if r.Action == model.ActionPass {
				d.PassedThrough = append(d.PassedThrough, policyID(p))
				break admin
			}
			return decided(d, model.TierAdmin, p, r)
		}
	}

	// NetworkPolicy tier: an isolated pod gets only what some rule of an
	// isolating policy allows.
	var allowedBy *model.Policy
	var allowedRule *model.Rule
	for _, ap := range tiers[model.TierNetworkPolicy] {
		p, member := ap.policy, ap.member
		if !slices.Contains(p.Isolates, dir) {
			continue
		}
		d.IsolatedBy = append(d.IsolatedBy, policyID(p))
		if allowedBy != nil {
			continue
		}
		for i := range p.Rules {
			r := &p.Rules[i]
			if r.Direction == dir && e.ruleMatches(r, member, c) {
				allowedBy, allowedRule = p, r
				break
			}
		}
	}
	if allowedBy != nil {
		return decided(d, model.TierNetworkPolicy, allowedBy, allowedRule)
	}
	if len(d.IsolatedBy) > 0 {
		d.Tier, d.Action, d.Reason = model.TierNetworkPolicy.String(), model.ActionDeny, ReasonIsolation
		return d
	}

	// Baseline tier: the first matching rule decides; Pass, or no match,
	// is the default allow.
	for _, ap := range tiers[model.TierBaseline] {
		p, member := ap.policy, ap.member
		for i := range p.Rules {
			r := &p.Rules[i]
			if r.Direction != dir || !e.ruleMatches(r, member, c) {
				continue
			}
			if r.Action == model.ActionPass {
				d.PassedThrough = append(d.PassedThrough, policyID(p))
				return defaultAllow(d)
			}
			return decided(d, model.TierBaseline, p, r)
		}
	}
	return defaultAllow(d)
}

func decided(d Decision, tier model.Tier, p *model.Policy, r *model.Rule) Decision {
	id := policyID(p)
	d.Tier, d.Policy, d.Action, d.Reason = tier.String(), &id, r.Action, ReasonRule
	d.Rule = &RuleID{Index: r.Index, Name: r.Name}
	return d
}

func defaultAllow(d Decision) Decision {
	d.Tier, d.Action, d.Reason = model.TierBaseline.String(), model.ActionAllow, ReasonDefaultAllow
	return d
}

// ruleMatches says whether r, of a policy applied to member, matches c: the
// peer address is in the rule's peer and the destination port is in its
// ports.
func (e *Evaluator) ruleMatches(r *model.Rule, member *model.GroupMember, c conn) bool {
	peerIP := c.srcIP
	if r.Direction == model.DirectionOut {
		peerIP = c.dstIP
	}
	peerMember, inPeer := e.peerMatch(r, peerIP)
	if !inPeer {
		return false
	}
	if len(r.Ports) == 0 {
		return true
	}
	// Named ports resolve on the destination pod: the applied-to pod of an
	// In rule, the peer pod of an Out rule.
	var named []model.NamedPort
	if r.Direction == model.DirectionIn {
		named = member.Ports
	} else if peerMember != nil {
		named = peerMember.Ports
	} else {
		// The peer matched through an ipBlock that covers a pod's
		// address: the destination is still that pod, and its named ports
		// come from the rule's NamedPortGroups, the same data the agent
		// resolves them from (none: the name resolves nothing there).
		for _, id := range r.NamedPortGroups {
			if m := e.addresses[id][c.dstIP]; m != nil && m.Pod != nil {
				named = m.Ports
				break
			}
		}
	}
	return portsMatch(r.Ports, named, c.proto, c.port)
}

// peerMatch says whether ip is in r's peer, and returns the address-group
// member that has ip, if any.
func (e *Evaluator) peerMatch(r *model.Rule, ip netip.Addr) (*model.GroupMember, bool) {
	for _, id := range r.Peer.AddressGroups {
		if m := e.addresses[id][ip]; m != nil {
			return m, true
		}
	}
	for _, b := range r.Peer.IPBlocks {
		if b.Contains(ip) {
			return nil, true
		}
	}
	return nil, false
}

// portsMatch says whether proto/port is one of ports. named are the
// destination pod's named container ports.
func portsMatch(ports []model.Port, named []model.NamedPort, proto model.Protocol, port int32) bool {
	for _, p := range ports {
		if p.Name != "" {
			for _, np := range named {
				if np.Name == p.Name && (p.Protocol == "" || p.Protocol == np.Protocol) &&
					np.Protocol == proto && np.Port == port {
					return true
				}
			}
			continue
		}
		if p.Protocol != proto {
			continue
		}
		if p.Port == 0 {
			return true
		}
		last := p.Port
		if p.EndPort > p.Port {
			last = p.EndPort
		}
		if port >= p.Port && port <= last {
			return true
		}
	}
	return false
}
