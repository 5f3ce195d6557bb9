package controller

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	npfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/tierflow/tierflow/pkg/model"
)

// TestDeleteTombstonesReachTheEngine feeds the handlers a delete the way
// an informer delivers one it missed during a watch gap: wrapped in a
// DeletedFinalStateUnknown. (A real API server cannot be made to produce
// one on demand; the clientsets here are only needed to build the
// controller and are never called.)
func TestDeleteTombstonesReachTheEngine(t *testing.T) {
	c, err := New(Config{Kube: kubefake.NewSimpleClientset(), Policy: npfake.NewSimpleClientset()})
	if err != nil {
		t.Fatal(err)
	}
	anp := &v1alpha1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a", Generation: 1},
		Spec:       v1alpha1.AdminNetworkPolicySpec{Priority: 1, Subject: v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}},
	}
	// The NetworkPolicy informer hands its handler what its cache holds:
	// the transformed object.
	np, err := CoreTransform(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n", UID: "uid-n", Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	anpHandler := c.policyHandler(c.kinds[model.KindAdminNetworkPolicy])
	npHandler := c.networkPolicyHandler()
	anpHandler.OnAdd(anp, false)
	npHandler.OnAdd(np, false)
	c.events.applyPending() // Run's event goroutine is not running here
	if n := len(c.engine.Snapshot().Policies); n != 2 {
		t.Fatalf("%d policies after adds, want 2", n)
	}
	anpHandler.OnDelete(cache.DeletedFinalStateUnknown{Key: "a", Obj: anp})
	npHandler.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/n", Obj: np})
	c.events.applyPending()
	if n := len(c.engine.Snapshot().Policies); n != 0 {
		t.Fatalf("%d policies after tombstone deletes, want 0", n)
	}
	// A tombstone holding something unexpected is ignored, not a panic.
	anpHandler.OnDelete(cache.DeletedFinalStateUnknown{Key: "x", Obj: "not an object"})
}
