package controller

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/compute"
)

// maxEventBatch bounds how many queued events one engine batch applies:
// large enough that a burst (an informer's initial list) is applied in few
// batches, small enough that the engine's lock, which readers such as the
// distribution server and status sync wait for, is never held for long.
const maxEventBatch = 1000

// podKind is the kind of pod events.
const podKind = "Pod"

// eventKey names one API object: informer events for the same object
// coalesce, since the engine only needs an object's latest state.
type eventKey struct {
	kind            string
	namespace, name string
}

// eventSeed seeds the hashes by which the queue finds an object's pending
// event.
var eventSeed = maphash.MakeSeed()

// hashEventKey hashes a key for the queue's index (a variable: a test
// makes keys collide).
var hashEventKey = eventKey.hash

// hash is k's hash for the queue's index.
func (k eventKey) hash() uint64 {
	var h maphash.Hash
	h.SetSeed(eventSeed)
	h.WriteString(k.kind)
	h.WriteByte(0)
	h.WriteString(k.namespace)
	h.WriteByte(0)
	h.WriteString(k.name)
	return h.Sum64()
}

// eventKind is how the events of one kind reach the engine (one per kind,
// shared by its events: an event holds its object and this, not closures
// of its own, which were two allocations per event of an initial list).
type eventKind struct {
	kind string
	// upsert and del feed an upsert or a delete into the engine.
	upsert func(w compute.Writer, obj interface{})
	del    func(w compute.Writer, m metav1.Object)
	// after, if set, runs once the engine has applied an event of the
	// object (status sync queueing: the sync reads what the engine
	// computed).
	after func(m metav1.Object)
	// observer times events from arrival until applied (nil: untimed).
	observer prometheus.Observer
}

// queuedEvent is the latest pending event of one object.
type queuedEvent struct {
	key  eventKey
	hash uint64 // key.hash()
	kind *eventKind
	// obj is the object upserted or, when deleted, deleted.
	obj     metav1.Object
	deleted bool
	// seq is the sequence number of the object's first event still
	// pending: every event merged into this entry has a higher one.
	seq uint64
	// arrived is when that first event reached the controller.
	arrived time.Time
}

// apply feeds the event into the engine.
func (ev *queuedEvent) apply(w compute.Writer) {
	if ev.deleted {
		ev.kind.del(w, ev.obj)
		return
	}
	ev.kind.upsert(w, ev.obj)
}

// eventQueue carries informer events to the engine. Handlers only queue
// (cheap, so an informer's list is drained at once); one goroutine applies
// whatever has queued up as one compute.Engine.Batch. Under a burst the
// batches grow and the engine reports each computed object once per batch
// instead of once per event: the initial list of 10,000 pods selected by
// 10,000 identical policies reports each policy's span change a few
// times, not once per node. A lone event is applied at once.
type eventQueue struct {
	engine *compute.Engine

	mu      sync.Mutex
	pending []*queuedEvent
	// byHash finds the latest pending entry of an object by its key's
	// hash (a map of integers: one of keys hashed three strings for each
	// lookup and rehash and held 56-byte slots). Two objects whose keys
	// share a hash share a slot, which names the later one's entry: an
	// event of the other then starts an entry of its own behind its
	// pending one, so it only coalesces less, and its events still apply
	// in order.
	byHash map[uint64]*queuedEvent
	seq    uint64 // last sequence number handed out
	// inflight is the first sequence number of the batch being applied
	// (0: none).
	inflight uint64
	wake     chan struct{}
}

func newEventQueue(e *compute.Engine) *eventQueue {
	return &eventQueue{engine: e, byHash: map[uint64]*queuedEvent{}, wake: make(chan struct{}, 1)}
}

// push queues an event of obj (of kind k, named key): an upsert, or a
// delete when deleted. A pending event of the same object is replaced
// (keeping its place in line).
func (q *eventQueue) push(key eventKey, k *eventKind, obj metav1.Object, deleted bool) {
	q.pushHashed(key, hashEventKey(key), k, obj, deleted)
}

// pushHashed is push of a key whose hash (hashEventKey) the caller has.
func (q *eventQueue) pushHashed(key eventKey, h uint64, k *eventKind, obj metav1.Object, deleted bool) {
	q.mu.Lock()
	q.pushLocked(key, h, k, obj, deleted, time.Now())
	q.mu.Unlock()
	q.wakeUp()
}

