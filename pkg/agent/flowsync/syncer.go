package flowsync

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// CookieMask selects flows by cookie for a non-strict delete.
type CookieMask struct{ Value, Mask uint64 }

// Bundle is one atomic change of a bridge's flows. Installers apply Add,
// then Modify, then Delete, then DeleteCookies inside one OpenFlow bundle
// committed atomically.
type Bundle struct {
	// Add installs new flows, replacing a flow with the same table,
	// priority and match (whose cookie changes).
	Add []openflow.Flow
	// Modify changes the actions of flows with the same table, priority,
	// match and cookie, keeping their counters.
	Modify []openflow.Flow
	// Delete removes flows by table, priority and match.
	Delete []openflow.Flow
	// DeleteCookies removes every flow whose cookie matches, in all tables.
	DeleteCookies []CookieMask
	// Groups are added or modified before the flow changes and deleted
	// after them, in the same bundle (see openflow.Changes).
	Groups []openflow.GroupChange
}

// Empty says whether the bundle changes nothing.
func (b Bundle) Empty() bool {
	return len(b.Add)+len(b.Modify)+len(b.Delete)+len(b.DeleteCookies)+len(b.Groups) == 0
}

// append adds extra's changes to b's (a part's bundle and what must
// travel with it, e.g. deletions of flows the switch learned).
func (b *Bundle) append(extra Bundle) {
	b.Add = append(b.Add, extra.Add...)
	b.Modify = append(b.Modify, extra.Modify...)
	b.Delete = append(b.Delete, extra.Delete...)
	b.DeleteCookies = append(b.DeleteCookies, extra.DeleteCookies...)
	b.Groups = append(b.Groups, extra.Groups...)
}

// ApplyTo applies b's flow changes to flows (by Flow.Key) as a switch
// applies the bundle to its tables: for a view of a bridge's flows kept
// from the bundles sent to it.
func (b Bundle) ApplyTo(flows map[string]openflow.Flow) {
	for _, f := range b.Add {
		flows[f.Key()] = f
	}
	for _, f := range b.Modify {
		flows[f.Key()] = f // same key and cookie, new actions
	}
	for _, f := range b.Delete {
		delete(flows, f.Key())
	}
	for _, cm := range b.DeleteCookies {
		for k, f := range flows {
			if f.Cookie&cm.Mask == cm.Value&cm.Mask {
				delete(flows, k)
			}
		}
	}
}

// FlowStat is one installed flow's identity and counters.
type FlowStat struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	Packets  uint64
	Bytes    uint64
}

// Installer talks to one bridge.
type Installer interface {
	// Apply commits b atomically: all of it or, on error, none of it.
	Apply(ctx context.Context, b Bundle) error
	// Stats lists every flow of the bridge with its counters.
	Stats(ctx context.Context) ([]FlowStat, error)
}

// GroupLister is an Installer that can list the bridge's groups, so that a
// start-up adoption deletes the groups of an earlier run nobody wants.
type GroupLister interface {
	GroupIDs(ctx context.Context) ([]uint32, error)
}

// Syncer reconciles one bridge. It is not safe for concurrent use.
//
// The desired flows come in parts that change independently (the policy
// pipeline, the Service proxy's flows and groups): each part is diffed
// only against what it installed itself, so an update of one part costs
// nothing for the others. Parts must not share a flow (table, priority and
// match); a flow another part installed is an error.
type Syncer struct {
	inst Installer
	// installed is what the syncer believes the bridge holds of the
	// default part's flows (Sync, Adopt).
	installed installedSet
	parts     map[string]*part
}

// part is a named part's installed flows and groups.
type part struct {
	flows  installedSet
	groups map[uint32]openflow.Group
}

// installedSet is a set of flows by key: the flows themselves (the
// desired list of the sync that installed them, kept as it was given)
// and each key's index in that list. An index, not a copy of the flow:
// flows are large and an agent's bridge holds hundreds of thousands.
type installedSet struct {
	flows []openflow.Flow
	index map[string]int32
	// owned says flows is the set's own copy (a changed set, see apply),
	// not a caller's list; stale counts its entries no key points to.
	owned bool
	stale int
}

