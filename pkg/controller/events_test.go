package controller

import (
	"fmt"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/compute"
)

// TestEventQueueCoalescesAndSyncs: events of one object coalesce to the
// latest (applied once, in the place of the first), follow-ups run after
// the engine applied them, and syncedAfter turns true only once the
// events queued before the handler synced are in the engine.
func TestEventQueueCoalescesAndSyncs(t *testing.T) {
	e := compute.New()
	q := newEventQueue(e)
	np := func(name string, gen int64) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: gen}}
	}
	var applied, followed []string
	kind := &eventKind{
		kind: "NetworkPolicy",
		upsert: func(w compute.Writer, obj interface{}) {
			np := obj.(*networkingv1.NetworkPolicy)
			applied = append(applied, np.Name)
			w.UpsertNetworkPolicy(np)
		},
		after: func(m metav1.Object) {
			if _, ok := e.Policy(string(m.GetUID())); !ok {
				t.Errorf("follow-up of %s ran before the engine had it", m.GetName())
			}
			followed = append(followed, m.GetName())
		},
	}
	push := func(name string, gen int64) {
		q.push(eventKey{kind: "NetworkPolicy", namespace: "ns", name: name}, kind, np(name, gen), false)
	}
	handlerSynced := false
	synced := q.syncedAfter(func() bool { return handlerSynced })

	push("a", 1)
	push("b", 1)
	push("a", 2)
	if synced() {
		t.Fatal("synced before the handler saw its initial list")
	}
	handlerSynced = true
	if synced() {
		t.Fatal("synced before the engine applied the queued events")
	}
	q.applyPending()
	if got := applied; len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("applied %v, want [a b] (a once, latest state, first place)", got)
	}
	if len(followed) != 2 {
		t.Errorf("follow-ups %v, want one per object", followed)
	}
	if p, ok := e.Policy("uid-a"); !ok || p.SourceGeneration != 2 {
		t.Errorf("engine has %+v, want a at generation 2", p)
	}
	if !synced() {
		t.Fatal("not synced after the initial events were applied")
	}
	// Later events do not move the mark back.
	push("c", 1)
	if !synced() {
		t.Error("a later event unsynced the handler")
	}
}

// TestEventQueueHashCollisions: objects whose keys share a hash each get
// their own entries and every object ends in its latest state, applied in
// the order of its events.
func TestEventQueueHashCollisions(t *testing.T) {
	defer func(h func(eventKey) uint64) { hashEventKey = h }(hashEventKey)
	hashEventKey = func(eventKey) uint64 { return 1 }
	e := compute.New()
	q := newEventQueue(e)
	var applied []string
	kind := &eventKind{
		kind: "NetworkPolicy",
		upsert: func(w compute.Writer, obj interface{}) {
			np := obj.(*networkingv1.NetworkPolicy)
			applied = append(applied, fmt.Sprintf("%s@%d", np.Name, np.Generation))
			w.UpsertNetworkPolicy(np)
		},
		del: func(w compute.Writer, m metav1.Object) {
			applied = append(applied, "-"+m.GetName())
			w.DeleteNetworkPolicy(m.GetNamespace(), m.GetName())
		},
	}
	push := func(name string, gen int64, deleted bool) {
		obj := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: gen}}
		q.push(eventKey{kind: "NetworkPolicy", namespace: "ns", name: name}, kind, obj, deleted)
	}
	push("a", 1, false)
	push("b", 1, false)
	push("a", 2, false) // a's entry is no longer the indexed one: a new entry
	push("a", 3, false) // coalesces into that new entry
	push("b", 2, true)
	q.applyPending()
	want := []string{"a@1", "b@1", "a@3", "-b"}
	if fmt.Sprint(applied) != fmt.Sprint(want) {
		t.Errorf("applied %v, want %v", applied, want)
	}
	if p, ok := e.Policy("uid-a"); !ok || p.SourceGeneration != 3 {
		t.Errorf("engine has %+v, want a at generation 3", p)
	}
	if _, ok := e.Policy("uid-b"); ok {
		t.Error("b still in the engine after its delete")
	}
	if len(q.byHash) != 0 || len(q.pending) != 0 {
		t.Errorf("queue holds %d indexed, %d pending after applying everything", len(q.byHash), len(q.pending))
	}
}
