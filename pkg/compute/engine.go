package compute

import (
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/model"
)

// ObjectKind names the kind of computed object a Change is about.
type ObjectKind string

const (
	KindPolicy         ObjectKind = "Policy"
	KindAppliedToGroup ObjectKind = "AppliedToGroup"
	KindAddressGroup   ObjectKind = "AddressGroup"
	// KindNodePods is a node's pods (model.NodePods); its ID is the
	// node's name. Read it with Engine.NodePods.
	KindNodePods ObjectKind = "NodePods"
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

	groups map[string]*group // by normalized selector key
	// byKeyHash finds a group by the key hash its IDs carry (both roles'
	// IDs, see formatGroupID): one map of integers instead of one of
	// strings per role, each of 125,000 groups on a large start.
	byKeyHash map[uint64]*group
	// namedPortGroups are the groupNamedPort groups in use, by port name.
	namedPortGroups map[string]*group
	nsGroups        selectorIndex[*group] // groups with a namespace selector, by that selector
	// clusterPodGroups holds the groups with a namespace selector, by their
	// pod selector, so a pod event finds them without scanning.
	clusterPodGroups selectorIndex[*group]
	nodeGroups       selectorIndex[*group]
	nsLabels         labelIndex[*nsState]

	// nodePods are the NodePods objects, by node; reported holds, by
	// node, the pods each node's agent attached (see nodepods.go);
	// ipOwners the pods claiming each address.
	nodePods map[string]*nodePodsState
	reported map[string]map[podKey]reportedPod
	ipOwners map[netip.Addr]addressOwners

	policies     map[policyKey]*policyState // by API object, whatever its UID
	policyByID   map[string]*policyState
	byPriority   map[prioKey]*set[*policyState]
	ignoredConds map[policyKey][]model.Condition // objects that produce no Policy

	// pendingList collects the changes of the current call; each object
	// finds its entry through its pendSlot (no map lookup: one pod event
	// can touch thousands of policies). Objects deleted in this call are
	// also indexed by ID, so that one re-created under the same ID (a new
	// Go object) merges with its deletion.
	epoch          uint64
	pendingList    []pendingChange
	pendingDeleted map[pendingKey]int

	// podRun is the array of the last Batch's run of pod upserts, kept
	// for the next one (emptied): an informer's initial list comes as
	// a hundred batches of a thousand pods, and growing a new array for
	// each was 30 MiB of garbage.
	podRun []podUpdate

	// Deliveries: batches queue up in the order of the calls that made
	// them; one goroutine at a time delivers them, without holding mu, so
	// subscribers may call back into the engine.
	queueMu     sync.Mutex
	queue       [][]Change
	delivering  bool
	subscribers map[int]func([]Change)
	nsubs       atomic.Int32 // len(subscribers), readable under mu
	nextSub     int
}

// pendSlot is an object's link to its entry in the current call's changes.
type pendSlot struct {
	epoch uint64
	idx   int
}

type pendingChange struct {
	Change
	dropped bool
	// bumped: the object took a new generation in this call. A change of
	// span alone is recorded without one (see recordSpan); a content
	// change later in the same call still gives it one.
	bumped bool
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
		byKeyHash:        map[uint64]*group{},
		namedPortGroups:  map[string]*group{},
		nsGroups:         newSelectorIndex[*group](),
		clusterPodGroups: newSelectorIndex[*group](),
		nodeGroups:       newSelectorIndex[*group](),
		nsLabels:         newLabelIndex[*nsState](),
		nodePods:         map[string]*nodePodsState{},
		reported:         map[string]map[podKey]reportedPod{},
		ipOwners:         map[netip.Addr]addressOwners{},
		policies:         map[policyKey]*policyState{},
		policyByID:       map[string]*policyState{},
		byPriority:       map[prioKey]*set[*policyState]{},
		ignoredConds:     map[policyKey][]model.Condition{},
		epoch:            1,
		pendingDeleted:   map[pendingKey]int{},
		subscribers:      map[int]func([]Change){},
	}
}