// apply changes the set by ch (checked by SyncChanges): in place, so an
// update costs its changes, not the set's size.
func (s *installedSet) apply(ch Changes) {
	// Room for the new keys at once: a first install adds every flow of
	// the bridge, and growing a list of 100,000 flows by appends copies
	// it over and over.
	added := 0
	for _, k := range ch.Keys {
		if _, ok := s.index[k]; !ok {
			added++
		}
	}
	if !s.owned {
		s.flows, s.owned = slices.Grow(slices.Clone(s.flows), added), true
		if s.index == nil {
			s.index = make(map[string]int32, added)
		}
	} else {
		s.flows = slices.Grow(s.flows, added)
	}
	for i, k := range ch.Keys {
		if j, ok := s.index[k]; ok {
			s.flows[j] = ch.Upserts[i]
			continue
		}
		s.index[k] = int32(len(s.flows))
		s.flows = append(s.flows, ch.Upserts[i])
	}
	for _, k := range ch.Removes {
		if _, ok := s.index[k]; ok {
			delete(s.index, k)
			s.stale++
		}
	}
	if s.stale > len(s.index) {
		// Compact once most entries are stale (amortized over the changes
		// that made them so).
		flows := make([]openflow.Flow, 0, len(s.index))
		for k, j := range s.index {
			s.index[k] = int32(len(flows))
			flows = append(flows, s.flows[j])
		}
		s.flows, s.stale = flows, 0
	}
}

func (s installedSet) get(key string) (*openflow.Flow, bool) {
	i, ok := s.index[key]
	if !ok {
		return nil, false
	}
	return &s.flows[i], true
}

// NewSyncer returns a syncer that believes the bridge holds none of its flows.
func NewSyncer(inst Installer) *Syncer {
	return &Syncer{inst: inst, parts: map[string]*part{}}
}

// Installed is the number of flows the syncer believes it installed.
func (s *Syncer) Installed() int {
	n := len(s.installed.index)
	for _, p := range s.parts {
		n += len(p.flows.index)
	}
	return n
}

// Diff computes the bundle that turns the installed flows into desired.
func (s *Syncer) Diff(desired []openflow.Flow) (Bundle, error) {
	b, _, err := s.diffKeyed(desired, nil)
	return b, err
}

// diffKeyed is Diff with each flow's Flow.Key precomputed (keys[i] for
// desired[i]; nil computes them). It also returns desired as the set the
// bridge holds once the bundle is applied.
func (s *Syncer) diffKeyed(desired []openflow.Flow, keys []string) (Bundle, installedSet, error) {
	return s.diff(s.installed, "", desired, keys)
}

