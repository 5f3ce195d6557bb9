package policyflows

import (
	"fmt"
	"hash/maphash"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// Input is everything the agent knows: the span-filtered model objects and
// its node's attached pods.
type Input struct {
	Node            string
	Policies        []*model.Policy
	AppliedToGroups map[string]*model.AppliedToGroup
	AddressGroups   map[string]*model.AddressGroup
	Pods            []pipeline.LocalPod
}

// Result is one compilation.
type Result struct {
	// Flows are the policy tables' flows (rules, isolation, metrics).
	Flows []openflow.Flow
	// Keys are Flow.Key of each flow (same index), computed once.
	Keys []string
	// Rules maps every rule ID present in Flows' cookies to its rule, in
	// the form the agent's query API answers with.
	Rules map[uint32]agentquery.RuleInfo
	// Warnings name rules that could not be compiled as written and how
	// they were compiled instead (always towards denying).
	Warnings []string
	// LeftOut maps the ID of every policy left out of a full Admin or
	// Baseline table (more rules than the table has priorities, see
	// fitTable) to why, one sentence per direction: its rules of that
	// direction are not installed, and its applied-to pods' traffic in
	// that direction that no higher-precedence rule decides is denied.
	LeftOut map[string]string
	// MatchesNothing maps the ID of every rule that compiled to no flow
	// on this node to why: it can match no packet here (no local
	// applied-to pod, no peer address, named ports that resolve nowhere).
	// A rule absent from it has action flows.
	MatchesNothing map[uint32]string
}

// Compiler turns Inputs into flows. It is not safe for concurrent use.
type Compiler struct {
	round      uint8
	nextRuleID uint32
	nextConjID uint32
	ruleIDs    map[string]uint32
	conjIDs    map[string]uint32
	prios      map[pipeline.Table]*priorityAllocator
	// cache holds each rule's last compiled flows by rule key, reused while
	// the rule's fingerprint (everything its flows depend on) is unchanged.
	cache map[string]*ruleCache
	seed  maphash.Seed
	// asm is the compiled flows, merged (assembly.go); order is the rules
	// of the last compilation in evaluation order, extras the overflow and
	// isolation flows (after every rule's).
	asm    assembly
	order  []*ruleCache
	extras *ruleCache
}

// ruleCache is one rule's compiled flows.
type ruleCache struct {
	fp       uint64
	flows    []openflow.Flow
	keys     []string
	kinds    []flowKind
	conjKeys []string
	warns    []string
	// nothing is why the rule has no flow ("" when it has some).
	nothing string
	// seq is the rule's place in the last compilation's evaluation order;
	// slots[i] is the assembly's flow that flows[i] is part of.
	seq   int32
	slots []*slot
}

// NewCompiler returns a compiler whose flows carry round in their cookies.
func NewCompiler(round uint8) *Compiler {
	return &Compiler{round: round, ruleIDs: map[string]uint32{}, conjIDs: map[string]uint32{}, prios: map[pipeline.Table]*priorityAllocator{},
		cache: map[string]*ruleCache{}, seed: maphash.MakeSeed(), asm: newAssembly()}
}

// Round is the cookie round of the compiler's flows.
func (c *Compiler) Round() uint8 { return c.round }

type tableSet struct{ admin, np, isolation, baseline, metric pipeline.Table }

func tablesFor(d model.Direction) tableSet {
	if d == model.DirectionOut {
		return tableSet{pipeline.EgressAdmin, pipeline.EgressNetworkPolicy, pipeline.EgressIsolation, pipeline.EgressBaseline, pipeline.EgressMetric}
	}
	return tableSet{pipeline.IngressAdmin, pipeline.IngressNetworkPolicy, pipeline.IngressIsolation, pipeline.IngressBaseline, pipeline.IngressMetric}
}

func ruleReg(d model.Direction) int {
	if d == model.DirectionOut {
		return pipeline.RegEgressRule
	}
	return pipeline.RegIngrRule
}

func ruleKey(p *model.Policy, r *model.Rule) string {
	return fmt.Sprintf("%s/%s/%d", p.ID, r.Direction, r.Index)
}

// placed is a rule with the table it lives in.
type placed struct {
	pol   *model.Policy
	rule  *model.Rule
	key   string
	table pipeline.Table
}

// Compile compiles the whole input. An error means nothing should change
// on the bridge (the previous flows stay).
func (c *Compiler) Compile(in Input) (Result, error) {
	res, _, err := c.CompileChanges(in)
	if err != nil {
		return res, err
	}
	res.Flows, res.Keys = c.Flows()
	return res, nil
}

// Flows are the flows of the last compilation that succeeded, with their
// Flow.Key: Compile's Result.Flows and Keys.
func (c *Compiler) Flows() ([]openflow.Flow, []string) {
	if c.extras == nil {
		return nil, nil
	}
	rules := append(make([]*ruleCache, 0, len(c.order)+1), c.order...)
	return c.asm.flows(append(rules, c.extras))
}

// CompileChanges compiles the whole input like Compile, but returns, in
// place of Result.Flows, what changed in the flows since the compiler's
// previous compilation (the flows it has now: Flows): the work and the
// changes are those of the rules whose inputs changed. An error means
// nothing should change on the bridge and the compiler's flows are those
// of the previous compilation.
func (c *Compiler) CompileChanges(in Input) (Result, flowsync.Changes, error) {
	res := Result{Rules: map[uint32]agentquery.RuleInfo{}, MatchesNothing: map[uint32]string{}, LeftOut: map[string]string{}}
	pods := map[model.PodRef]pipeline.LocalPod{}
	ports := map[uint32]model.PodRef{}
	ips := map[netip.Addr]model.PodRef{}
	for _, p := range in.Pods {
		if err := p.Validate(); err != nil {
			return res, flowsync.Changes{}, err
		}
		if _, dup := pods[p.Pod]; dup {
			return res, flowsync.Changes{}, fmt.Errorf("pod %s attached twice", p.Pod)
		}
		if other, dup := ports[p.OFPort]; dup {
			return res, flowsync.Changes{}, fmt.Errorf("pods %s and %s on the same OpenFlow port %d", other, p.Pod, p.OFPort)
		}
		for _, ip := range p.IPs {
			if other, dup := ips[ip]; dup {
				return res, flowsync.Changes{}, fmt.Errorf("pods %s and %s share address %s", other, p.Pod, ip)
			}
			ips[ip] = p.Pod
		}
		pods[p.Pod] = p
		ports[p.OFPort] = p.Pod
	}
	pols := append([]*model.Policy(nil), in.Policies...)
	for _, p := range pols {
		if p == nil {
			return res, flowsync.Changes{}, fmt.Errorf("nil policy in input")
		}
	}
	sort.SliceStable(pols, func(i, j int) bool { return model.ComparePolicies(pols[i], pols[j]) < 0 })

	// Place rules in tables, in evaluation order.
	byTable := map[pipeline.Table][]placed{}
	seenKeys := map[string]bool{}
	for _, p := range pols {
		if p == nil {
			return res, flowsync.Changes{}, fmt.Errorf("nil policy in input")
		}
		switch p.Tier {
		case model.TierAdmin, model.TierNetworkPolicy, model.TierBaseline:
		default:
			return res, flowsync.Changes{}, fmt.Errorf("policy %s: unknown tier %d", p.Source, p.Tier)
		}
		rules := make([]*model.Rule, 0, len(p.Rules))
		for i := range p.Rules {
			rules = append(rules, &p.Rules[i])
		}
		sort.SliceStable(rules, func(i, j int) bool { return rules[i].Index < rules[j].Index })
		for _, r := range rules {
			if r.Direction != model.DirectionIn && r.Direction != model.DirectionOut {
				return res, flowsync.Changes{}, fmt.Errorf("policy %s rule %d: unknown direction %q", p.Source, r.Index, r.Direction)
			}
			if p.Tier == model.TierNetworkPolicy && !isolates(p, r.Direction) {
				// A NetworkPolicy's rules of a direction missing from its
				// policyTypes are ignored (networking/v1 API).
				continue
			}
			k := ruleKey(p, r)
			if seenKeys[k] {
				return res, flowsync.Changes{}, fmt.Errorf("policy %s: two %s rules with index %d (or two policies with ID %q)", p.Source, r.Direction, r.Index, p.ID)
			}
			seenKeys[k] = true
			ts := tablesFor(r.Direction)
			t := map[model.Tier]pipeline.Table{model.TierAdmin: ts.admin, model.TierNetworkPolicy: ts.np, model.TierBaseline: ts.baseline}[p.Tier]
			byTable[t] = append(byTable[t], placed{p, r, k, t})
		}
	}

	// Priorities: one per rule in the Admin and Baseline tables, one shared
	// priority in the NetworkPolicy tables. A table with more rules than
	// priorities keeps the highest-precedence policies that fit.
	prio := map[string]uint16{}
	leftOut := map[pipeline.Table][]*model.Policy{}
	for _, t := range perRuleTables {
		byTable[t], leftOut[t] = fitTable(byTable[t], pipeline.RuleCapacity)
		for _, p := range leftOut[t] {
			dir := tableDirection(t)
			// No counts in the message: it is the policy's status, and must
			// not change with every change of the other policies.
			msg := fmt.Sprintf("%s rules not installed: table %s of this node holds more rules than its %d priorities, and this policy is among the lowest in precedence there; "+
				"its applied-to pods' %s traffic that no higher-precedence rule decides is denied instead (fail closed)",
				directionWord(dir), t, pipeline.RuleCapacity, directionWord(dir))
			if prev := res.LeftOut[p.ID]; prev != "" {
				msg = prev + "; " + msg
			}
			res.LeftOut[p.ID] = msg
		}
	}
	for _, t := range perRuleTables {
		a := c.prios[t]
		if a == nil {
			a = newPriorityAllocator(pipeline.RulePriorityMin, pipeline.RulePriorityMax)
			c.prios[t] = a
		}
		keys := make([]string, 0, len(byTable[t]))
		for _, pr := range byTable[t] {
			keys = append(keys, pr.key)
		}
		got, err := a.assign(keys)
		if err != nil {
			return res, flowsync.Changes{}, fmt.Errorf("table %s: %w", t, err)
		}
		for k, v := range got {
			prio[k] = v
		}
	}

	// Rule IDs stay stable while the rule exists. A rule whose fingerprint
	// is unchanged keeps its cached flows and its share of the assembly;
	// the others are compiled again and re-merged (assembly.go).
	live := map[string]bool{}
	liveConj := map[string]bool{}
	seq, lastKept, reordered := int32(0), int32(-1), false
	c.order = c.order[:0]
	var withdrawn, added []*ruleCache
	for _, t := range pipeline.Tables() {
		for _, pr := range byTable[t] {
			live[pr.key] = true
			id := c.ruleIDs[pr.key]
			if id == 0 {
				c.nextRuleID++
				id = c.nextRuleID
				c.ruleIDs[pr.key] = id
			}
			p := prio[pr.key]
			if pr.pol.Tier == model.TierNetworkPolicy {
				p = pipeline.NetworkPolicyRulePriority
			}
			res.Rules[id] = agentquery.RuleInfo{ID: id, Policy: pr.pol.Source, PolicyID: pr.pol.ID, Tier: pr.pol.Tier, Direction: pr.rule.Direction,
				Index: pr.rule.Index, Name: pr.rule.Name, Action: pr.rule.Action, Table: t.String(), Priority: p}
			fp := c.fingerprint(in, pods, pr, id, p)
			e := c.cache[pr.key]
			if e == nil || e.fp != fp {
				if e != nil {
					withdrawn = append(withdrawn, e)
				}
				rb := newBuilder(c.round)
				e = &ruleCache{fp: fp}
				e.warns, e.nothing = c.compileRule(rb, in, pods, pr, id, p, &e.conjKeys)
				e.flows, e.keys, e.kinds = rb.out, rb.keys, rb.kinds
				c.cache[pr.key] = e
				added = append(added, e)
			} else {
				// Kept rules must keep their order among themselves, or the
				// merged flows they share are merged in another order.
				reordered = reordered || e.seq <= lastKept
				lastKept = e.seq
			}
			e.seq = seq
			seq++
			c.order = append(c.order, e)
			for _, k := range e.conjKeys {
				liveConj[k] = true
			}
			res.Warnings = append(res.Warnings, e.warns...)
			if e.nothing != "" {
				res.MatchesNothing[id] = e.nothing
			}
		}
	}
	var gone []string
	for k := range c.ruleIDs {
		if !live[k] {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone) // the changes come in a deterministic order
	for _, k := range gone {
		delete(c.ruleIDs, k)
		if e := c.cache[k]; e != nil {
			withdrawn = append(withdrawn, e)
		}
		delete(c.cache, k)
	}
	for k := range c.conjIDs {
		if !liveConj[k] {
			delete(c.conjIDs, k)
		}
	}

	// Overflow and isolation flows come after every rule's; they are few
	// (one per local pod and direction or table) and built every time.
	b := newBuilder(c.round)
	seen := map[[2]uint32]bool{}
	add := func(t pipeline.Table, port uint32, f openflow.Flow) {
		if k := [2]uint32{uint32(t.ID()), port}; !seen[k] {
			seen[k] = true
			b.add(f, kindAction)
		}
	}
	// Policies left out of a full table: their applied-to pods' traffic
	// that reaches the bottom of the table (no rule of a policy that fits
	// decided it) is denied, below every installed rule — every policy
	// that precedes them — and above every later tier.
	for _, t := range perRuleTables {
		for _, p := range leftOut[t] {
			for _, lp := range appliedPods(in, pods, p) {
				add(t, lp.OFPort, openflow.Flow{Table: t.ID(), Priority: pipeline.OverflowPriority, Cookie: pipeline.Cookie(c.round, pipeline.RoleOverflow, 0),
					Match: appliedMatch(tableDirection(t), lp.OFPort), Actions: []openflow.Action{pipeline.LoadDeny(), openflow.GotoTable{Table: pipeline.ConntrackCommit.ID()}}})
			}
		}
	}

	// Isolation: pods an NP-tier policy isolates in a direction drop what no
	// NetworkPolicy rule allowed.
	for _, p := range pols {
		if p.Tier != model.TierNetworkPolicy {
			continue
		}
		for _, d := range p.Isolates {
			if d != model.DirectionIn && d != model.DirectionOut {
				continue
			}
			t := tablesFor(d).isolation
			for _, lp := range appliedPods(in, pods, p) {
				add(t, lp.OFPort, openflow.Flow{Table: t.ID(), Priority: pipeline.PriorityNormal,
					Cookie: pipeline.Cookie(c.round, pipeline.RoleIsolation, 0), Match: appliedMatch(d, lp.OFPort),
					Actions: []openflow.Action{pipeline.LoadDeny(), openflow.GotoTable{Table: pipeline.ConntrackCommit.ID()}}})
			}
		}
	}
	if c.extras != nil {
		withdrawn = append(withdrawn, c.extras)
	}
	c.extras = &ruleCache{flows: b.out, keys: b.keys, kinds: b.kinds, seq: math.MaxInt32}
	c.asm.update(withdrawn, append(added, c.extras))
	if reordered {
		c.asm.refoldShared()
	}
	return res, c.asm.changes(), nil
}

// perRuleTables give every rule its own priority (Admin and Baseline),
// so they hold at most pipeline.RuleCapacity rules.
var perRuleTables = []pipeline.Table{pipeline.EgressAdmin, pipeline.EgressBaseline, pipeline.IngressAdmin, pipeline.IngressBaseline}

func tableDirection(t pipeline.Table) model.Direction {
	if t == pipeline.EgressAdmin || t == pipeline.EgressBaseline {
		return model.DirectionOut
	}
	return model.DirectionIn
}

func directionWord(d model.Direction) string {
	if d == model.DirectionOut {
		return "egress"
	}
	return "ingress"
}

// fitTable keeps, of a table's rules in evaluation order, those of the
// policies that fit in capacity priorities, and returns the policies left
// out: every policy from the first one whose rules would exceed capacity
// on, the lowest-precedence ones, whole. A tail is cut, never a policy in
// the middle: a left-out policy is replaced by a deny of its pods under
// every installed rule, so no installed rule may come after it in
// evaluation order (it could allow what the left-out policy denies).
func fitTable(rules []placed, capacity int) ([]placed, []*model.Policy) {
	if len(rules) <= capacity {
		return rules, nil
	}
	cut := len(rules)
	for i := 0; i < len(rules); {
		j := i
		for j < len(rules) && rules[j].pol == rules[i].pol {
			j++
		}
		if j > capacity {
			cut = i
			break
		}
		i = j
	}
	var out []*model.Policy
	for i := cut; i < len(rules); i++ {
		if i == cut || rules[i].pol != rules[i-1].pol {
			out = append(out, rules[i].pol)
		}
	}
	return rules[:cut], out
}

// appliedPods are the policy's applied-to pods attached to this node.
// A pod in several of the policy's groups counts once, as its first
// membership. (Called for every rule at every update: no map.)
func appliedPods(in Input, pods map[model.PodRef]pipeline.LocalPod, p *model.Policy) []appliedPod {
	var out []appliedPod
	for _, gid := range p.AppliedToGroups {
		g := in.AppliedToGroups[gid]
		if g == nil {
			continue
		}
		members := g.MembersByNode.Get(in.Node)
		if out == nil {
			out = make([]appliedPod, 0, len(members))
		}
		for _, m := range members {
			if m.Pod == nil {
				continue
			}
			if lp, ok := pods[*m.Pod]; ok {
				out = append(out, appliedPod{OFPort: lp.OFPort, Ports: m.Ports})
			}
		}
	}
	// Stable, so the first membership of a port comes first and stays.
	sort.SliceStable(out, func(i, j int) bool { return out[i].OFPort < out[j].OFPort })
	return slices.CompactFunc(out, func(a, b appliedPod) bool { return a.OFPort == b.OFPort })
}

type appliedPod struct {
	OFPort uint32
	Ports  []model.NamedPort
}

func appliedMatch(d model.Direction, port uint32) openflow.Match {
	if d == model.DirectionOut {
		return openflow.Match{InPort: port}
	}
	return openflow.Match{Regs: map[int]openflow.Masked{pipeline.RegOutPort: {Value: port, Mask: 0xffffffff}}}
}

// namedPortMembers maps each address of the members of a rule's
// NamedPortGroups to that pod's named ports: how an egress named port
// resolves on a destination matched through an ipBlock. Only these groups
// are used (not every group the agent holds, not the local pods by
// themselves), so the agent resolves exactly what the controller and
// pkg/explain resolve; a destination in none of them resolves no name.
func namedPortMembers(in Input, r *model.Rule) map[netip.Addr][]model.NamedPort {
	out := map[netip.Addr][]model.NamedPort{}
	for _, gid := range r.NamedPortGroups {
		g := in.AddressGroups[gid]
		if g == nil {
			continue // not received yet: resolves nothing
		}
		for _, m := range g.Members {
			if m.Pod == nil {
				continue
			}
			for _, ip := range m.IPs {
				ip = ip.Unmap()
				if _, ok := out[ip]; !ok {
					out[ip] = m.Ports
				}
			}
		}
	}
	return out
}

// portValue is a resolved destination port.
type portValue struct {
	proto uint8
	port  uint16
}

var protoNumbers = map[model.Protocol]uint8{model.ProtocolTCP: 6, model.ProtocolUDP: 17, model.ProtocolSCTP: 132}

// portClause is one value of the ports dimension: a protocol with a
// masked port, or every port when mask is 0.
type portClause struct {
	proto       uint8
	value, mask uint16
}

func (pc portClause) covers(v portValue) bool {
	return pc.proto == v.proto && v.port&pc.mask == pc.value
}

// subConj is one conjunction of a rule: applied-to ports × peer prefixes ×
// port clauses; a nil slice for peers/ports means "any" (no clause).
type subConj struct {
	key     string
	applied []uint32
	peers   []netip.Prefix
	anyPeer bool
	ports   []portClause
	anyPort bool
}

// compileRule compiles one rule into b. It returns its warnings, and why it
// matches nothing when it emitted no flow.
func (c *Compiler) compileRule(b *builder, in Input, pods map[model.PodRef]pipeline.LocalPod,
	pr placed, id uint32, prio uint16, conjKeys *[]string) (warns []string, nothing string) {
	r := pr.rule
	warnf := func(format string, args ...any) {
		warns = append(warns, fmt.Sprintf("policy %s rule %s[%d]: ", pr.pol.Source, strings.ToLower(string(r.Direction)), r.Index)+fmt.Sprintf(format, args...))
	}
	applied := appliedPods(in, pods, pr.pol)
	if len(applied) == 0 {
		return nil, "no applied-to pod of this node is attached to the bridge"
	}
	switch r.Action {
	case model.ActionAllow, model.ActionDeny, model.ActionPass:
	default:
		warnf("unknown action %q: not enforced", r.Action)
		return warns, fmt.Sprintf("its action %q is not enforced", r.Action)
	}
	if pr.pol.Tier == model.TierNetworkPolicy && r.Action != model.ActionAllow {
		warnf("NetworkPolicy rules can only allow; %s not enforced", r.Action)
		return warns, fmt.Sprintf("a NetworkPolicy rule cannot %s", r.Action)
	}

	// Peers: address-group IPs and ipBlocks minus excepts, as prefixes.
	var peers []netip.Prefix
	invalid := false
	for _, gid := range r.Peer.AddressGroups {
		g := in.AddressGroups[gid]
		if g == nil {
			continue // not received yet: matches nothing
		}
		for _, m := range g.Members {
			for _, ip := range m.IPs {
				if ip.IsValid() {
					peers = append(peers, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				}
			}
		}
	}
	for _, blk := range r.Peer.IPBlocks {
		ok := blk.CIDR.IsValid()
		for _, x := range blk.Except {
			ok = ok && x.IsValid()
		}
		if !ok {
			// An unreadable except must not widen an allow: the whole
			// block is invalid.
			invalid = true
			continue
		}
		peers = append(peers, subtract(blk.CIDR, blk.Except)...)
	}
	peers = normalize(peers)
	// Ports: numeric and protocol-only ports become masked clauses; named
	// ports resolve per destination pod below.
	var ports []portClause
	var named []model.Port
	for _, p := range r.Ports {
		if p.Name != "" {
			named = append(named, p)
			continue
		}
		proto, ok := protoNumbers[p.Protocol]
		if !ok {
			invalid = true
			continue
		}
		switch {
		case p.Port == 0 && p.EndPort == 0:
			ports = append(ports, portClause{proto: proto})
		case p.Port < 1 || p.Port > 65535 || p.EndPort > 65535 || (p.EndPort != 0 && p.EndPort < p.Port):
			invalid = true
		default:
			end := p.Port
			if p.EndPort > p.Port {
				end = p.EndPort
			}
			for _, vm := range portMasks(uint16(p.Port), uint16(end)) {
				ports = append(ports, portClause{proto, vm[0], vm[1]})
			}
		}
	}
	if invalid {
		if r.Action == model.ActionDeny {
			// Fail closed: a deny we cannot read exactly denies every
			// peer and port of its applied-to pods.
			warnf("invalid peer or port; enforced as a deny of all traffic of the applied-to pods")
			peers, ports, named = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}, nil, nil
			r = &model.Rule{Index: r.Index, Direction: r.Direction, Action: r.Action}
		} else {
			warnf("invalid peer or port; the invalid parts match nothing")
		}
	}
	if len(peers) == 0 {
		return warns, "its peers hold no address"
	}
	anyPeer := coversAll(peers)
	allApplied := make([]uint32, 0, len(applied))
	for _, a := range applied {
		allApplied = append(allApplied, a.OFPort)
	}
	var subs []subConj
	if len(r.Ports) == 0 {
		subs = append(subs, subConj{key: "base", applied: allApplied, peers: peers, anyPeer: anyPeer, anyPort: true})
	} else if len(ports) > 0 {
		subs = append(subs, subConj{key: "base", applied: allApplied, peers: peers, anyPeer: anyPeer, ports: ports})
	}
	covered := func(v portValue) bool {
		for _, pc := range ports {
			if pc.covers(v) {
				return true
			}
		}
		return false
	}
	if len(named) > 0 {
		resolve := func(nps []model.NamedPort) []portValue {
			var out []portValue
			for _, p := range named {
				for _, np := range nps {
					if np.Name != p.Name || (p.Protocol != "" && p.Protocol != np.Protocol) || np.Port < 1 || np.Port > 65535 {
						continue
					}
					if proto, ok := protoNumbers[np.Protocol]; ok {
						out = append(out, portValue{proto, uint16(np.Port)})
					}
				}
			}
			return out
		}
		if r.Direction == model.DirectionIn {
			// Ingress: the name resolves on each applied-to pod.
			byValue := map[portValue][]uint32{}
			for _, a := range applied {
				for _, v := range resolve(a.Ports) {
					if !covered(v) {
						byValue[v] = appendUnique(byValue[v], a.OFPort)
					}
				}
			}
			for _, v := range sortedValues(byValue) {
				subs = append(subs, subConj{key: fmt.Sprintf("named/%d/%d", v.proto, v.port), applied: byValue[v], peers: peers, anyPeer: anyPeer,
					ports: []portClause{{v.proto, v.port, 0xffff}}})
			}
		} else {
			// Egress: the name resolves on each peer pod; peers are split
			// by the number their name resolves to.
			byValue := map[portValue][]netip.Prefix{}
			addPeer := func(ip netip.Addr, nps []model.NamedPort) {
				for _, v := range resolve(nps) {
					if !covered(v) {
						byValue[v] = append(byValue[v], netip.PrefixFrom(ip, ip.BitLen()))
					}
				}
			}
			for _, gid := range r.Peer.AddressGroups {
				if g := in.AddressGroups[gid]; g != nil {
					for _, m := range g.Members {
						for _, ip := range m.IPs {
							addPeer(ip.Unmap(), m.Ports)
						}
					}
				}
			}
			// ipBlock destinations: pods of the rule's NamedPortGroups
			// inside a block (the groups never widen the peer).
			for ip, nps := range namedPortMembers(in, r) {
				for _, blk := range r.Peer.IPBlocks {
					if blk.Contains(ip) {
						addPeer(ip, nps)
						break
					}
				}
			}
			for _, v := range sortedValues(byValue) {
				subs = append(subs, subConj{key: fmt.Sprintf("named/%d/%d", v.proto, v.port), applied: allApplied, peers: normalize(byValue[v]),
					ports: []portClause{{v.proto, v.port, 0xffff}}})
			}
		}
	}

	ts := tablesFor(r.Direction)
	ck := pipeline.Cookie(c.round, pipeline.RoleAction, id)
	var acts []openflow.Action
	switch r.Action {
	case model.ActionAllow:
		acts = []openflow.Action{openflow.LoadReg{Reg: ruleReg(r.Direction), Start: 0, End: 31, Value: id}, openflow.GotoTable{Table: ts.metric.ID()}}
		b.add(openflow.Flow{Table: ts.metric.ID(), Priority: pipeline.PriorityNormal, Cookie: pipeline.Cookie(c.round, pipeline.RoleMetric, id),
			Match: openflow.Match{Regs: map[int]openflow.Masked{ruleReg(r.Direction): {Value: id, Mask: 0xffffffff}}}, Actions: nextAfterMetric(r.Direction)}, kindAction)
	case model.ActionDeny:
		acts = []openflow.Action{openflow.LoadReg{Reg: ruleReg(r.Direction), Start: 0, End: 31, Value: id}, pipeline.LoadDeny(), openflow.GotoTable{Table: pipeline.ConntrackCommit.ID()}}
	case model.ActionPass:
		if pr.pol.Tier == model.TierAdmin {
			acts = []openflow.Action{openflow.GotoTable{Table: ts.np.ID()}}
		} else {
			acts = []openflow.Action{openflow.GotoTable{Table: ts.metric.ID()}} // Baseline pass: the default allow
		}
	}
	for _, s := range subs {
		ck := pr.key + "/" + s.key
		*conjKeys = append(*conjKeys, ck)
		conj := c.conjIDs[ck]
		if conj == 0 {
			c.nextConjID++
			conj = c.nextConjID
			c.conjIDs[ck] = conj
		}
		c.emit(b, pr.table, prio, r.Direction, s, conj, id, acts)
	}
	_ = ck
	// Without a conjunction the rule has no action flow (an Allow keeps
	// its metric flow, which counts nothing).
	switch {
	case len(subs) > 0:
		return warns, ""
	case len(named) == 0:
		return warns, "none of its ports is valid"
	case r.Direction == model.DirectionIn:
		return warns, "its named ports resolve on none of this node's applied-to pods"
	default:
		return warns, "its named ports resolve on none of its destination pods"
	}
}

func nextAfterMetric(d model.Direction) []openflow.Action {
	if d == model.DirectionOut {
		return []openflow.Action{openflow.GotoTable{Table: pipeline.Forwarding.ID()}}
	}
	return []openflow.Action{openflow.GotoTable{Table: pipeline.ConntrackCommit.ID()}}
}

func coversAll(ps []netip.Prefix) bool {
	v4, v6 := false, false
	for _, p := range ps {
		if p.Bits() == 0 {
			if p.Addr().Is4() {
				v4 = true
			} else {
				v6 = true
			}
		}
	}
	return v4 && v6
}

func appendUnique(s []uint32, v uint32) []uint32 {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func sortedValues[T any](m map[portValue]T) []portValue {
	out := make([]portValue, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].proto != out[j].proto {
			return out[i].proto < out[j].proto
		}
		return out[i].port < out[j].port
	})
	return out
}

// emit writes one conjunction's flows: a clause flow per value of each
// dimension and the conj_id flow with the action, or, with a single
// dimension, the action flows directly.
func (c *Compiler) emit(b *builder, t pipeline.Table, prio uint16, d model.Direction, s subConj, conj, id uint32, acts []openflow.Action) {
	dims := make([][]openflow.Match, 0, 3)
	applied := make([]openflow.Match, 0, len(s.applied))
	for _, p := range s.applied {
		applied = append(applied, appliedMatch(d, p))
	}
	dims = append(dims, applied)
	if !s.anyPeer {
		ms := make([]openflow.Match, 0, len(s.peers))
		for _, p := range s.peers {
			m := openflow.Match{EthType: 0x0800}
			if p.Addr().Is6() {
				m.EthType = 0x86dd
			}
			if p.Bits() > 0 {
				if d == model.DirectionOut {
					m.IPDst = p
				} else {
					m.IPSrc = p
				}
			}
			ms = append(ms, m)
		}
		dims = append(dims, ms)
	}
	if !s.anyPort {
		ms := make([]openflow.Match, 0, 2*len(s.ports))
		for _, pc := range s.ports {
			for _, et := range []uint16{0x0800, 0x86dd} {
				m := openflow.Match{EthType: et, IPProto: pc.proto}
				if pc.mask != 0 {
					m.L4Dst = &openflow.Masked{Value: uint32(pc.value), Mask: uint32(pc.mask)}
				}
				ms = append(ms, m)
			}
		}
		dims = append(dims, ms)
	}
	if len(dims) == 1 {
		for _, m := range dims[0] {
			b.add(openflow.Flow{Table: t.ID(), Priority: prio, Cookie: pipeline.Cookie(c.round, pipeline.RoleAction, id), Match: m, Actions: acts}, kindAction)
		}
		return
	}
	n := uint8(len(dims))
	for i, ms := range dims {
		for _, m := range ms {
			b.add(openflow.Flow{Table: t.ID(), Priority: prio, Cookie: pipeline.Cookie(c.round, pipeline.RoleClause, id), Match: m,
				Actions: []openflow.Action{openflow.Conjunction{ID: conj, Clause: uint8(i + 1), NClauses: n}}}, kindClause)
		}
	}
	cid := conj
	b.add(openflow.Flow{Table: t.ID(), Priority: prio, Cookie: pipeline.Cookie(c.round, pipeline.RoleAction, id), Match: openflow.Match{ConjID: &cid}, Actions: acts}, kindAction)
}

type flowKind int

const (
	kindClause flowKind = iota
	kindAction
)

// builder merges flows with the same table, priority and match: clause
// flows of several conjunctions share one flow carrying all their
// conjunction actions; an action flow beats a clause flow with the same
// match (it matches everything the clause could contribute to at that
// priority, with an equivalent action); the first action flow wins over
// later ones (rules are added in evaluation order).
type builder struct {
	round uint8
	out   []openflow.Flow
	keys  []string
	kinds []flowKind
	byKey map[string]int
}

func newBuilder(round uint8) *builder {
	return &builder{round: round, byKey: map[string]int{}}
}

func (b *builder) add(f openflow.Flow, k flowKind) { b.addKeyed(f, f.Key(), k) }

func (b *builder) addKeyed(f openflow.Flow, key string, k flowKind) {
	i, ok := b.byKey[key]
	if !ok {
		b.byKey[key] = len(b.out)
		b.out = append(b.out, f)
		b.keys = append(b.keys, key)
		b.kinds = append(b.kinds, k)
		return
	}
	switch {
	case b.kinds[i] == kindAction:
		// keep the first action flow
	case k == kindAction:
		b.out[i] = f
		b.kinds[i] = k
	default:
		// A fresh slice: the flow may be shared with the compiler's cache.
		acts := make([]openflow.Action, 0, len(b.out[i].Actions)+len(f.Actions))
		b.out[i].Actions = append(append(acts, b.out[i].Actions...), f.Actions...)
	}
}

func isolates(p *model.Policy, d model.Direction) bool {
	for _, x := range p.Isolates {
		if x == d {
			return true
		}
	}
	return false
}
