package noderuntime

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestServiceLookup: the DNS stand-in's lookup answers from its watch of
// a real kube-apiserver's Services: Services there before it started and
// created after, not a headless Service nor one that does not exist, and
// not a Service once deleted.
func TestServiceLookup(t *testing.T) {
	kube := kubeapi.Start(t).Kube
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	create := func(name, clusterIP string) {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Port: 80}}}}
		if _, err := kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("before", "")
	create("headless", corev1.ClusterIPNone)
	lookup, err := ServiceLookup(ctx, kube)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kube.CoreV1().Services("default").Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ips, ok := lookup("default", "before"); !ok || !slices.Equal(ips, []netip.Addr{netip.MustParseAddr(before.Spec.ClusterIP)}) {
		t.Errorf("before: %v %v, want %s", ips, ok, before.Spec.ClusterIP)
	}
	for _, name := range []string{"headless", "nothing"} {
		if ips, ok := lookup("default", name); ok {
			t.Errorf("%s: answered %v", name, ips)
		}
	}
	create("after", "")
	waitFor(t, "the Service created after the start", func() bool { _, ok := lookup("default", "after"); return ok })
	if err := kube.CoreV1().Services("default").Delete(ctx, "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted Service to go", func() bool { _, ok := lookup("default", "before"); return !ok })
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