// diff computes the bundle that turns installed (part name's; "" is the
// default part) into desired.
func (s *Syncer) diff(installed installedSet, name string, desired []openflow.Flow, keys []string) (Bundle, installedSet, error) {
	if keys != nil && len(keys) != len(desired) {
		return Bundle{}, installedSet{}, fmt.Errorf("%d keys for %d flows", len(keys), len(desired))
	}
	want := installedSet{flows: desired, index: make(map[string]int32, len(desired))}
	var b Bundle
	if len(installed.index) == 0 {
		b.Add = make([]openflow.Flow, 0, len(desired)) // every flow is an add
	}
	// Adds and modifies follow the desired order (deterministic, as the
	// compiler's output is); deletes are sorted. Order inside a bundle does
	// not matter for correctness: it is applied atomically.
	for i := range desired {
		f := &desired[i]
		var k string
		if keys != nil {
			k = keys[i]
		} else {
			k = f.Key()
		}
		if _, dup := want.index[k]; dup {
			return Bundle{}, installedSet{}, fmt.Errorf("two desired flows with the same table, priority and match: %s", k)
		}
		want.index[k] = int32(i)
		old, ok := installed.get(k)
		switch {
		case !ok || old.Cookie != f.Cookie:
			if !ok {
				if other := s.ownerOf(k, name); other != nil {
					return Bundle{}, installedSet{}, fmt.Errorf("flow %s is part %q's and part %q's", k, *other, name)
				}
			}
			b.Add = append(b.Add, *f)
		case !actionsEqual(old.Actions, f.Actions):
			b.Modify = append(b.Modify, *f)
		}
	}
	var gone []string
	for k := range installed.index {
		if _, ok := want.index[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		f, _ := installed.get(k)
		b.Delete = append(b.Delete, *f)
	}
	return b, want, nil
}

// ownerOf names the part other than name that installed key, if any.
func (s *Syncer) ownerOf(key, name string) *string {
	if name != "" {
		if _, ok := s.installed.index[key]; ok {
			owner := ""
			return &owner
		}
	}
	for n, p := range s.parts {
		if n == name {
			continue
		}
		if _, ok := p.flows.index[key]; ok {
			return &n
		}
	}
	return nil
}

// SyncPart makes the bridge hold exactly desired as the flows of part
// name (not "", the default part of Sync), and exactly groups as its
// groups, in one bundle that also carries extra (e.g. deletions of flows
// the switch learned). On error the bridge and the syncer's view are
// unchanged. The syncer keeps desired as its view of the bridge: callers
// must not modify it afterwards.
func (s *Syncer) SyncPart(ctx context.Context, name string, desired []openflow.Flow, keys []string, groups []openflow.Group, extra Bundle) (Bundle, error) {
	if name == "" {
		return Bundle{}, fmt.Errorf("flowsync: a part needs a name")
	}
	p := s.parts[name]
	if p == nil {
		p = &part{groups: map[uint32]openflow.Group{}}
	}
	b, want, err := s.diff(p.flows, name, desired, keys)
	if err != nil {
		return b, err
	}
	wantGroups, gchanges, err := s.diffGroups(p.groups, name, groups)
	if err != nil {
		return b, err
	}
	b.Groups = gchanges
	b.append(extra)
	if !b.Empty() {
		if err := s.inst.Apply(ctx, b); err != nil {
			return b, err
		}
	}
	s.parts[name] = &part{flows: want, groups: wantGroups}
	return b, nil
}

// checkGroupOwner fails if a part other than name holds group id.
func (s *Syncer) checkGroupOwner(id uint32, name string) error {
	for n, p := range s.parts {
		if _, ok := p.groups[id]; ok && n != name {
			return fmt.Errorf("group %d is part %q's and part %q's", id, n, name)
		}
	}
	return nil
}

// diffGroups returns part name's new groups and the changes from
// installed to them.
func (s *Syncer) diffGroups(installed map[uint32]openflow.Group, name string, groups []openflow.Group) (map[uint32]openflow.Group, []openflow.GroupChange, error) {
	want := make(map[uint32]openflow.Group, len(groups))
	var out []openflow.GroupChange
	for _, g := range groups {
		if _, dup := want[g.ID]; dup {
			return nil, nil, fmt.Errorf("two desired groups with ID %d", g.ID)
		}
		if err := s.checkGroupOwner(g.ID, name); err != nil {
			return nil, nil, err
		}
		want[g.ID] = g
		if old, ok := installed[g.ID]; !ok || !reflect.DeepEqual(old, g) {
			out = append(out, openflow.GroupChange{Command: openflow.GroupAddOrModify, Group: g})
		}
	}
	var gone []uint32
	for id := range installed {
		if _, ok := want[id]; !ok {
			gone = append(gone, id)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] })
	for _, id := range gone {
		out = append(out, openflow.GroupChange{Command: openflow.GroupDelete, Group: openflow.Group{ID: id}})
	}
	return want, out, nil
}

// Changes are what changed in a set of flows since it was synced, as a
// compiler that keeps its output reports them (package policyflows): the
// flows that are new or may have changed (Upserts; Keys[i] is
// Upserts[i]'s Flow.Key) and the keys of flows no longer wanted (Removes).
type Changes struct {
	Upserts []openflow.Flow
	Keys    []string
	Removes []string
}

// Empty says whether there are no changes.
func (c Changes) Empty() bool { return len(c.Upserts)+len(c.Removes) == 0 }

// SyncChanges changes the default part's flows by ch, in one bundle: an
// upsert the bridge already holds as it is costs nothing, one it holds
// with other actions is modified, one with another cookie or not
// installed is added, and a removed key installed is deleted. The work is
// that of the changes, whatever the number of installed flows. On error
// the bridge and the syncer's view are unchanged.
func (s *Syncer) SyncChanges(ctx context.Context, ch Changes) (Bundle, error) {
	b, err := s.changesBundle(s.installed, "", ch)
	if err != nil {
		return b, err
	}
	if !b.Empty() {
		if err := s.inst.Apply(ctx, b); err != nil {
			return b, err
		}
	}
	s.installed.apply(ch)
	return b, nil
}

