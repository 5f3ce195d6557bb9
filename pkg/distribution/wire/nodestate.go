package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tierflow/tierflow/pkg/model"
)

// NodeState is the slice of the computed model one node holds: see the
// package doc for what it contains. Objects in it are shared, read-only
// values: replace them, never modify them in place.
type NodeState struct {
	Node            string                           `json:"node"`
	Policies        map[string]*model.Policy         `json:"policies"`
	AppliedToGroups map[string]*model.AppliedToGroup `json:"appliedToGroups"`
	AddressGroups   map[string]*model.AddressGroup   `json:"addressGroups"`
	// Pods are the node's pods the agent admits (nil: none).
	Pods *model.NodePods `json:"pods,omitempty"`
}

// NewNodeState returns an empty state for node.
func NewNodeState(node string) *NodeState {
	return &NodeState{
		Node:            node,
		Policies:        map[string]*model.Policy{},
		AppliedToGroups: map[string]*model.AppliedToGroup{},
		AddressGroups:   map[string]*model.AddressGroup{},
	}
}

// Clone returns a copy whose maps can be changed independently (the
// objects are shared).
func (s *NodeState) Clone() *NodeState {
	c := NewNodeState(s.Node)
	for k, v := range s.Policies {
		c.Policies[k] = v
	}
	for k, v := range s.AppliedToGroups {
		c.AppliedToGroups[k] = v
	}
	for k, v := range s.AddressGroups {
		c.AddressGroups[k] = v
	}
	c.Pods = s.Pods
	return c
}

// ForNode computes what node should hold, given a snapshot of the whole
// model. It is the reference the distribution stream must reproduce on
// every agent.
func ForNode(snap *model.Snapshot, node string) *NodeState {
	st := NewNodeState(node)
	for _, p := range snap.Policies {
		if !PolicyInSpan(p, node) {
			continue
		}
		st.Policies[p.ID] = PolicyForNode(p)
		for _, id := range p.AppliedToGroups {
			if g := snap.AppliedToGroups[id]; g != nil {
				st.AppliedToGroups[id] = AppliedToGroupForNode(g, node)
			}
		}
		for _, id := range AddressGroupRefs(p) {
			if g := snap.AddressGroups[id]; g != nil {
				st.AddressGroups[id] = AddressGroupForNode(g)
			}
		}
	}
	if np := snap.NodePods[node]; np != nil {
		st.Pods = NodePodsForNode(np)
	}
	return st
}

// NodePodsForNode is np as sent to its node: without its span.
func NodePodsForNode(np *model.NodePods) *model.NodePods {
	c := *np
	c.Span = nil
	return &c
}

// PolicyInSpan reports whether node needs p.
func PolicyInSpan(p *model.Policy, node string) bool {
	_, ok := slices.BinarySearch(p.Span, node)
	if ok {
		return true
	}
	// Span is documented as sorted; do not trust it blindly, since a
	// missed node is a policy silently not enforced.
	return slices.Contains(p.Span, node)
}

// PolicyForNode is p as sent to an agent: without its span.
func PolicyForNode(p *model.Policy) *model.Policy {
	c := *p
	c.Span = nil
	return &c
}

// AppliedToGroupForNode is g as sent to node: only node's members, in
// canonical order, without span and without generation — the group's
// generation counts changes on every node, and a change on another node
// is not sent to this one.
func AppliedToGroupForNode(g *model.AppliedToGroup, node string) *model.AppliedToGroup {
	c := model.AppliedToGroup{
		Meta:          model.Meta{ID: g.ID},
		Selector:      g.Selector,
		MembersByNode: model.MembersByNode{},
	}
	if ms := g.MembersByNode.Get(node); len(ms) > 0 {
		c.MembersByNode = model.MembersByNode{{Node: node, Members: SortedMembers(ms)}}
	}
	return &c
}

// AddressGroupForNode is g as sent to agents: members in canonical
// order, without span and without generation (the engine's generation
// also moves when only the span changes, which agents need not hear of;
// the stream's versions order the changes instead).
func AddressGroupForNode(g *model.AddressGroup) *model.AddressGroup {
	return &model.AddressGroup{
		Meta:     model.Meta{ID: g.ID},
		Selector: g.Selector,
		Members:  SortedMembers(g.Members),
	}
}

// SortedMembers returns a copy of ms in canonical order (nil when empty),
// the canonical order of members on the wire and in NodeState.
func SortedMembers(ms []model.GroupMember) []model.GroupMember {
	if len(ms) == 0 {
		return nil
	}
	c := slices.Clone(ms)
	slices.SortFunc(c, compareMembers)
	return c
}