// Subscribe registers fn to receive, after every call that changed
// something, the list of objects that call added, updated or deleted (each
// object at most once, with its final state for that call). Batches are
// delivered one at a time, in the order of the calls; normally before the
// call returns, but when several goroutines write at once, whichever is
// delivering delivers the others' batches too. fn may read from the engine
// (and even write to it: its own changes are delivered after it returns).
// The returned function unsubscribes.
func (e *Engine) Subscribe(fn func([]Change)) (unsubscribe func()) {
	e.queueMu.Lock()
	defer e.queueMu.Unlock()
	id := e.nextSub
	e.nextSub++
	e.subscribers[id] = fn
	e.nsubs.Store(int32(len(e.subscribers)))
	return func() {
		e.queueMu.Lock()
		defer e.queueMu.Unlock()
		delete(e.subscribers, id)
		e.nsubs.Store(int32(len(e.subscribers)))
	}
}

// update runs one mutation (nil: nothing to do) under the lock and then
// delivers its changes.
func (e *Engine) update(mutate func()) {
	if mutate == nil {
		return
	}
	e.mu.Lock()
	// Deferred so that a panicking mutation (a Batch function's) neither
	// leaves the engine locked nor loses what it changed before.
	defer e.deliver()
	defer e.mu.Unlock()
	defer e.queuePending()
	mutate()
}

// queuePending moves the current call's changes to the delivery queue.
// Queued while mu is held: queue order is mutation order.
func (e *Engine) queuePending() {
	if changes := e.takePending(); len(changes) > 0 {
		e.queueMu.Lock()
		e.queue = append(e.queue, changes)
		e.queueMu.Unlock()
	}
}

// Batch applies several object changes as one engine call: one lock
// acquisition and one batch of Changes in which each computed object
// appears at most once. Applying a burst of events this way (an informer's
// initial list) costs less than one call each: an object that every event
// touches, such as the 10,000 policies sharing a group whose span grows
// with each pod, is recorded once per batch instead of once per event.
// The result is the same as calling the Engine's methods in the same
// order. fn must not call the Engine itself (it runs under the engine's
// lock) and must not keep b.
func (e *Engine) Batch(fn func(b *Batch)) {
	e.update(func() {
		b := &Batch{e: e, pods: e.podRun}
		defer func() {
			b.e = nil
			clear(b.pods) // empty unless fn panicked
			if e.podRun = b.pods[:0]; cap(e.podRun) > 4096 {
				e.podRun = nil // an unusually long run's array
			}
		}()
		fn(b)
		b.applyPods()
	})
}

// Batch is one Engine.Batch call's writer; its methods mirror the
// Engine's.
type Batch struct {
	e *Engine
	// pods is a run of prepared pod upserts not applied yet: applied
	// together (Engine.applyPods) before the batch's next change of any
	// other kind, or at its end.
	pods []podUpdate
}

// Writer is what both the Engine and a Batch accept: every API object
// change the engine computes from.
type Writer interface {
	UpsertNamespace(*corev1.Namespace)
	DeleteNamespace(name string)
	UpsertPod(*corev1.Pod)
	UpsertPreparedPod(PreparedPod)
	DeletePod(namespace, name string)
	UpsertNode(*corev1.Node)
	DeleteNode(name string)
	UpsertNetworkPolicy(*networkingv1.NetworkPolicy)
	DeleteNetworkPolicy(namespace, name string)
	UpsertCompiled(Compiled)
	UpsertAdminNetworkPolicy(*v1alpha1.AdminNetworkPolicy)
	DeleteAdminNetworkPolicy(name string)
	UpsertBaselineAdminNetworkPolicy(*v1alpha1.BaselineAdminNetworkPolicy)
	DeleteBaselineAdminNetworkPolicy(name string)
	UpsertClusterNetworkPolicy(*v1alpha2.ClusterNetworkPolicy)
	DeleteClusterNetworkPolicy(name string)
}

var (
	_ Writer = (*Engine)(nil)
	_ Writer = (*Batch)(nil)
)