// changesBundle is the bundle that changes installed (part name's; "" is
// the default part) by ch.
func (s *Syncer) changesBundle(installed installedSet, name string, ch Changes) (Bundle, error) {
	if len(ch.Keys) != len(ch.Upserts) {
		return Bundle{}, fmt.Errorf("%d keys for %d flows", len(ch.Keys), len(ch.Upserts))
	}
	// Most upserts are adds or modifies (the compiler hands only the
	// flows of changed rules): one allocation, not a list of 100,000
	// flows grown by appends on a first install.
	b := Bundle{Add: make([]openflow.Flow, 0, len(ch.Upserts))}
	seen := make(map[string]bool, len(ch.Keys)+len(ch.Removes))
	for i := range ch.Upserts {
		f, k := &ch.Upserts[i], ch.Keys[i]
		if seen[k] {
			return Bundle{}, fmt.Errorf("two changed flows with the same table, priority and match: %s", k)
		}
		seen[k] = true
		old, ok := installed.get(k)
		switch {
		case !ok || old.Cookie != f.Cookie:
			if !ok {
				if other := s.ownerOf(k, name); other != nil {
					if name == "" {
						return Bundle{}, fmt.Errorf("flow %s is part %q's and the default part's", k, *other)
					}
					return Bundle{}, fmt.Errorf("flow %s is part %q's and part %q's", k, *other, name)
				}
			}
			b.Add = append(b.Add, *f)
		case !actionsEqual(old.Actions, f.Actions):
			b.Modify = append(b.Modify, *f)
		}
	}
	for _, k := range ch.Removes {
		if seen[k] {
			return Bundle{}, fmt.Errorf("flow %s both changed and removed", k)
		}
		seen[k] = true
		if old, ok := installed.get(k); ok {
			b.Delete = append(b.Delete, *old)
		}
	}
	return b, nil
}

// GroupChanges are what changed in a part's groups, as Changes are for
// its flows: the groups that are new or may have changed (Upserts) and
// the IDs of groups no longer wanted (Removes).
type GroupChanges struct {
	Upserts []openflow.Group
	Removes []uint32
}

// SyncPartChanges changes part name's flows by ch and its groups by
// groups, in one bundle that also carries extra, as SyncChanges does for
// the default part: the work is that of the changes, whatever the size of
// the part. On error the bridge and the syncer's view are unchanged.
func (s *Syncer) SyncPartChanges(ctx context.Context, name string, ch Changes, groups GroupChanges, extra Bundle) (Bundle, error) {
	if name == "" {
		return Bundle{}, fmt.Errorf("flowsync: a part needs a name")
	}
	p := s.parts[name]
	if p == nil {
		p = &part{groups: map[uint32]openflow.Group{}}
	}
	b, err := s.changesBundle(p.flows, name, ch)
	if err != nil {
		return b, err
	}
	seen := make(map[uint32]bool, len(groups.Upserts)+len(groups.Removes))
	for _, g := range groups.Upserts {
		if seen[g.ID] {
			return Bundle{}, fmt.Errorf("two changed groups with ID %d", g.ID)
		}
		seen[g.ID] = true
		if err := s.checkGroupOwner(g.ID, name); err != nil {
			return Bundle{}, err
		}
		if old, ok := p.groups[g.ID]; !ok || !reflect.DeepEqual(old, g) {
			b.Groups = append(b.Groups, openflow.GroupChange{Command: openflow.GroupAddOrModify, Group: g})
		}
	}
	for _, id := range groups.Removes {
		if seen[id] {
			return Bundle{}, fmt.Errorf("group %d both changed and removed", id)
		}
		seen[id] = true
		if _, ok := p.groups[id]; ok {
			b.Groups = append(b.Groups, openflow.GroupChange{Command: openflow.GroupDelete, Group: openflow.Group{ID: id}})
		}
	}
	b.append(extra)
	if !b.Empty() {
		if err := s.inst.Apply(ctx, b); err != nil {
			return b, err
		}
	}
	p.flows.apply(ch)
	for _, g := range groups.Upserts {
		p.groups[g.ID] = g
	}
	for _, id := range groups.Removes {
		delete(p.groups, id)
	}
	s.parts[name] = p
	return b, nil
}

// Sync makes the bridge hold exactly desired (as far as the syncer's own
// flows go), in one bundle. On error the bridge and the syncer's view are
// unchanged. The syncer keeps desired as its view of the bridge: callers
// must not modify it afterwards.
func (s *Syncer) Sync(ctx context.Context, desired []openflow.Flow) (Bundle, error) {
	return s.SyncKeyed(ctx, desired, nil)
}

// SyncKeyed is Sync with precomputed keys (keys[i] is desired[i]'s Flow.Key).
func (s *Syncer) SyncKeyed(ctx context.Context, desired []openflow.Flow, keys []string) (Bundle, error) {
	b, want, err := s.diffKeyed(desired, keys)
	if err != nil {
		return b, err
	}
	if b.Empty() {
		s.installed = want
		return b, nil
	}
	if err := s.inst.Apply(ctx, b); err != nil {
		return b, err
	}
	s.installed = want
	return b, nil
}

