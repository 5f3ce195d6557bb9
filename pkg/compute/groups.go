package compute

import (
	"strings"

	"github.com/tierflow/tierflow/pkg/model"
)

func hasNamedPort(ports []model.NamedPort, name string) bool {
	for _, np := range ports {
		if np.Name == name {
			return true
		}
	}
	return false
}

// group is one normalized selector's members. The same group serves as an
// AppliedToGroup (when some policy's subject normalizes to it) and as an
// AddressGroup (when some rule's peer does); each role has its own ID,
// generation and cached model object.
type group struct {
	// spec's selectors carry the index hints (hint, nsHint): copies here
	// took 80 bytes of every group, and a group's size class from 576 to
	// 704 bytes (9 MiB with the 75,000 groups of small namespaces).
	spec groupSpec

	pods set[*podState]
	// nodes are a node group's members (nil for the others, which are
	// most groups: a set in place took 24 bytes more of every group).
	nodes       *set[*nodeState]
	podsPerNode counts[string]

	// AppliedToGroup role.
	atgID    string
	atgSlot  pendSlot
	atgRefs  int
	atgGen   int64
	atgCache *model.AppliedToGroup
	// atgBase is the last built applied-to group and atgDelta the pods
	// noted since (see members.go); nil base: the next build is a full one.
	atgBase     *model.AppliedToGroup
	atgDelta    map[*podState]podDelta
	atgPolicies set[*policyState]
	// agUsers counts, per address group, the policies applied to this group
	// that use that address group: the address group's span includes this
	// group's span while the count is positive.
	agUsers counts[*group]
	span    spanList // of podsPerNode
	// spanEpoch is the engine call (epoch) that last reported this
	// group's span change to its policies.
	spanEpoch uint64

	// AddressGroup role.
	agID     string
	agSlot   pendSlot
	agRefs   int
	agGen    int64
	agCache  *model.AddressGroup
	agBase   *model.AddressGroup
	agDelta  map[*podState]podDelta
	atgUsers set[*group]
	// spanCount counts, per node, the applied-to groups in atgUsers whose
	// span has that node.
	spanCount counts[string]
	agSpan    spanList // of spanCount
}

// noNodes is the (always empty) node set of the groups that have none.
var noNodes set[*nodeState]

// nodeMembers are the group's node members, to read (never modify).
func (g *group) nodeMembers() *set[*nodeState] {
	if g.nodes == nil {
		return &noNodes
	}
	return g.nodes
}

// hint is the index hint of the group's pod or node selector.
func (g *group) hint() indexHint {
	switch g.spec.kind {
	case groupNodes:
		return g.spec.nodeSel.hint
	case groupPods:
		return g.spec.podSel.hint
	}
	return indexHint{}
}

// nsHint is the index hint of the group's namespace selector.
func (g *group) nsHint() indexHint {
	if g.spec.nsSel == nil {
		return indexHint{}
	}
	return g.spec.nsSel.hint
}

func (g *group) atgSpan() []string { return g.span.get(&g.podsPerNode) }

func (g *group) addressSpan() []string { return g.agSpan.get(&g.spanCount) }

func (e *Engine) touchGroup(g *group) {
	if g.atgRefs > 0 {
		g.atgCache = nil
		g.atgGen = e.record(&g.atgSlot, KindAppliedToGroup, Updated, g.atgID, g.atgGen)
	}
	if g.agRefs > 0 {
		g.agCache = nil
		g.agGen = e.record(&g.agSlot, KindAddressGroup, Updated, g.agID, g.agGen)
	}
}

// agSpanChanged notes a change of an address group's span (not of its
// members): reported, but the generation stays.
func (e *Engine) agSpanChanged(g *group, node string) {
	g.agSpan.changed(node)
	if g.agRefs > 0 {
		g.agCache = nil
		g.agGen = e.recordSpan(&g.agSlot, KindAddressGroup, g.agID, g.agGen)
	}
}

