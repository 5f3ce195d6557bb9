package policyflows

import (
	"cmp"
	"slices"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// assembly is the compiler's output kept between compilations: every flow
// of the policy tables by key (table, priority and match), with the rule
// flows it is made of (NetworkPolicy rules share a priority, so clause
// flows of several rules merge into one flow; see builder). A compilation
// withdraws the flows of the rules that changed or went, adds those of the
// rules that changed or came, and merges again only the slots they touched:
// one policy's change costs its own flows, not the bridge's.
type assembly struct {
	slots map[string]*slot
	// dirty are the slots touched since the last changes().
	dirty []*slot
}

// slot is one flow of the output and the rule flows it is made of.
type slot struct {
	key string
	// contribs are sorted by evaluation order (rule, then flow) once the
	// slot is merged; merged is the flow they merge into when that is not
	// simply the first one (most flows are one rule's: they are not
	// copied).
	contribs []contrib
	merged   *openflow.Flow
	dirty    bool
}

// flow is the slot's flow (once merged).
func (s *slot) flow() openflow.Flow {
	if s.merged != nil {
		return *s.merged
	}
	c := s.contribs[0]
	return c.e.flows[c.i]
}

// contrib is the i-th flow of a rule's compiled flows.
type contrib struct {
	e *ruleCache
	i int32
}

func (c contrib) before(d contrib) int {
	return cmp.Or(cmp.Compare(c.e.seq, d.e.seq), cmp.Compare(c.i, d.i))
}

func newAssembly() assembly {
	return assembly{slots: map[string]*slot{}}
}

// update withdraws the flows of the rules in out and adds those of the
// rules in in.
func (a *assembly) update(out, in []*ruleCache) {
	for _, e := range out {
		a.withdraw(e)
	}
	if len(a.slots) == 0 {
		n := 0
		for _, e := range in {
			n += len(e.keys)
		}
		a.slots = make(map[string]*slot, n)
	}
	for _, e := range in {
		a.contribute(e)
	}
}

func (a *assembly) touch(s *slot) {
	if !s.dirty {
		s.dirty = true
		a.dirty = append(a.dirty, s)
	}
}

// contribute adds e's flows. The slots a rule creates, and their first
// contributions, are allocated together.
func (a *assembly) contribute(e *ruleCache) {
	e.slots = make([]*slot, len(e.keys))
	var fresh []slot
	var firsts []contrib
	for i, k := range e.keys {
		c := contrib{e, int32(i)}
		s := a.slots[k]
		if s == nil {
			if fresh == nil {
				fresh, firsts = make([]slot, 0, len(e.keys)-i), make([]contrib, len(e.keys)-i)
			}
			fresh = append(fresh, slot{key: k, contribs: firsts[len(fresh) : len(fresh)+1 : len(fresh)+1]})
			s = &fresh[len(fresh)-1]
			s.contribs[0] = c
			a.slots[k] = s
		} else {
			s.contribs = append(s.contribs, c)
		}
		e.slots[i] = s
		a.touch(s)
	}
}

// withdraw removes e's flows.
func (a *assembly) withdraw(e *ruleCache) {
	for _, s := range e.slots {
		s.contribs = slices.DeleteFunc(s.contribs, func(c contrib) bool { return c.e == e })
		a.touch(s)
	}
	e.slots = nil
}

// refoldShared marks every flow made of several rules' flows for merging
// again: their rules' evaluation order changed.
func (a *assembly) refoldShared() {
	for _, s := range a.slots {
		if len(s.contribs) > 1 {
			a.touch(s)
		}
	}
}

// fold merges the slot's rule flows in evaluation order, as a builder
// adding them in that order would (see builder.addKeyed), appending to one
// action list: a flow that carries the clauses of thousands of rules is
// merged in their number of steps.
func (s *slot) fold() {
	slices.SortFunc(s.contribs, contrib.before)
	s.merged = nil
	first := s.contribs[0]
	f := first.e.flows[first.i]
	if len(s.contribs) == 1 || first.e.kinds[first.i] == kindAction {
		return
	}
	var acts []openflow.Action
	for _, c := range s.contribs[1:] {
		g := c.e.flows[c.i]
		if c.e.kinds[c.i] == kindAction {
			// The first action flow replaces the clauses before it and
			// keeps the flow.
			f, acts = g, nil
			break
		}
		if acts == nil {
			acts = append(make([]openflow.Action, 0, len(f.Actions)*len(s.contribs)), f.Actions...)
		}
		acts = append(acts, g.Actions...)
	}
	if acts != nil {
		f.Actions = acts
	}
	s.merged = &f
}

// changes merges the touched slots again and returns them, in the order
// they were touched: flows that are new or may have changed, and keys of
// flows that went.
func (a *assembly) changes() flowsync.Changes {
	ch := flowsync.Changes{Upserts: make([]openflow.Flow, 0, len(a.dirty)), Keys: make([]string, 0, len(a.dirty))}
	for _, s := range a.dirty {
		s.dirty = false
		if len(s.contribs) == 0 {
			delete(a.slots, s.key)
			ch.Removes = append(ch.Removes, s.key)
			continue
		}
		s.fold()
		ch.Upserts = append(ch.Upserts, s.flow())
		ch.Keys = append(ch.Keys, s.key)
	}
	clear(a.dirty)
	a.dirty = a.dirty[:0]
	return ch
}

// flows is every flow of the assembly with its key, in the order a builder
// adding the flows of rules (every rule's, in evaluation order) would have
// output them: each flow where its first rule flow came.
func (a *assembly) flows(rules []*ruleCache) ([]openflow.Flow, []string) {
	flows, keys := make([]openflow.Flow, 0, len(a.slots)), make([]string, 0, len(a.slots))
	for _, e := range rules {
		for i, s := range e.slots {
			if s.contribs[0] == (contrib{e, int32(i)}) {
				flows, keys = append(flows, s.flow()), append(keys, s.key)
			}
		}
	}
	return flows, keys
}