// Adopt is the start-up sync of a restarted agent whose flows of earlier
// rounds may still be installed: one bundle adds every desired flow (same
// table, priority and match replace the old flow in place), and every flow
// and group of the other parts again, and deletes the flows of every round
// other than round and (with a GroupLister) the groups no part has, so
// established connections see no gap. It is also how everything is
// installed again after the bridge lost its flows.
func (s *Syncer) Adopt(ctx context.Context, desired []openflow.Flow, round uint8) (Bundle, error) {
	return s.AdoptKeyed(ctx, desired, nil, round)
}

// AdoptKeyed is Adopt with precomputed keys (see SyncKeyed).
func (s *Syncer) AdoptKeyed(ctx context.Context, desired []openflow.Flow, keys []string, round uint8) (Bundle, error) {
	stats, err := s.inst.Stats(ctx)
	if err != nil {
		return Bundle{}, err
	}
	s.installed = installedSet{}
	b, want, err := s.diffKeyed(desired, keys)
	if err != nil {
		return b, err
	}
	stale := map[uint8]bool{}
	for _, st := range stats {
		if r, _, _ := pipeline.DecodeCookie(st.Cookie); r != round {
			stale[r] = true
		}
	}
	rounds := make([]int, 0, len(stale))
	for r := range stale {
		rounds = append(rounds, int(r))
	}
	sort.Ints(rounds)
	for _, r := range rounds {
		b.DeleteCookies = append(b.DeleteCookies, CookieMask{Value: pipeline.Cookie(uint8(r), 0, 0), Mask: pipeline.CookieRoundMask})
	}
	names := make([]string, 0, len(s.parts))
	for n := range s.parts {
		names = append(names, n)
	}
	sort.Strings(names)
	owned := map[uint32]bool{}
	for _, n := range names {
		p := s.parts[n]
		keys := make([]string, 0, len(p.flows.index))
		for k := range p.flows.index {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, dup := want.index[k]; dup {
				return Bundle{}, fmt.Errorf("flow %s is part %q's and the default part's", k, n)
			}
			f, _ := p.flows.get(k)
			b.Add = append(b.Add, *f)
		}
		ids := make([]uint32, 0, len(p.groups))
		for id := range p.groups {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			owned[id] = true
			b.Groups = append(b.Groups, openflow.GroupChange{Command: openflow.GroupAddOrModify, Group: p.groups[id]})
		}
	}
	if gl, ok := s.inst.(GroupLister); ok {
		ids, err := gl.GroupIDs(ctx)
		if err != nil {
			return Bundle{}, err
		}
		for _, id := range ids {
			if !owned[id] {
				b.Groups = append(b.Groups, openflow.GroupChange{Command: openflow.GroupDelete, Group: openflow.Group{ID: id}})
			}
		}
	}
	if err := s.inst.Apply(ctx, b); err != nil {
		return b, err
	}
	s.installed = want
	return b, nil
}

// Forget makes the syncer believe nothing of the default part is
// installed, so the next Sync re-adds every flow of it: after
// ovs-vswitchd restarted or the flows were wiped (Adopt re-adds the other
// parts).
func (s *Syncer) Forget() { s.installed = installedSet{} }

// NextRound picks the cookie round for a starting agent: one past the
// highest round found on the bridge (rounds wrap; 0 is skipped so a
// bridge's initial state never looks like ours).
func NextRound(stats []FlowStat) uint8 {
	seen := map[uint8]bool{}
	for _, st := range stats {
		r, _, _ := pipeline.DecodeCookie(st.Cookie)
		seen[r] = true
	}
	var max uint8
	for r := range seen {
		if r > max {
			max = r
		}
	}
	next := max + 1
	for next == 0 || seen[next] {
		next++
	}
	return next
}

// actionsEqual compares action lists without rendering them (the diff runs
// over every flow on every update).
func actionsEqual(a, b []openflow.Action) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch x := a[i].(type) {
		case openflow.Conjunction:
			if y, ok := b[i].(openflow.Conjunction); !ok || x != y {
				return false
			}
		case openflow.GotoTable:
			if y, ok := b[i].(openflow.GotoTable); !ok || x != y {
				return false
			}
		case openflow.LoadReg:
			if y, ok := b[i].(openflow.LoadReg); !ok || x != y {
				return false
			}
		case openflow.Output:
			if y, ok := b[i].(openflow.Output); !ok || x != y {
				return false
			}
		default:
			if !reflect.DeepEqual(a[i], b[i]) {
				return false
			}
		}
	}
	return true
}
