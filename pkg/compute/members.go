package compute

import (
	"slices"
	"strings"

	"github.com/tierflow/tierflow/pkg/model"
)

// Model objects of large groups are patched, not rebuilt. Rebuilding an
// address group of 10,000 pods means sorting 10,000 members by namespace
// and name on every read after a change, even when one pod changed; a
// patch copies the previous (immutable, shared) member list once and
// inserts or drops the few members that changed, found by binary search.
//
// Between two builds of a role's model object, the group notes which pods
// may have changed (joined, left, or changed address, node or ports), with
// where each was at the last build. A build patches from the last object
// when few pods changed and rebuilds in full otherwise (and a group stops
// noting once so many changed that a patch would not pay, as during an
// informer's initial list).

// podDelta is where a noted pod was at the last build.
type podDelta struct {
	member bool   // it was a member
	node   string // its node then
}

// maxDeltaFraction: a patch is used while fewer than 1/maxDeltaFraction
// of the members changed.
const maxDeltaFraction = 4

// notePod records, before a pod's membership or member value in g
// changes, what it was at the last build of each role's model object.
func (g *group) notePod(p *podState) {
	if g.atgBase != nil {
		g.atgDelta = g.noteIn(g.atgDelta, p)
		if len(g.atgDelta) > 16 && len(g.atgDelta)*maxDeltaFraction > g.pods.len() {
			g.atgBase, g.atgDelta = nil, nil
		}
	}
	if g.agBase != nil {
		g.agDelta = g.noteIn(g.agDelta, p)
		if len(g.agDelta) > 16 && len(g.agDelta)*maxDeltaFraction > g.pods.len() {
			g.agBase, g.agDelta = nil, nil
		}
	}
}

func (g *group) noteIn(d map[*podState]podDelta, p *podState) map[*podState]podDelta {
	if d == nil {
		d = map[*podState]podDelta{}
	}
	if _, ok := d[p]; !ok {
		d[p] = podDelta{member: g.pods.has(p), node: p.node()}
	}
	return d
}

// noteNodes makes the next address group build a full one: node members
// are few and rarely change.
func (g *group) noteNodes() { g.agBase, g.agDelta = nil, nil }

// compareMemberKey orders a member against a pod key the way
// comparePodMembers orders members (pods by namespace and name, then
// nodes).
func compareMemberKey(m model.GroupMember, k podKey) int {
	if m.Pod == nil {
		return 1
	}
	if c := strings.Compare(m.Pod.Namespace, k.namespace); c != 0 {
		return c
	}
	return strings.Compare(m.Pod.Name, k.name)
}

// patchMembers returns a new sorted member list: old without the members
// of the pods in drop, with adds (sorted) inserted. old is not modified.
func patchMembers(old []model.GroupMember, drop []podKey, adds []model.GroupMember) []model.GroupMember {
	dropIdx := make([]int, 0, len(drop))
	for _, k := range drop {
		if i, ok := slices.BinarySearchFunc(old, k, compareMemberKey); ok {
			dropIdx = append(dropIdx, i)
		}
	}
	slices.SortFunc(adds, comparePodMembers)
	return patchSorted(old, dropIdx, adds, comparePodMembers)
}

// patchSorted returns a new list sorted by cmp: old (sorted) without the
// elements at dropIdx, with adds (sorted) inserted. old is not modified.
func patchSorted[T any](old []T, dropIdx []int, adds []T, cmp func(a, b T) int) []T {
	slices.Sort(dropIdx)
	out := make([]T, 0, len(old)-len(dropIdx)+len(adds))
	d := 0
	// keep appends old[from:to] without the dropped indices.
	keep := func(from, to int) {
		for from < to {
			for d < len(dropIdx) && dropIdx[d] < from {
				d++
			}
			end := to
			if d < len(dropIdx) && dropIdx[d] < to {
				end = dropIdx[d]
			}
			out = append(out, old[from:end]...)
			from = end
			if from < to && d < len(dropIdx) && dropIdx[d] == from {
				from++
				d++
			}
		}
	}
	i := 0
	for _, a := range adds {
		pos, _ := slices.BinarySearchFunc(old, a, cmp)
		keep(i, pos)
		out = append(out, a)
		i = max(i, pos)
	}
	keep(i, len(old))
	return out
}

// spanList is a span as a sorted list of node names, kept the way member
// lists are: the last built list (shared by model objects, immutable)
// and the nodes whose count went to or from zero since. A group of 1,000
// nodes whose span gains or loses one node is patched, not re-sorted.
// The list is the span (valid) while it is built (never nil once built)
// and no node is noted: no flag of its own (every group has two spans,
// and the flags' 16 bytes took a group from the 480-byte size class to
// 512), nor a second slice holding the valid list (32 bytes more).
type spanList struct {
	base  []string
	delta map[string]struct{}
}

