package controller

import (
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// earlyPods applies the pods of the pod informer's initial list to the
// engine while they stream in, instead of after the whole list.
//
// Why: client-go's reflector keeps a streamed initial list (WatchList) in
// a store of its own until the bookmark that ends it, and only then hands
// the informer the whole list; on a large cluster that stream is about
// half of the controller's start, during which no pod reached the engine,
// and after it one goroutine applied them all. The reflector runs the
// informer's transform on each object as it arrives, though, so the pod
// informer's transform (transform) also queues each freshly transformed
// pod for the engine, in runs of maxEventBatch (the engine's per-batch
// work, such as a span record per policy whose group grew, is paid per
// run, not per pod). It starts once earlyFeedMinPods have streamed and
// the other core kinds' initial lists (namespaces, nodes,
// NetworkPolicies, which stream at the same time) are in the engine; the
// pods streamed before are not fed (the informer's delivery queues them,
// as without the feed), nor is anything recorded of them. A pod that
// arrives after its policies joins their groups in runs whose groups the
// engine finds on every core, but a policy that arrives after its pods
// finds their members on the engine's one goroutine (with 75,000
// NetworkPolicies streaming beside the pods, feeding every pod at once
// cost small namespaces more than it saved).
//
// Until the initial list is reconciled (finish) the transform's objects
// are not yet the informer's: a stream that breaks is streamed again (a
// pod may be missing from the second, or differ), and pods may change
// while they stream. So what was fed is remembered (fed, by key hash):
//   - when the informer delivers the very object that was fed (its
//     initial list is the reflector's store's objects, the same
//     pointers), the handler queues nothing: it is queued or applied
//     already, so re-applying it costs no engine work;
//   - any other event of a fed pod (another version, a delete) is queued
//     as usual, after the fed one;
//   - a pod fed but never delivered by the time the registration has
//     seen the whole initial list is not in the final list (deleted while
//     a broken stream was streamed again): finish queues its deletion,
//     before HasSynced can report the lists in the engine. A stale pod
//     left in the engine could widen a group, and so open traffic.
//
// Feeding stops for good at the first already-transformed pod the
// transform sees (the reflector's Replace of a streamed list passes its
// objects through the transform again) or the first handler event,
// whichever comes first: after that every pod the transform sees reaches
// the handlers as an event of its own (a relist after a broken watch is
// delivered as updates and deletes). From an API server that only lists,
// the transform runs inside Replace, on the decoded list: feeding then
// only starts the engine on the list a little earlier.
//
// Nothing is published from the engine before HasSynced (the distribution
// server serves agents and tierctl only once the controller has synced;
// status and Events are written only after the caches sync), so the
// partial state the early feed builds is never seen.
type earlyPods struct {
	q    *eventQueue
	kind *eventKind // of the pod events
	// closed: the transform no longer feeds (checked before taking mu).
	closed atomic.Bool
	// done: finish has run; the handlers only queue.
	done atomic.Bool

	// ready reports whether the other core kinds' initial lists
	// (namespaces, nodes, NetworkPolicies) are in the engine.
	ready func() bool

	mu sync.Mutex
	// started: the feed started (enough pods streamed, and ready was
	// true); pods are fed from then on.
	started bool
	// streamed counts the pods the transform saw.
	streamed int
	// buf holds the pods fed but not yet queued (up to maxEventBatch).
	buf []earlyPod
	// fed is the last object fed of each pod not yet delivered by the
	// informer, by its key's hash (an object is found by its key, and
	// pointers are compared). A pod whose hash another fed pod has is
	// not fed: its handler event queues it.
	fed map[uint64]*cachedPod
}

// earlyPod is a pod fed early and its key's hash (its key is the pod's
// own strings).
type earlyPod struct {
	hash uint64
	pod  *cachedPod
}

// earlyFeedMinPods is how many pods must have streamed before the feed
// starts (a variable: tests lower it). A shorter list streams in a
// fraction of a second, so applying it early saves little, while the
// engine's growth then overlaps the reflector's end-of-list copies (its
// store, the key sets and queue of the informer's Replace) and the garbage
// of the stream: policy per pod's 10,000 pods took no less time fed early
// and about 6 MiB more peak RSS (median of eight runs, 94 -> 100 MiB).
var earlyFeedMinPods = 20 * maxEventBatch

func newEarlyPods(q *eventQueue, kind *eventKind, ready func() bool) *earlyPods {
	return &earlyPods{q: q, kind: kind, ready: ready, fed: map[uint64]*cachedPod{}}
}

// transform is the pod informer's transform: CoreTransform, and until the
// initial list arrives in the informer, each new pod fed to the engine.
func (f *earlyPods) transform(obj interface{}) (interface{}, error) {
	out, err := CoreTransform(obj)
	if err != nil || f.closed.Load() {
		return out, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() {
		return out, nil
	}
	switch obj.(type) {
	case *corev1.Pod:
	case *cachedPod:
		// The reflector hands the informer the objects it streamed (the
		// streamed list's Replace transforms them again): from here on
		// the handlers see every pod.
		f.closeLocked()
		return out, nil
	default:
		return out, nil
	}
	p, ok := out.(*cachedPod)
	if !ok {
		return out, nil
	}
	f.streamed++
	// Whether to start is asked again every maxEventBatch pods.
	if n := f.streamed - earlyFeedMinPods; !f.started && n >= 0 && n%maxEventBatch == 0 && f.ready() {
		f.started = true
	}
	if !f.started {
		return out, nil // its handler event queues it
	}
	key := eventKey{kind: podKind, namespace: p.Namespace, name: p.Name}
	h := hashEventKey(key)
	if old := f.fed[h]; old != nil && (old.Namespace != p.Namespace || old.Name != p.Name) {
		return out, nil // another pod's hash: this one waits for its handler event
	}
	f.fed[h] = p
	f.buf = append(f.buf, earlyPod{hash: h, pod: p})
	if len(f.buf) >= maxEventBatch {
		f.flushLocked()
	}
	return out, nil
}

// flushLocked queues the buffered pods (f.mu held).
func (f *earlyPods) flushLocked() {
	if len(f.buf) == 0 {
		return
	}
	q := f.q
	now := time.Now()
	q.mu.Lock()
	for _, e := range f.buf {
		key := eventKey{kind: podKind, namespace: e.pod.Namespace, name: e.pod.Name}
		q.pushLocked(key, e.hash, f.kind, e.pod, false, now)
	}
	q.mu.Unlock()
	q.wakeUp()
	clear(f.buf)
	f.buf = f.buf[:0]
}

// closeLocked stops feeding, queueing what is buffered (f.mu held).
func (f *earlyPods) closeLocked() {
	if f.closed.Load() {
		return
	}
	f.flushLocked()
	f.buf = nil
	f.closed.Store(true)
	if !f.started {
		// Nothing was fed: the handlers need not look.
		f.fed = nil
		f.done.Store(true)
	}
}

// delivered is called by the pod handlers with each event before it is
// queued (m the pod, obj the object delivered, deleted for a delete):
// true when the event delivers the very object fed early, which is then
// queued already and needs no event of its own.
func (f *earlyPods) delivered(m metav1.Object, obj interface{}, deleted bool) bool {
	if f.done.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeLocked()
	if f.fed == nil {
		return false
	}
	ns, name := m.GetNamespace(), m.GetName()
	h := hashEventKey(eventKey{kind: podKind, namespace: ns, name: name})
	p := f.fed[h]
	if p == nil || p.Namespace != ns || p.Name != name {
		return false
	}
	delete(f.fed, h)
	return !deleted && obj == interface{}(p)
}

// finish reconciles the early feed with the informer's initial list, once
// the registration has delivered all of it: a pod fed but never delivered
// is not in the list, and its deletion is queued. Idempotent.
func (f *earlyPods) finish() {
	if f.done.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done.Load() {
		return
	}
	f.closeLocked()
	for h, p := range f.fed {
		f.q.pushHashed(eventKey{kind: podKind, namespace: p.Namespace, name: p.Name}, h, f.kind, p, true)
	}
	f.fed = nil
	f.done.Store(true)
}