// pushLocked queues an event with q.mu held.
func (q *eventQueue) pushLocked(key eventKey, h uint64, k *eventKind, obj metav1.Object, deleted bool, now time.Time) {
	q.seq++
	if ev := q.byHash[h]; ev != nil && ev.key == key {
		// The latest event stands for the object.
		ev.obj, ev.deleted = obj, deleted
	} else {
		ev := &queuedEvent{key: key, hash: h, kind: k, obj: obj, deleted: deleted, seq: q.seq, arrived: now}
		q.pending = append(q.pending, ev)
		q.byHash[h] = ev
	}
}

// wakeUp wakes the goroutine that applies events.
func (q *eventQueue) wakeUp() {
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// take removes up to maxEventBatch events from the head of the line and
// marks them in flight.
func (q *eventQueue) take() []*queuedEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.pending), maxEventBatch)
	if n == 0 {
		return nil
	}
	batch := make([]*queuedEvent, n)
	copy(batch, q.pending)
	clear(q.pending[:n])
	q.pending = q.pending[n:]
	if len(q.pending) == 0 {
		// Let a large backing array go, and byHash's table with it (it
		// names only pending events, so it is empty now): a Go map
		// never shrinks, and after an initial list of 100,000 pods and
		// 75,000 NetworkPolicies it held 14 MiB of empty slots for good.
		q.pending = nil
		q.byHash = map[uint64]*queuedEvent{}
	} else {
		for _, ev := range batch {
			if q.byHash[ev.hash] == ev {
				delete(q.byHash, ev.hash)
			}
		}
	}
	q.inflight = batch[0].seq
	return batch
}

// applyPending applies every queued event, batch by batch, and returns
// when the queue is empty.
func (q *eventQueue) applyPending() {
	for q.applyBatch() {
	}
}

// applyBatch applies one batch from the head of the line; false when
// nothing was queued.
func (q *eventQueue) applyBatch() bool {
	batch := q.take()
	if batch == nil {
		return false
	}
	q.engine.Batch(func(b *compute.Batch) {
		// The events of a batch are each of another object, and what the
		// engine computes depends on the objects, not on the order they
		// came in: the pods go last, as one run, whose groups the engine
		// finds on every core (compute.Batch.UpsertPreparedPod). During an
		// initial list pods and policies arrive interleaved, and most of
		// the engine's work is pods.
		for _, ev := range batch {
			if ev.key.kind != podKind {
				ev.apply(b)
			}
		}
		for _, ev := range batch {
			if ev.key.kind == podKind {
				ev.apply(b)
			}
		}
	})
	q.mu.Lock()
	q.inflight = 0
	q.mu.Unlock()
	now := time.Now()
	for _, ev := range batch {
		if ev.kind.after != nil {
			ev.kind.after(ev.obj)
		}
		if ev.kind.observer != nil {
			ev.kind.observer.Observe(now.Sub(ev.arrived).Seconds())
		}
	}
	return true
}

// run applies events as they come until ctx is done (checked between
// batches, so a steady stream of events cannot hold up shutdown).
func (q *eventQueue) run(ctx context.Context) {
	for ctx.Err() == nil {
		if q.applyBatch() {
			continue
		}
		select {
		case <-ctx.Done():
		case <-q.wake:
		}
	}
}

// mark returns the sequence number of the last event queued so far.
func (q *eventQueue) mark() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seq
}

// appliedThrough reports whether every event up to sequence number m has
// been applied: no entry waiting or in flight holds one (an entry's events
// all have sequence numbers from its seq on, and entries wait in order).
func (q *eventQueue) appliedThrough(m uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight != 0 && q.inflight <= m {
		return false
	}
	return len(q.pending) == 0 || q.pending[0].seq > m
}

// syncedAfter wraps an event handler registration's HasSynced: true once
// the registration has seen its informer's initial list and the engine has
// applied every event queued until then.
func (q *eventQueue) syncedAfter(handlerSynced func() bool) func() bool {
	var (
		mu     sync.Mutex
		marked bool
		m      uint64
	)
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if !marked {
			if !handlerSynced() {
				return false
			}
			// The handler has been called for every item of the initial
			// list, so each is queued with a sequence number up to m.
			m, marked = q.mark(), true
		}
		return q.appliedThrough(m)
	}
}