// getGroup returns the group of spec, creating it (and computing its
// members through the label indexes) if needed.
func (e *Engine) getGroup(spec groupSpec) *group {
	if g := e.groups[spec.key]; g != nil {
		return g
	}
	h := keyHash(spec.key)
	g := &group{spec: spec}
	g.atgID, g.agID = groupIDs(h)
	e.groups[spec.key] = g
	e.byKeyHash[h] = g
	switch spec.kind {
	case groupNamedPort:
		e.namedPortGroups[spec.portName()] = g
		for _, p := range e.pods {
			if hasNamedPort(p.ports(), spec.portName()) {
				e.addPod(g, p)
			}
		}
	case groupNodes:
		e.nodeGroups.add(g.hint(), g)
		visit := func(n *nodeState) {
			if spec.nodeSel.Matches(n.labels) {
				e.addNode(g, n)
			}
		}
		if !e.nodeLabels.candidates(g.hint(), visit) {
			for _, n := range e.nodes {
				visit(n)
			}
		}
	case groupPods:
		if spec.nsSel == nil {
			ns := e.nsFor(spec.namespace)
			ns.groups.add(g.hint(), g)
			ns.nGroups++
			e.addMatchingPodsOf(g, ns)
			break
		}
		e.nsGroups.add(g.nsHint(), g)
		e.clusterPodGroups.add(g.hint(), g)
		visit := func(ns *nsState) {
			if spec.nsSel.Matches(ns.labels) {
				e.addMatchingPodsOf(g, ns)
			}
		}
		if !e.nsLabels.candidates(g.nsHint(), visit) {
			for _, ns := range e.namespaces {
				visit(ns)
			}
		}
	}
	return g
}

// addMatchingPodsOf adds to g the pods of ns its pod selector matches.
func (e *Engine) addMatchingPodsOf(g *group, ns *nsState) {
	visit := func(p *podState) {
		if !g.pods.has(p) && g.spec.podSel.Matches(p.labels) {
			e.addPod(g, p)
		}
	}
	if !ns.podLabels.candidates(g.hint(), visit) {
		for _, p := range ns.pods.pods {
			visit(p)
		}
	}
}

// maybeDropGroup forgets a group no policy uses any more.
func (e *Engine) maybeDropGroup(g *group) {
	if g.atgRefs > 0 || g.agRefs > 0 || e.groups[g.spec.key] != g {
		// In use, or dropped already: a policy whose subject is also one
		// of its peers releases that group twice, and a second drop would
		// count its namespace's groups down twice (dropping the namespace's
		// state while another group still lives in it).
		return
	}
	for p := range g.pods.all() {
		p.groups.remove(g)
	}
	for n := range g.nodeMembers().all() {
		n.groups.remove(g)
	}
	switch {
	case g.spec.kind == groupNamedPort:
		delete(e.namedPortGroups, g.spec.portName())
	case g.spec.kind == groupNodes:
		e.nodeGroups.remove(g.hint(), g)
	case g.spec.nsSel == nil:
		if ns := e.namespaces[g.spec.namespace]; ns != nil {
			ns.groups.remove(g.hint(), g)
			ns.nGroups--
			e.maybeDropNamespace(ns)
		}
	default:
		e.nsGroups.remove(g.nsHint(), g)
		e.clusterPodGroups.remove(g.hint(), g)
	}
	delete(e.groups, g.spec.key)
	if h, ok := parseGroupID("ag", g.agID); ok && e.byKeyHash[h] == g {
		delete(e.byKeyHash, h)
	}
}

func (e *Engine) addPod(g *group, p *podState) {
	g.notePod(p)
	g.pods.add(p)
	p.groups.add(g)
	if g.podsPerNode.inc(p.node()) {
		e.atgSpanChanged(g, p.node(), 1)
	}
	e.touchGroup(g)
}

func (e *Engine) removePod(g *group, p *podState) {
	if !g.pods.has(p) {
		return
	}
	g.notePod(p)
	g.pods.remove(p)
	p.groups.remove(g)
	if g.podsPerNode.add(p.node(), -1) == 0 {
		e.atgSpanChanged(g, p.node(), -1)
	}
	e.touchGroup(g)
}