func (b *Batch) run(f func()) {
	if b.e == nil {
		panic("compute: Batch used after its Engine.Batch call returned")
	}
	b.applyPods()
	if f != nil {
		f()
	}
}

// applyPods applies the pending run of prepared pod upserts.
func (b *Batch) applyPods() {
	if len(b.pods) > 0 {
		b.e.applyPods(b.pods)
		clear(b.pods)
		b.pods = b.pods[:0]
	}
}

func (b *Batch) UpsertNamespace(ns *corev1.Namespace) { b.run(b.e.upsertNamespace(ns)) }
func (b *Batch) DeleteNamespace(name string)          { b.run(b.e.deleteNamespace(name)) }
func (b *Batch) UpsertPod(pod *corev1.Pod) {
	b.run(nil)
	if u, ok := preparePod(pod); ok {
		b.e.applyPod(u)
	}
}
func (b *Batch) UpsertPreparedPod(p PreparedPod) {
	if b.e == nil || !p.ok || p.u.delete {
		b.run(nil)
		if p.ok {
			b.e.applyPod(p.u)
		}
		return
	}
	// A prepared pod's labels, addresses and ports are immutable, so it
	// can wait for the rest of its run.
	b.pods = append(b.pods, p.u)
}
func (b *Batch) DeletePod(namespace, name string) {
	b.run(nil)
	b.e.removePodState(podKey{namespace, name})
}
func (b *Batch) UpsertNode(node *corev1.Node) { b.run(b.e.upsertNode(node)) }
func (b *Batch) DeleteNode(name string)       { b.run(b.e.deleteNode(name)) }
func (b *Batch) UpsertNetworkPolicy(np *networkingv1.NetworkPolicy) {
	b.UpsertCompiled(CompileNetworkPolicy(np))
}
func (b *Batch) UpsertCompiled(c Compiled) {
	b.run(nil)
	if c.c != nil {
		b.e.setPolicy(refKey(c.c.ref), c.c, nil)
	}
}
func (b *Batch) DeleteNetworkPolicy(namespace, name string) {
	b.run(nil)
	b.e.setPolicy(policyKey{kind: model.KindNetworkPolicy, namespace: namespace, name: name}, nil, nil)
}
func (b *Batch) UpsertAdminNetworkPolicy(anp *v1alpha1.AdminNetworkPolicy) {
	b.run(nil)
	if anp != nil {
		c := compileAdminNetworkPolicy(anp)
		b.e.setPolicy(refKey(c.ref), c, nil)
	}
}
func (b *Batch) DeleteAdminNetworkPolicy(name string) {
	b.run(nil)
	b.e.setPolicy(policyKey{kind: model.KindAdminNetworkPolicy, name: name}, nil, nil)
}
func (b *Batch) UpsertBaselineAdminNetworkPolicy(banp *v1alpha1.BaselineAdminNetworkPolicy) {
	b.run(nil)
	if banp != nil {
		c, ignored := compileBaselineAdminNetworkPolicy(banp)
		b.e.setPolicy(banpKey(banp.Name), c, ignored)
	}
}
func (b *Batch) DeleteBaselineAdminNetworkPolicy(name string) {
	b.run(nil)
	b.e.setPolicy(banpKey(name), nil, nil)
}
func (b *Batch) UpsertClusterNetworkPolicy(cnp *v1alpha2.ClusterNetworkPolicy) {
	b.run(nil)
	if cnp != nil {
		c := compileClusterNetworkPolicy(cnp)
		b.e.setPolicy(refKey(c.ref), c, nil)
	}
}
func (b *Batch) DeleteClusterNetworkPolicy(name string) {
	b.run(nil)
	b.e.setPolicy(policyKey{kind: model.KindClusterNetworkPolicy, name: name}, nil, nil)
}