// compareMembers is the canonical member order: node members by node
// name, then pod members by namespace and name.
func compareMembers(a, b model.GroupMember) int {
	switch {
	case a.Pod == nil && b.Pod == nil:
		return strings.Compare(a.Node, b.Node)
	case a.Pod == nil:
		return -1
	case b.Pod == nil:
		return 1
	}
	if c := strings.Compare(a.Pod.Namespace, b.Pod.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Pod.Name, b.Pod.Name)
}

// AddressGroupRefs lists the address groups p's rules use (peers and
// named-port resolution groups, model.Rule.NamedPortGroups), without
// duplicates.
func AddressGroupRefs(p *model.Policy) []string {
	var ids []string
	for i := range p.Rules {
		for _, id := range p.Rules[i].Peer.AddressGroups {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		for _, id := range p.Rules[i].NamedPortGroups {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Delta is what an Update changed, in whole objects: the form an agent's
// rule cache consumes (see client.Receiver). Address-group patches are
// already applied: AddressGroups holds the resulting groups.
type Delta struct {
	// Full means: the node's state is exactly the objects listed; anything
	// else the receiver holds is gone.
	Full    bool   `json:"full,omitempty"`
	Version uint64 `json:"version"`

	Policies               []*model.Policy         `json:"policies,omitempty"`
	DeletedPolicies        []string                `json:"deletedPolicies,omitempty"`
	AppliedToGroups        []*model.AppliedToGroup `json:"appliedToGroups,omitempty"`
	DeletedAppliedToGroups []string                `json:"deletedAppliedToGroups,omitempty"`
	AddressGroups          []*model.AddressGroup   `json:"addressGroups,omitempty"`
	DeletedAddressGroups   []string                `json:"deletedAddressGroups,omitempty"`
	// NodePods replaces the node's pods (nil: unchanged).
	NodePods *model.NodePods `json:"nodePods,omitempty"`

	// Trace is the update's controller timing (Update.Trace) and Received
	// when the agent's stream delivered it (zero when not from a stream):
	// for measuring realization latency by stage.
	Trace    *Trace    `json:"trace,omitempty"`
	Received time.Time `json:"-"`
}

// FullDelta is the Delta that installs s from nothing.
func (s *NodeState) FullDelta(version uint64) *Delta {
	d := &Delta{Full: true, Version: version, NodePods: s.Pods}
	for _, p := range s.Policies {
		d.Policies = append(d.Policies, p)
	}
	for _, g := range s.AppliedToGroups {
		d.AppliedToGroups = append(d.AppliedToGroups, g)
	}
	for _, g := range s.AddressGroups {
		d.AddressGroups = append(d.AddressGroups, g)
	}
	return d
}

// Apply applies u to s and returns what changed. On error s is unchanged:
// the update does not fit the state (a patch for a group the node does not
// hold), and the stream must be resynced.
func (s *NodeState) Apply(u *Update) (*Delta, error) {
	d, err := s.deltaOf(u)
	if err != nil {
		return nil, err
	}
	s.ApplyDelta(d)
	return d, nil
}

// ApplyDelta makes s the state after d: a Full delta replaces everything;
// otherwise groups and policies are upserted, then policies and groups
// deleted, the order of an Update. It is the one place a node's state
// changes: Apply turns an Update into the Delta it amounts to and applies
// that. Objects are shared, read-only values: only the maps change.
func (s *NodeState) ApplyDelta(d *Delta) {
	if d.Full {
		*s = *NewNodeState(s.Node)
	}
	for _, g := range d.AppliedToGroups {
		s.AppliedToGroups[g.ID] = g
	}
	for _, g := range d.AddressGroups {
		s.AddressGroups[g.ID] = g
	}
	for _, p := range d.Policies {
		s.Policies[p.ID] = p
	}
	for _, id := range d.DeletedPolicies {
		delete(s.Policies, id)
	}
	for _, id := range d.DeletedAppliedToGroups {
		delete(s.AppliedToGroups, id)
	}
	for _, id := range d.DeletedAddressGroups {
		delete(s.AddressGroups, id)
	}
	if d.NodePods != nil {
		s.Pods = d.NodePods
	}
}

// deltaOf is what u changes in s, in whole objects (address-group patches
// applied to the groups s holds or u upserts), without changing s: an
// error leaves the state as it was.
func (s *NodeState) deltaOf(u *Update) (*Delta, error) {
	if err := u.validate(); err != nil {
		return nil, err
	}
	d := &Delta{Full: u.Full, Version: u.Version, NodePods: u.NodePods, Trace: u.Trace}
	if u.Full {
		if len(u.DeletedPolicies)+len(u.DeletedAppliedToGroups)+len(u.DeletedAddressGroups)+len(u.AddressGroupPatches) > 0 {
			return nil, fmt.Errorf("full update %d carries deletes or patches", u.Version)
		}
		// An object listed twice is held once, as the last one listed.
		d.Policies = lastOfEachID(u.Policies, func(p *model.Policy) string { return p.ID })
		for _, g := range lastOfEachID(u.AppliedToGroups, func(g *model.AppliedToGroup) string { return g.ID }) {
			d.AppliedToGroups = append(d.AppliedToGroups, normalizeATG(g))
		}
		for _, g := range lastOfEachID(u.AddressGroups, func(g *model.AddressGroup) string { return g.ID }) {
			d.AddressGroups = append(d.AddressGroups, normalizeAG(g))
		}
		return d, nil
	}

	// Check everything before computing anything.
	for i := range u.AddressGroupPatches {
		id := u.AddressGroupPatches[i].ID
		if s.AddressGroups[id] == nil && !slices.ContainsFunc(u.AddressGroups, func(g *model.AddressGroup) bool { return g.ID == id }) {
			return nil, fmt.Errorf("update %d patches address group %q the node does not hold", u.Version, id)
		}
	}

	for _, g := range u.AppliedToGroups {
		d.AppliedToGroups = append(d.AppliedToGroups, normalizeATG(g))
	}
	// Each changed address group once, in its final form: upserts, then
	// patches on top of what the node holds or this update upserts.
	changedAG := map[string]*model.AddressGroup{}
	var agOrder []string
	changeAG := func(g *model.AddressGroup) {
		if _, seen := changedAG[g.ID]; !seen {
			agOrder = append(agOrder, g.ID)
		}
		changedAG[g.ID] = g
	}
	for _, g := range u.AddressGroups {
		changeAG(normalizeAG(g))
	}
	for i := range u.AddressGroupPatches {
		pt := &u.AddressGroupPatches[i]
		old, ok := changedAG[pt.ID]
		if !ok {
			old = s.AddressGroups[pt.ID]
		}
		changeAG(applyPatch(old, pt))
	}
	for _, id := range agOrder {
		d.AddressGroups = append(d.AddressGroups, changedAG[id])
	}
	d.Policies = u.Policies

	// Deletes name only objects there are after the upserts, once each.
	d.DeletedPolicies = deletions(u.DeletedPolicies, s.Policies, d.Policies, func(p *model.Policy) string { return p.ID })
	d.DeletedAppliedToGroups = deletions(u.DeletedAppliedToGroups, s.AppliedToGroups, d.AppliedToGroups, func(g *model.AppliedToGroup) string { return g.ID })
	d.DeletedAddressGroups = deletions(u.DeletedAddressGroups, s.AddressGroups, d.AddressGroups, func(g *model.AddressGroup) string { return g.ID })
	return d, nil
}

// lastOfEachID drops every object a later one with the same ID replaces
// (xs itself when there are none, the usual case).
func lastOfEachID[T any](xs []T, id func(T) string) []T {
	last := make(map[string]int, len(xs))
	for i, x := range xs {
		last[id(x)] = i
	}
	if len(last) == len(xs) {
		return xs
	}
	out := make([]T, 0, len(last))
	for i, x := range xs {
		if last[id(x)] == i {
			out = append(out, x)
		}
	}
	return out
}

// deletions lists the ids, once each, of objects held or upserted: the
// deletes that change something.
func deletions[T any](ids []string, held map[string]T, upserted []T, id func(T) string) []string {
	if len(ids) == 0 {
		return nil
	}
	present := make(map[string]bool, len(upserted))
	for _, x := range upserted {
		present[id(x)] = true
	}
	var out []string
	gone := map[string]bool{}
	for _, i := range ids {
		if _, ok := held[i]; (ok || present[i]) && !gone[i] {
			gone[i] = true
			out = append(out, i)
		}
	}
	return out
}

func normalizeATG(g *model.AppliedToGroup) *model.AppliedToGroup {
	if g.MembersByNode == nil {
		c := *g
		c.MembersByNode = model.MembersByNode{}
		return &c
	}
	return g
}

func normalizeAG(g *model.AddressGroup) *model.AddressGroup {
	if len(g.Members) == 0 && g.Members != nil {
		c := *g
		c.Members = nil
		return &c
	}
	return g
}

// applyPatch returns a new group: old with pt applied, members in
// canonical order.
func applyPatch(old *model.AddressGroup, pt *AddressGroupPatch) *model.AddressGroup {
	byKey := make(map[string]model.GroupMember, len(old.Members)+len(pt.Upserted))
	for _, m := range old.Members {
		byKey[MemberKey(&m)] = m
	}
	for _, k := range pt.Removed {
		delete(byKey, k)
	}
	for _, m := range pt.Upserted {
		byKey[MemberKey(&m)] = m
	}
	members := make([]model.GroupMember, 0, len(byKey))
	for _, m := range byKey {
		members = append(members, m)
	}
	sel := old.Selector
	if pt.Selector != "" {
		sel = pt.Selector
	}
	return &model.AddressGroup{
		Meta:     model.Meta{ID: old.ID},
		Selector: sel,
		Members:  SortedMembers(members),
	}
}

// DiffMembers computes the patch that turns old into new (both in any
// order): members of new that are absent from old or differ, and keys of
// old members absent from new.
func DiffMembers(old, new []model.GroupMember) (upserted []model.GroupMember, removed []string) {
	oldBy := make(map[string]*model.GroupMember, len(old))
	for i := range old {
		oldBy[MemberKey(&old[i])] = &old[i]
	}
	seen := make(map[string]bool, len(new))
	for i := range new {
		k := MemberKey(&new[i])
		seen[k] = true
		if o, ok := oldBy[k]; !ok || !MemberEqual(o, &new[i]) {
			upserted = append(upserted, new[i])
		}
	}
	for k := range oldBy {
		if !seen[k] {
			removed = append(removed, k)
		}
	}
	slices.Sort(removed)
	return upserted, removed
}

// MemberEqual compares two members field by field.
func MemberEqual(a, b *model.GroupMember) bool {
	if (a.Pod == nil) != (b.Pod == nil) || (a.Pod != nil && *a.Pod != *b.Pod) {
		return false
	}
	return a.Node == b.Node && slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Ports, b.Ports)
}

// MembersEqual compares two member lists in canonical order.
func MembersEqual(a, b []model.GroupMember) bool {
	return slices.EqualFunc(a, b, func(x, y model.GroupMember) bool { return MemberEqual(&x, &y) })
}

// Diff lists the differences between two states object by object (empty
// when they are equal). Objects are compared by their wire encoding, which
// is what an agent receives.
func Diff(want, got *NodeState) []string {
	var out []string
	out = diffMap("policy", want.Policies, got.Policies, out)
	out = diffMap("appliedToGroup", want.AppliedToGroups, got.AppliedToGroups, out)
	out = diffMap("addressGroup", want.AddressGroups, got.AddressGroups, out)
	wb, _ := json.Marshal(nodePodsOrEmpty(want))
	gb, _ := json.Marshal(nodePodsOrEmpty(got))
	if string(wb) != string(gb) {
		out = append(out, fmt.Sprintf("pods differ:\n  want %s\n  got  %s", wb, gb))
	}
	return out
}

// nodePodsOrEmpty is s's pods, or no pods: a state without a NodePods
// object and one with an empty list are the same.
func nodePodsOrEmpty(s *NodeState) []model.NodePod {
	if s.Pods == nil {
		return nil
	}
	if len(s.Pods.Pods) == 0 {
		return nil
	}
	return s.Pods.Pods
}

func diffMap[T any](kind string, want, got map[string]T, out []string) []string {
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			out = append(out, fmt.Sprintf("%s %s missing", kind, id))
			continue
		}
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		if string(wb) != string(gb) {
			out = append(out, fmt.Sprintf("%s %s differs:\n  want %s\n  got  %s", kind, id, wb, gb))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			out = append(out, fmt.Sprintf("%s %s unexpected", kind, id))
		}
	}
	slices.Sort(out)
	return out
}

// validate rejects updates no correct controller sends: missing objects
// or IDs, members without a pod or node.
func (u *Update) validate() error {
	for _, p := range u.Policies {
		if p == nil || p.ID == "" {
			return fmt.Errorf("update %d: policy without ID", u.Version)
		}
	}
	for _, g := range u.AppliedToGroups {
		if g == nil || g.ID == "" {
			return fmt.Errorf("update %d: applied-to group without ID", u.Version)
		}
	}
	for _, g := range u.AddressGroups {
		if g == nil || g.ID == "" {
			return fmt.Errorf("update %d: address group without ID", u.Version)
		}
	}
	for i := range u.AddressGroupPatches {
		if u.AddressGroupPatches[i].ID == "" {
			return fmt.Errorf("update %d: address group patch without ID", u.Version)
		}
	}
	return nil
}