func (e *Engine) addNode(g *group, n *nodeState) {
	g.noteNodes()
	if g.nodes == nil {
		g.nodes = &set[*nodeState]{}
	}
	g.nodes.add(n)
	n.groups.add(g)
	e.touchGroup(g)
}

func (e *Engine) removeNode(g *group, n *nodeState) {
	if !g.nodeMembers().has(n) {
		return
	}
	g.noteNodes()
	g.nodes.remove(n)
	n.groups.remove(g)
	e.touchGroup(g)
}

// atgSpanChanged propagates a node entering (delta 1) or leaving (-1) an
// applied-to group's span to the policies applied to it and to the address
// groups those policies use.
//
// The policies keep their generation (see recordSpan), and are visited once
// per engine call however many nodes the call adds or removes: with 10,000
// policies on one group, a batch of pods landing on new nodes costs 10,000
// records, not 10,000 per node.
func (e *Engine) atgSpanChanged(g *group, node string, delta int) {
	g.span.changed(node)
	if g.spanEpoch != e.epoch {
		g.spanEpoch = e.epoch
		for p := range g.atgPolicies.all() {
			p.cache = nil
			p.gen = e.recordSpan(&p.slot, KindPolicy, p.c.id, p.gen)
		}
	}
	for ag := range g.agUsers.keys() {
		e.addSpan(ag, node, delta)
	}
}

func (e *Engine) addSpan(ag *group, node string, delta int) {
	switch ag.spanCount.add(node, delta) {
	case 0:
		e.agSpanChanged(ag, node)
	case 1:
		if delta > 0 {
			e.agSpanChanged(ag, node)
		}
	}
}

// link records that a policy applied to atg uses address group ag.
func (e *Engine) link(atg, ag *group) {
	if atg.agUsers.add(ag, 1) > 1 {
		return
	}
	ag.atgUsers.add(atg)
	for n := range atg.podsPerNode.keys() {
		e.addSpan(ag, n, 1)
	}
}

func (e *Engine) unlink(atg, ag *group) {
	if atg.agUsers.add(ag, -1) > 0 {
		return
	}
	ag.atgUsers.remove(atg)
	for n := range atg.podsPerNode.keys() {
		e.addSpan(ag, n, -1)
	}
}

func comparePodMembers(a, b model.GroupMember) int {
	switch {
	case a.Pod != nil && b.Pod != nil:
		if c := strings.Compare(a.Pod.Namespace, b.Pod.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Pod.Name, b.Pod.Name)
	case a.Pod != nil:
		return -1
	case b.Pod != nil:
		return 1
	}
	return strings.Compare(a.Node, b.Node)
}

func (e *Engine) appliedToGroup(g *group) *model.AppliedToGroup {
	if g.atgCache != nil {
		return g.atgCache
	}
	var byNode model.MembersByNode
	if g.atgBase != nil {
		byNode = g.patchedMembersByNode(g.atgBase.MembersByNode, g.atgDelta)
	} else {
		byNode = g.podMembersByNode()
	}
	g.atgCache = &model.AppliedToGroup{
		Meta:          model.Meta{ID: g.atgID, Generation: g.atgGen, Span: g.atgSpan()},
		Selector:      g.spec.key,
		MembersByNode: byNode,
	}
	g.atgBase, g.atgDelta = g.atgCache, nil
	return g.atgCache
}

func (e *Engine) addressGroup(g *group) *model.AddressGroup {
	if g.agCache != nil {
		return g.agCache
	}
	var ms []model.GroupMember
	if g.agBase != nil {
		ms = g.patchedAddressMembers(g.agBase.Members, g.agDelta)
	} else {
		ms = g.addressMembers()
	}
	g.agCache = &model.AddressGroup{
		Meta:     model.Meta{ID: g.agID, Generation: g.agGen, Span: g.addressSpan()},
		Selector: g.spec.key,
		Members:  ms,
	}
	g.agBase, g.agDelta = g.agCache, nil
	return g.agCache
}
