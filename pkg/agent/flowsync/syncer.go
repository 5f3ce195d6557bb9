package flowsync

import (
	"context"
	"fmt"
	"reflect"
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
}

// Empty says whether the bundle changes nothing.
func (b Bundle) Empty() bool {
	return len(b.Add)+len(b.Modify)+len(b.Delete)+len(b.DeleteCookies) == 0
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

// Syncer reconciles one bridge. It is not safe for concurrent use.
type Syncer struct {
	inst Installer
	// installed is what the syncer believes the bridge holds of its flows.
	installed installedSet
}

// installedSet is a set of flows by key: the flows themselves (the
// desired list of the sync that installed them, kept as it was given)
// and each key's index in that list. An index, not a copy of the flow:
// flows are large and an agent's bridge holds hundreds of thousands.
type installedSet struct {
	flows []openflow.Flow
	index map[string]int32
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
	return &Syncer{inst: inst}
}

// Installed is the number of flows the syncer believes it installed.
func (s *Syncer) Installed() int { return len(s.installed.index) }

// Diff computes the bundle that turns the installed flows into desired.
func (s *Syncer) Diff(desired []openflow.Flow) (Bundle, error) {
	b, _, err := s.diffKeyed(desired, nil)
	return b, err
}

// diffKeyed is Diff with each flow's Flow.Key precomputed (keys[i] for
// desired[i]; nil computes them). It also returns desired as the set the
// bridge holds once the bundle is applied.
func (s *Syncer) diffKeyed(desired []openflow.Flow, keys []string) (Bundle, installedSet, error) {
	if keys != nil && len(keys) != len(desired) {
		return Bundle{}, installedSet{}, fmt.Errorf("%d keys for %d flows", len(keys), len(desired))
	}
	want := installedSet{flows: desired, index: make(map[string]int32, len(desired))}
	var b Bundle
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
		old, ok := s.installed.get(k)
		switch {
		case !ok || old.Cookie != f.Cookie:
			b.Add = append(b.Add, *f)
		case !actionsEqual(old.Actions, f.Actions):
			b.Modify = append(b.Modify, *f)
		}
	}
	var gone []string
	for k := range s.installed.index {
		if _, ok := want.index[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		f, _ := s.installed.get(k)
		b.Delete = append(b.Delete, *f)
	}
	return b, want, nil
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
// table, priority and match replace the old flow in place) and deletes the
// flows of every round other than round, so established connections see no
// gap.
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
	if err := s.inst.Apply(ctx, b); err != nil {
		return b, err
	}
	s.installed = want
	return b, nil
}

// Forget makes the syncer believe nothing is installed, so the next Sync
// re-adds every flow: after ovs-vswitchd restarted or the flows were wiped.
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
