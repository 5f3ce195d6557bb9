package shapes_test

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			}
		})
	}
}
