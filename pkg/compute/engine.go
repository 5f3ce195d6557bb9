package compute

import (
	"sync"

	"github.com/tierflow/tierflow/pkg/model"
)

// ObjectKind names the kind of computed object a Change is about.
type ObjectKind string

const (
	KindPolicy         ObjectKind = "Policy"
	KindAppliedToGroup ObjectKind = "AppliedToGroup"
	KindAddressGroup   ObjectKind = "AddressGroup"
)

// ChangeType says what happened to a computed object.
type ChangeType string

const (
	Added   ChangeType = "Added"
	Updated ChangeType = "Updated"
	Deleted ChangeType = "Deleted"
)

// Change reports that one computed object was added, updated or deleted by
// one engine call. Generation is the object's new generation (for Deleted,
// the generation it had when it went away). Read the object itself with
// Engine.Policy, Engine.AppliedToGroup or Engine.AddressGroup.
type Change struct {
	Kind       ObjectKind
	Type       ChangeType
	ID         string
	Generation int64
}

// Engine computes tierflow's internal model from Kubernetes objects,
// incrementally. All methods are safe for concurrent use. The objects it
// returns are shared and immutable: callers must not modify them.
type Engine struct {
	mu sync.Mutex
	// clock hands out generations: every change of any object takes the
	// next value, so generations only grow, even across delete/re-create.
	clock int64

	namespaces map[string]*nsState
	pods       map[podKey]*podState
	nodes      map[string]*nodeState
	nodeLabels labelIndex[*nodeState]

	groups   map[string]*group // by normalized selector key
	atgByID  map[string]*group
	agByID   map[string]*group
	nsGroups selectorIndex[*group] // groups with a namespace selector, by that selector
	// clusterPodGroups holds the groups with a namespace selector, by their
	// pod selector, so a pod event finds them without scanning.
	clusterPodGroups selectorIndex[*group]
	nodeGroups       selectorIndex[*group]
	nsLabels         labelIndex[*nsState]

	policies     map[model.PolicyRef]*policyState // by ref without UID
	policyByID   map[string]*policyState
	byPriority   map[prioKey]set[*policyState]
	ignoredConds map[model.PolicyRef][]model.Condition // objects that produce no Policy

	// pending collects the changes of the current call.
	pending     map[pendingKey]*Change
	pendingList []pendingKey

	notifyMu    sync.Mutex
	subscribers map[int]func([]Change)
	nextSub     int
}

type pendingKey struct {
	kind ObjectKind
	id   string
}

// New returns an empty engine.
func New() *Engine {
	return &Engine{
		namespaces:       map[string]*nsState{},
		pods:             map[podKey]*podState{},
		nodes:            map[string]*nodeState{},
		nodeLabels:       newLabelIndex[*nodeState](),
		groups:           map[string]*group{},
		atgByID:          map[string]*group{},
		agByID:           map[string]*group{},
		nsGroups:         newSelectorIndex[*group](),
		clusterPodGroups: newSelectorIndex[*group](),
		nodeGroups:       newSelectorIndex[*group](),
		nsLabels:         newLabelIndex[*nsState](),
		policies:         map[model.PolicyRef]*policyState{},
		policyByID:       map[string]*policyState{},
		byPriority:       map[prioKey]set[*policyState]{},
		ignoredConds:     map[model.PolicyRef][]model.Condition{},
		pending:          map[pendingKey]*Change{},
		subscribers:      map[int]func([]Change){},
	}
}

// Subscribe registers fn to receive, after every call that changed
// something, the list of objects that call added, updated or deleted (each
// object at most once, with its final state for that call). Calls are
// delivered one at a time, in the order the changes happened. fn may read
// from the engine but must not call its Upsert or Delete methods. The
// returned function unsubscribes.
func (e *Engine) Subscribe(fn func([]Change)) (unsubscribe func()) {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	id := e.nextSub
	e.nextSub++
	e.subscribers[id] = fn
	return func() {
		e.notifyMu.Lock()
		defer e.notifyMu.Unlock()
		delete(e.subscribers, id)
	}
}

// update runs one mutation under the lock and then notifies subscribers.
func (e *Engine) update(mutate func()) {
	e.mu.Lock()
	mutate()
	changes := e.takePending()
	e.notifyMu.Lock()
	e.mu.Unlock()
	defer e.notifyMu.Unlock()
	if len(changes) == 0 {
		return
	}
	for _, fn := range e.subscribers {
		fn(changes)
	}
}

func (e *Engine) takePending() []Change {
	if len(e.pendingList) == 0 {
		return nil
	}
	out := make([]Change, 0, len(e.pendingList))
	for _, k := range e.pendingList {
		if c := e.pending[k]; c != nil {
			out = append(out, *c)
			delete(e.pending, k)
		}
	}
	clear(e.pending)
	e.pendingList = e.pendingList[:0]
	return out
}

// record notes a change of one object and returns its new generation
// (Added and Updated take a new generation once per call).
func (e *Engine) record(kind ObjectKind, typ ChangeType, id string, gen int64) int64 {
	k := pendingKey{kind, id}
	c := e.pending[k]
	if c == nil {
		if typ != Deleted {
			e.clock++
			gen = e.clock
		}
		e.pending[k] = &Change{Kind: kind, Type: typ, ID: id, Generation: gen}
		e.pendingList = append(e.pendingList, k)
		return gen
	}
	switch {
	case typ == Deleted && c.Type == Added:
		// Born and gone within one call: nobody needs to hear of it.
		delete(e.pending, k)
		return gen
	case typ == Deleted:
		c.Type, c.Generation = Deleted, gen
		return gen
	case c.Type == Deleted:
		// Gone and back within one call: to a subscriber, an update.
		e.clock++
		c.Type, c.Generation = Updated, e.clock
		return c.Generation
	}
	return c.Generation
}