func (e *Engine) deliver() {
	e.queueMu.Lock()
	if e.delivering {
		e.queueMu.Unlock()
		return
	}
	e.delivering = true
	locked := true
	defer func() {
		// Also on a subscriber's panic: later calls must still deliver.
		if !locked {
			e.queueMu.Lock()
		}
		e.delivering = false
		e.queueMu.Unlock()
	}()
	for len(e.queue) > 0 {
		batch := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		subs := make([]func([]Change), 0, len(e.subscribers))
		for _, fn := range e.subscribers {
			subs = append(subs, fn)
		}
		e.queueMu.Unlock()
		locked = false
		for _, fn := range subs {
			fn(batch)
		}
		e.queueMu.Lock()
		locked = true
	}
}

func (e *Engine) takePending() []Change {
	// Every call is an epoch of its own, even one that changed nothing:
	// per-call marks (pendSlot, group.spanEpoch) must not leak into the
	// next call.
	defer func() { e.epoch++ }()
	if len(e.pendingList) == 0 {
		return nil
	}
	var out []Change
	if e.nsubs.Load() > 0 {
		out = make([]Change, 0, len(e.pendingList))
		for _, c := range e.pendingList {
			if !c.dropped {
				out = append(out, c.Change)
			}
		}
	}
	if cap(e.pendingList) > 1<<16 {
		e.pendingList = nil // do not hold on to a huge backing array
	} else {
		e.pendingList = e.pendingList[:0]
	}
	if len(e.pendingDeleted) > 0 {
		e.pendingDeleted = map[pendingKey]int{}
	}
	return out
}

// record notes a change of one object and returns its new generation
// (Added and Updated take a new generation once per call).
func (e *Engine) record(slot *pendSlot, kind ObjectKind, typ ChangeType, id string, gen int64) int64 {
	var c *pendingChange
	if slot.epoch == e.epoch && !e.pendingList[slot.idx].dropped {
		c = &e.pendingList[slot.idx]
	} else if typ == Added && len(e.pendingDeleted) > 0 {
		if i, ok := e.pendingDeleted[pendingKey{kind, id}]; ok && !e.pendingList[i].dropped {
			c, slot.epoch, slot.idx = &e.pendingList[i], e.epoch, i
		}
	}
	if c == nil {
		if typ != Deleted {
			e.clock++
			gen = e.clock
		}
		slot.epoch, slot.idx = e.epoch, len(e.pendingList)
		e.pendingList = append(e.pendingList, pendingChange{Change: Change{Kind: kind, Type: typ, ID: id, Generation: gen}, bumped: true})
		if typ == Deleted {
			e.pendingDeleted[pendingKey{kind, id}] = slot.idx
		}
		return gen
	}
	switch {
	case typ == Deleted && c.Type == Added:
		// Born and gone within one call: nobody needs to hear of it.
		c.dropped = true
		return gen
	case typ == Deleted:
		c.Type, c.Generation = Deleted, gen
		e.pendingDeleted[pendingKey{kind, id}] = slot.idx
		return gen
	case c.Type == Deleted:
		// Gone and back within one call: to a subscriber, an update.
		delete(e.pendingDeleted, pendingKey{kind, id})
		e.clock++
		c.Type, c.Generation, c.bumped = Updated, e.clock, true
		return c.Generation
	case !c.bumped:
		// Recorded for its span alone so far; now its content changes.
		e.clock++
		c.Generation, c.bumped = e.clock, true
	}
	return c.Generation
}

// recordSpan notes that only an object's span changed: subscribers hear of
// it (as Updated, so that distribution sends it to the nodes that now need
// it and withdraws it from the others) but it keeps its generation, since
// nothing an agent holding it would install differs. Agents' rule caches
// and realization reports keyed by generation stay valid.
func (e *Engine) recordSpan(slot *pendSlot, kind ObjectKind, id string, gen int64) int64 {
	if slot.epoch == e.epoch && !e.pendingList[slot.idx].dropped {
		return e.pendingList[slot.idx].Generation
	}
	slot.epoch, slot.idx = e.epoch, len(e.pendingList)
	e.pendingList = append(e.pendingList, pendingChange{Change: Change{Kind: kind, Type: Updated, ID: id, Generation: gen}})
	return gen
}
