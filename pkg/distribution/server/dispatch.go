package server

import (
	"reflect"
	"slices"
	"time"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// round is one dispatch round's changes: the new value of every changed
// object (nil: deleted).
type round struct {
	policies map[string]*model.Policy
	atgs     map[string]*model.AppliedToGroup
	ags      map[string]*agChange
	nodePods map[string]*model.NodePods // by node; nil: none
	// changed is when the first change the round carries was reported
	// (wire.Trace.Changed of its updates; zero when not known).
	changed time.Time
}

// agChange is an address group's change, computed once per round and sent
// as a patch to every agent holding the group.
type agChange struct {
	new      *model.AddressGroup // wire form; nil: deleted
	upserted []model.GroupMember
	removed  []string
	patch    bool // a patch is smaller than the group
}

// takeDirty returns the objects changed since the last round, whether
// everything must be compared, and the highest generation of the changes
// seen so far.
func (s *Server) takeDirty() (map[objKey]struct{}, bool, int64, time.Time) {
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	d, all, since := s.dirty, s.dirtyAll, s.dirtySince
	s.dirty, s.dirtyAll, s.dirtySince = map[objKey]struct{}{}, false, time.Time{}
	return d, all, s.dirtyClock, since
}

// dispatchRound reads the changed objects from the source and queues each
// session's update.
func (s *Server) dispatchRound() {
	start := time.Now()
	dirty, all, clock, changed := s.takeDirty()
	if len(dirty) == 0 && !all {
		return
	}
	r := &round{
		policies: map[string]*model.Policy{},
		atgs:     map[string]*model.AppliedToGroup{},
		ags:      map[string]*agChange{},
		nodePods: map[string]*model.NodePods{},
		changed:  changed,
	}
	newAG := map[string]*model.AddressGroup{}
	var snap *model.Snapshot
	if all {
		// Read outside s.mu: the source may be slow.
		snap = s.src.Snapshot()
		for _, p := range snap.Policies {
			r.policies[p.ID] = p
		}
		for id, g := range snap.AppliedToGroups {
			r.atgs[id] = g
		}
		for id, g := range snap.AddressGroups {
			newAG[id] = g
		}
		// Objects distributed but gone from the snapshot were deleted.
		s.mu.Lock()
		for id := range s.policies {
			if _, ok := r.policies[id]; !ok {
				r.policies[id] = nil
			}
		}
		for id := range s.atgs {
			if _, ok := r.atgs[id]; !ok {
				r.atgs[id] = nil
			}
		}
		for id := range s.ags {
			if _, ok := newAG[id]; !ok {
				newAG[id] = nil
			}
		}
		s.mu.Unlock()
	}
	for k := range dirty {
		switch k.kind {
		case compute.KindPolicy:
			r.policies[k.id] = get(s.src.Policy, k.id)
		case compute.KindAppliedToGroup:
			r.atgs[k.id] = get(s.src.AppliedToGroup, k.id)
		case compute.KindAddressGroup:
			newAG[k.id] = get(s.src.AddressGroup, k.id)
		}
	}
	s.readNodePods(r, dirty, snap, clock)

	s.mu.Lock()
	for id, g := range newAG {
		old := s.ags[id]
		ch := &agChange{}
		if g != nil {
			ch.new = wire.AddressGroupForNode(g)
			if old != nil {
				ch.upserted, ch.removed = wire.DiffMembers(old.Members, ch.new.Members)
				ch.patch = len(ch.upserted)+len(ch.removed) < len(ch.new.Members)
			}
		}
		if old == nil && ch.new == nil {
			continue
		}
		if old != nil && ch.new != nil && old.Selector == ch.new.Selector && len(ch.upserted) == 0 && len(ch.removed) == 0 {
			continue // nothing an agent holds changed (e.g. only its span)
		}
		r.ags[id] = ch
		if ch.new == nil {
			delete(s.ags, id)
		} else {
			s.ags[id] = ch.new
		}
	}
	for id, p := range r.policies {
		if old := s.policies[id]; old != nil && s.byRef[refKey(old.Source)] == id {
			delete(s.byRef, refKey(old.Source))
		}
		if p == nil {
			delete(s.policies, id)
			delete(s.refs, id)
		} else {
			s.policies[id] = p
			s.byRef[refKey(p.Source)] = id
			if old := s.refs[id]; old == nil || old.src != p {
				s.refs[id] = newPolicyRefs(p)
			}
		}
	}
	for id, g := range r.atgs {
		if g == nil {
			delete(s.atgs, id)
		} else {
			s.atgs[id] = g
		}
	}
	s.applyNodePods(r, all)
	now := time.Now()
	for _, ss := range s.sessions {
		s.queueDelta(ss, r, now)
	}
	summaries := s.real.policiesChanged(r.policies, s.policies)
	s.mu.Unlock()

	s.emitSummaries(summaries)
	s.m.dispatchDuration.Observe(time.Since(start).Seconds())
}

// get reads one object from the source: nil when absent.
func get[T any](read func(string) (*T, bool), id string) *T {
	if v, ok := read(id); ok {
		return v
	}
	return nil
}

// queueDelta computes what the round changes for one session and queues
// it as the session's next update. Called with s.mu held.
func (s *Server) queueDelta(ss *session, r *round, now time.Time) {
	if ss.needFull {
		// The full update, built when it is sent, will include the round.
		return
	}
	u := &wire.Update{}
	touchedATG := map[string]bool{}
	touchedAG := map[string]bool{}
	acquire := func(p *policyRefs) {
		for _, g := range p.atgs {
			ss.atgRefs[g]++
			touchedATG[g] = true
		}
		for _, g := range p.ags {
			ss.agRefs[g]++
			touchedAG[g] = true
		}
	}
	release := func(p *policyRefs) {
		for _, g := range p.atgs {
			ss.atgRefs[g]--
			touchedATG[g] = true
		}
		for _, g := range p.ags {
			ss.agRefs[g]--
			touchedAG[g] = true
		}
	}

	for _, id := range sortedKeys(r.policies) {
		p := r.policies[id]
		want := p != nil && wire.PolicyInSpan(p, ss.node)
		had, ok := ss.policies[id]
		switch {
		case want && ok && samePolicy(had.src, p):
			// Only its span changed: nothing the agent holds.
		case want:
			refs := s.refs[id]
			acquire(refs)
			if ok {
				release(had)
			}
			ss.policies[id] = refs
			u.Policies = append(u.Policies, refs.sent)
		case ok:
			release(had)
			delete(ss.policies, id)
			u.DeletedPolicies = append(u.DeletedPolicies, id)
		}
	}

	// Groups whose reference count changed: send the newly needed ones
	// whole, delete the ones no longer needed (after the policies, so
	// a group moving between two policies is not deleted).
	sentATG := map[string]bool{}
	for _, id := range sortedKeys(touchedATG) {
		if ss.atgRefs[id] <= 0 {
			delete(ss.atgRefs, id)
			if _, ok := ss.atgs[id]; ok {
				delete(ss.atgs, id)
				u.DeletedAppliedToGroups = append(u.DeletedAppliedToGroups, id)
			}
			continue
		}
		if _, ok := ss.atgs[id]; !ok {
			if g := s.atgs[id]; g != nil {
				ng := wire.AppliedToGroupForNode(g, ss.node)
				ss.atgs[id] = ng
				u.AppliedToGroups = append(u.AppliedToGroups, ng)
				sentATG[id] = true
			}
		}
	}
	sentAG := map[string]bool{}
	for _, id := range sortedKeys(touchedAG) {
		if ss.agRefs[id] <= 0 {
			delete(ss.agRefs, id)
			if ss.ags[id] {
				delete(ss.ags, id)
				u.DeletedAddressGroups = append(u.DeletedAddressGroups, id)
			}
			continue
		}
		if !ss.ags[id] {
			if g := s.ags[id]; g != nil {
				ss.ags[id] = true
				u.AddressGroups = append(u.AddressGroups, g)
				sentAG[id] = true
			}
		}
	}

	// Groups that changed themselves: only this node's members of an
	// applied-to group matter; address groups go as patches when small.
	for _, id := range sortedKeys(r.atgs) {
		if ss.atgRefs[id] <= 0 || sentATG[id] {
			continue
		}
		g := r.atgs[id]
		old, had := ss.atgs[id]
		if g == nil {
			if had {
				delete(ss.atgs, id)
				u.DeletedAppliedToGroups = append(u.DeletedAppliedToGroups, id)
			}
			continue
		}
		ng := wire.AppliedToGroupForNode(g, ss.node)
		if had && old.Selector == ng.Selector && wire.MembersEqual(old.MembersByNode.Get(ss.node), ng.MembersByNode.Get(ss.node)) {
			continue
		}
		ss.atgs[id] = ng
		u.AppliedToGroups = append(u.AppliedToGroups, ng)
	}
	for _, id := range sortedKeys(r.ags) {
		if ss.agRefs[id] <= 0 || sentAG[id] {
			continue
		}
		ch := r.ags[id]
		switch {
		case ch.new == nil:
			if ss.ags[id] {
				delete(ss.ags, id)
				u.DeletedAddressGroups = append(u.DeletedAddressGroups, id)
			}
		case !ss.ags[id] || !ch.patch:
			ss.ags[id] = true
			u.AddressGroups = append(u.AddressGroups, ch.new)
		default:
			u.AddressGroupPatches = append(u.AddressGroupPatches, wire.AddressGroupPatch{
				ID: id, Selector: ch.new.Selector, Upserted: ch.upserted, Removed: ch.removed,
			})
		}
	}

	s.queueNodePods(ss, r, u)
	if u.Empty() {
		return
	}
	if !r.changed.IsZero() {
		u.Trace = &wire.Trace{Changed: r.changed.UnixNano()}
	}
	s.enqueue(ss, u, now)
}

// buildFull rebuilds a session's state from the distributed state and
// returns the full update that installs it. Called with s.mu held.
func (s *Server) buildFull(ss *session) *wire.Update {
	ss.resetState()
	u := &wire.Update{Full: true, NodePods: s.fullNodePods(ss)}
	for _, id := range sortedKeys(s.policies) {
		p := s.policies[id]
		if !wire.PolicyInSpan(p, ss.node) {
			continue
		}
		refs := s.refs[id]
		ss.policies[id] = refs
		for _, g := range refs.atgs {
			ss.atgRefs[g]++
		}
		for _, g := range refs.ags {
			ss.agRefs[g]++
		}
		u.Policies = append(u.Policies, refs.sent)
	}
	for _, id := range sortedKeys(ss.atgRefs) {
		if g := s.atgs[id]; g != nil {
			ng := wire.AppliedToGroupForNode(g, ss.node)
			ss.atgs[id] = ng
			u.AppliedToGroups = append(u.AppliedToGroups, ng)
		}
	}
	for _, id := range sortedKeys(ss.agRefs) {
		if g := s.ags[id]; g != nil {
			ss.ags[id] = true
			u.AddressGroups = append(u.AddressGroups, g)
		}
	}
	return u
}

// policyRefs is a policy as the server distributes it: the engine's
// object, the form sent to agents, and the groups it references. One per
// policy version, built when the server takes the policy from the engine
// (Server.refs) and shared, read-only, by every session that holds it: a
// policy spanning every node is not copied once per node.
type policyRefs struct {
	src  *model.Policy // the engine's (with span)
	sent *model.Policy // as sent: wire.PolicyForNode(src)
	atgs []string
	ags  []string
}

func newPolicyRefs(p *model.Policy) *policyRefs {
	atgs := slices.Clone(p.AppliedToGroups)
	slices.Sort(atgs)
	return &policyRefs{src: p, sent: wire.PolicyForNode(p), atgs: slices.Compact(atgs), ags: wire.AddressGroupRefs(p)}
}

// samePolicy reports whether an agent holding a needs nothing to hold b.
// The engine hands out the same object until a policy changes; a
// different object with the same generation is compared in full, since a
// policy deleted and recreated under the same ID can restart its
// generation.
func samePolicy(a, b *model.Policy) bool {
	if a == b {
		return true
	}
	return a.Generation == b.Generation && reflect.DeepEqual(wire.PolicyForNode(a), wire.PolicyForNode(b))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// refKey is a policy's source without its UID: status writers name API
// objects by kind, namespace and name.
func refKey(r model.PolicyRef) model.PolicyRef {
	r.UID = ""
	return r
}