// valid reports whether base is the span.
func (s *spanList) valid() bool { return s.base != nil && s.delta == nil }

// changed notes that node entered or left the span.
func (s *spanList) changed(node string) {
	if s.base == nil {
		return
	}
	if s.delta == nil {
		s.delta = map[string]struct{}{}
	}
	s.delta[node] = struct{}{}
	if len(s.delta) > 16 && len(s.delta)*maxDeltaFraction > len(s.base) {
		s.base, s.delta = nil, nil
	}
}

// get returns the span of the nodes with a positive count.
func (s *spanList) get(counts *counts[string]) []string {
	if s.valid() {
		return s.base
	}
	var out []string
	if s.base != nil {
		var dropIdx []int
		var adds []string
		for n := range s.delta {
			i, in := slices.BinarySearch(s.base, n)
			now := counts.count(n) > 0
			switch {
			case in && !now:
				dropIdx = append(dropIdx, i)
			case now && !in:
				adds = append(adds, n)
			}
		}
		if len(dropIdx)+len(adds) == 0 {
			out = s.base
		} else {
			slices.Sort(adds)
			out = patchSorted(s.base, dropIdx, adds, strings.Compare)
		}
	} else {
		out = make([]string, 0, counts.len())
		for n := range counts.keys() {
			out = append(out, n)
		}
		slices.Sort(out)
	}
	s.base, s.delta = out, nil // out is never nil: the span is valid
	return out
}

// podMembersByNode builds an applied-to group's members from scratch, one
// entry per node of its span (sorted, as the list must be). The lists
// share one backing array, carved by the per-node counts (most nodes hold
// one or two of a group's pods: one allocation instead of one per node);
// each is capped, so appending to one cannot overwrite the next.
func (g *group) podMembersByNode() model.MembersByNode {
	span := g.atgSpan()
	byNode := make(model.MembersByNode, len(span))
	all := make([]model.GroupMember, g.pods.len())
	off := 0
	for i, n := range span {
		c := g.podsPerNode.count(n)
		byNode[i] = model.NodeMembers{Node: n, Members: all[off : off : off+c]}
		off += c
	}
	for p := range g.pods.all() {
		i, _ := byNode.Index(p.node())
		byNode[i].Members = append(byNode[i].Members, p.member)
	}
	for _, e := range byNode {
		slices.SortFunc(e.Members, comparePodMembers)
	}
	return byNode
}

// patchedMembersByNode patches base's members with the noted pods: only
// the lists of the nodes those pods were or are on are copied.
func (g *group) patchedMembersByNode(base model.MembersByNode, delta map[*podState]podDelta) model.MembersByNode {
	drops := map[string][]podKey{}
	adds := map[string][]model.GroupMember{}
	var touched []string
	for p, was := range delta {
		if was.member {
			if _, seen := drops[was.node]; !seen {
				touched = append(touched, was.node)
			}
			drops[was.node] = append(drops[was.node], p.key())
		}
		if g.pods.has(p) {
			if _, seen := adds[p.node()]; !seen {
				touched = append(touched, p.node())
			}
			adds[p.node()] = append(adds[p.node()], p.member)
		}
	}
	slices.Sort(touched)
	touched = slices.Compact(touched)
	// Merge base's entries with the touched nodes' patched lists, in node
	// order; a node left with no member has no entry.
	byNode := make(model.MembersByNode, 0, len(base)+len(touched))
	b := 0
	for _, node := range touched {
		for b < len(base) && base[b].Node < node {
			byNode = append(byNode, base[b])
			b++
		}
		var old []model.GroupMember
		if b < len(base) && base[b].Node == node {
			old = base[b].Members
			b++
		}
		if ms := patchMembers(old, drops[node], adds[node]); len(ms) > 0 {
			byNode = append(byNode, model.NodeMembers{Node: node, Members: ms})
		}
	}
	return append(byNode, base[b:]...)
}

// addressMembers builds an address group's members from scratch.
func (g *group) addressMembers() []model.GroupMember {
	ms := make([]model.GroupMember, 0, g.pods.len()+g.nodeMembers().len())
	for p := range g.pods.all() {
		ms = append(ms, p.member)
	}
	for n := range g.nodeMembers().all() {
		ms = append(ms, n.member)
	}
	slices.SortFunc(ms, comparePodMembers)
	return ms
}

// patchedAddressMembers patches base's members with the noted pods.
func (g *group) patchedAddressMembers(base []model.GroupMember, delta map[*podState]podDelta) []model.GroupMember {
	if len(delta) == 0 {
		return base // immutable: shared with the previous object
	}
	var drops []podKey
	var adds []model.GroupMember
	for p, was := range delta {
		if was.member {
			drops = append(drops, p.key())
		}
		if g.pods.has(p) {
			adds = append(adds, p.member)
		}
	}
	return patchMembers(base, drops, adds)
}
