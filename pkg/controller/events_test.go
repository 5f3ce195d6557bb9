package controller

import (
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
	push := func(name string, gen int64) {
		obj := np(name, gen)
		q.push(eventKey{kind: "NetworkPolicy", namespace: "ns", name: name},
			func(w compute.Writer) { applied = append(applied, name); w.UpsertNetworkPolicy(obj) },
			func() {
				if _, ok := e.Policy(string(obj.UID)); !ok {
					t.Errorf("follow-up of %s ran before the engine had it", name)
				}
				followed = append(followed, name)
			}, nil)
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
