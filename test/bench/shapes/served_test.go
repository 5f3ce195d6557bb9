package shapes_test

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/tierflow/tierflow/test/bench/shapes"
)

// The harness makes a kind's objects again for every list instead of
// holding the scenario: its lists must answer exactly the objects the
// whole scenario's build holds, every time.
func TestServedListsAreTheScenario(t *testing.T) {
	ctx := context.Background()
	for _, s := range shapes.All() {
		t.Run(s.Name, func(t *testing.T) {
			want := s.Build(true)
			c := newServed(s, true)
			if c.namespaces != len(want.Namespaces) || c.nodes != len(want.Nodes) || c.pods != len(want.Pods) ||
				c.nps != len(want.NPs) || c.policies != want.Policies() {
				t.Fatalf("counted %d namespaces, %d nodes, %d pods, %d NetworkPolicies, %d policies; the scenario has %d, %d, %d, %d, %d",
					c.namespaces, c.nodes, c.pods, c.nps, c.policies, len(want.Namespaces), len(want.Nodes), len(want.Pods), len(want.NPs), want.Policies())
			}
			if got := c.objects(shapes.AdminNetworkPolicyKind).ANPs; !reflect.DeepEqual(got, want.ANPs) {
				t.Errorf("AdminNetworkPolicies made again differ from the scenario's")
			}
			kube := newClientset(c)
			all := metav1.ListOptions{}
			for range 2 { // every list answers the same objects
				nss, err := kube.CoreV1().Namespaces().List(ctx, all)
				if err != nil || !reflect.DeepEqual(nss.Items, deepCopies(want.Namespaces)) {
					t.Errorf("namespaces served differ from the scenario's (err %v)", err)
				}
				nodes, err := kube.CoreV1().Nodes().List(ctx, all)
				if err != nil || !reflect.DeepEqual(nodes.Items, deepCopies(want.Nodes)) {
					t.Errorf("nodes served differ from the scenario's (err %v)", err)
				}
				pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, all)
				if err != nil || !reflect.DeepEqual(pods.Items, deepCopies(want.Pods)) {
					t.Errorf("pods served differ from the scenario's (err %v)", err)
				}
				// Decoded objects share no map: a controller that keeps a
				// pod's labels keeps a map per pod.
				labelMaps := map[uintptr]bool{}
				for _, p := range pods.Items {
					m := reflect.ValueOf(p.Labels).Pointer()
					if labelMaps[m] {
						t.Fatalf("pod %s/%s shares its label map with another served pod", p.Namespace, p.Name)
					}
					labelMaps[m] = true
				}
				nps, err := kube.NetworkingV1().NetworkPolicies(metav1.NamespaceAll).List(ctx, all)
				if err != nil || !reflect.DeepEqual(nps.Items, deepCopies(want.NPs)) {
					t.Errorf("NetworkPolicies served differ from the scenario's (err %v)", err)
				}
				// The streamed initial lists (watches with initial
				// events) answer the same objects, then the bookmark.
				checkStreamed(t, "namespaces", want.Namespaces, kube.CoreV1().Namespaces().Watch)
				checkStreamed(t, "nodes", want.Nodes, kube.CoreV1().Nodes().Watch)
				checkStreamed(t, "pods", want.Pods, kube.CoreV1().Pods(metav1.NamespaceAll).Watch)
				checkStreamed(t, "NetworkPolicies", want.NPs, kube.NetworkingV1().NetworkPolicies(metav1.NamespaceAll).Watch)
			}
		})
	}
}

// checkStreamed checks that a watch asking for the initial events answers
// want, one Added event each, then a bookmark that ends the initial
// events, and stays open.
func checkStreamed[T any, P interface {
	*T
	DeepCopyInto(*T)
}](t *testing.T, kind string, want []P, watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	t.Helper()
	w, err := watchFn(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatalf("watch %s: %v", kind, err)
	}
	defer w.Stop()
	var got []T
	for e := range w.ResultChan() {
		if e.Type == watch.Bookmark {
			m, err := meta.Accessor(e.Object)
			if err != nil || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || m.GetResourceVersion() == "" {
				t.Fatalf("%s: bookmark %v does not end the initial events with a resource version", kind, e.Object)
			}
			if len(got)+len(want) > 0 && !reflect.DeepEqual(got, deepCopies(want)) {
				t.Errorf("%s streamed differ from the scenario's", kind)
			}
			select {
			case e, open := <-w.ResultChan():
				t.Errorf("%s: after the bookmark the watch sent %v (open %v), want it open and quiet", kind, e, open)
			default:
			}
			return
		}
		if e.Type != watch.Added {
			t.Fatalf("%s: initial event %s, want Added", kind, e.Type)
		}
		got = append(got, *any(e.Object).(P))
	}
	t.Fatalf("%s: the watch closed before the bookmark that ends the initial events", kind)
}
