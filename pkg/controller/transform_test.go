package controller

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/explain/load"
)

// richPods are pods with every field the engine reads and many it does
// not: named and unnamed ports in containers, sidecars and plain init
// containers, host network, terminated and address-less pods.
func richPods() []*corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	var pods []*corev1.Pod
	for i := 0; i < 12; i++ {
		ip := fmt.Sprintf("10.0.0.%d", i+1)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: []string{"a", "b"}[i%2], Name: fmt.Sprintf("p%d", i), UID: "uid",
				ResourceVersion: "7", Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%3), "tier": "x"},
				Annotations: map[string]string{"big": "annotation"}, OwnerReferences: []metav1.OwnerReference{{Name: "rs"}},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%3), ServiceAccountName: "sa",
				Containers: []corev1.Container{
					{Name: "main", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}, Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: int32(8000 + i%2), Protocol: corev1.ProtocolTCP},
						{ContainerPort: 9999},
						{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
					{Name: "plain", Image: "img", Ports: []corev1.ContainerPort{{ContainerPort: 7000}}},
				},
				InitContainers: []corev1.Container{
					{Name: "setup", Image: "img", Ports: []corev1.ContainerPort{{Name: "setup-port", ContainerPort: 6000}}},
					{Name: "sidecar", Image: "img", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}},
				},
				Volumes: []corev1.Volume{{Name: "v"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}, {IP: fmt.Sprintf("fd00::%d", i+1)}},
				HostIP: "192.168.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
		}
		switch i {
		case 3:
			p.Spec.HostNetwork = true
		case 4:
			p.Status.Phase = corev1.PodSucceeded
		case 5:
			p.Status.PodIP, p.Status.PodIPs = "", nil
		case 6:
			p.Spec.NodeName = ""
		case 7:
			p.Spec.Containers[0].Ports = nil
		}
		pods = append(pods, p)
	}
	return pods
}

// TestSlimObjectsComputeAlike: the engine computes the same from objects
// trimmed by the core informers' transform (pods: from the cachedPod's
// preparation; NetworkPolicies: from the cachedNetworkPolicy's compilation) as
// from the full objects, and tierctl's queries (pkg/explain/load)
// read the same pods from them. A field the engine starts reading but the
// transform drops fails here.
func TestSlimObjectsComputeAlike(t *testing.T) {
	pods := richPods()
	nss := []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "red"}, Annotations: map[string]string{"x": "y"}},
			Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"team": "blue"}}},
	}
	var nodes []*corev1.Node
	for i := 0; i < 3; i++ {
		nodes = append(nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{"rack": fmt.Sprint(i % 2)}},
			Spec:       corev1.NodeSpec{PodCIDR: "10.0.0.0/24"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", i+1)}, {Type: corev1.NodeHostName, Address: "h"}},
				Capacity: corev1.ResourceList{}},
		})
	}
	http := intstr.FromString("http")
	metrics := intstr.FromString("metrics")
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "np", UID: "np-uid", Generation: 2},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-0"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &http}, {Port: &metrics}},
			}},
		},
	}
	anp := &v1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "anp", UID: "anp-uid"}}
	anp.Spec.Priority = 5
	anp.Spec.Subject.Namespaces = &metav1.LabelSelector{}
	anp.Spec.Egress = []v1alpha1.AdminNetworkPolicyEgressRule{{Name: "nodes", Action: v1alpha1.AdminNetworkPolicyRuleActionDeny,
		To: []v1alpha1.AdminNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "1"}}}}}}

	feed := func(slim bool) (*compute.Engine, []*corev1.Pod) {
		e := compute.New()
		var fed []*corev1.Pod
		trim := func(o interface{}) interface{} {
			if !slim {
				return o
			}
			out, err := CoreTransform(o)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		// cachedForm is what the informer's cache holds of o (a copy of
		// it, trimmed), which a deep copy must keep as it is.
		cachedForm := func(o runtime.Object) runtime.Object {
			cached := trim(o.DeepCopyObject()).(runtime.Object)
			if c := cached.DeepCopyObject(); !reflect.DeepEqual(c, cached) {
				t.Fatalf("cached %T changes in a deep copy", cached)
			}
			return cached
		}
		for _, o := range nss {
			if !slim {
				e.UpsertNamespace(o.DeepCopy())
				continue
			}
			e.UpsertNamespace(cachedForm(o).(*cachedNamespace).Namespace())
		}
		for _, o := range nodes {
			if !slim {
				e.UpsertNode(o.DeepCopy())
				continue
			}
			e.UpsertNode(cachedForm(o).(*cachedNode).Node())
		}
		for _, o := range pods {
			var p *corev1.Pod
			if slim {
				cached := trim(o.DeepCopy()).(*cachedPod)
				// What the cache holds must survive its deep copy (the
				// informer's contract for shared objects).
				if c := cached.DeepCopyObject().(*cachedPod); !reflect.DeepEqual(c, cached) {
					t.Fatalf("cached pod %s changes in a deep copy", o.Name)
				}
				p = cached.Pod()
				e.UpsertPreparedPod(cached.prepared)
			} else {
				p = o.DeepCopy()
				e.UpsertPod(p)
			}
			fed = append(fed, p)
		}
		if slim {
			cached := trim(np.DeepCopy()).(*cachedNetworkPolicy)
			if c := cached.DeepCopyObject().(*cachedNetworkPolicy); !reflect.DeepEqual(c, cached) {
				t.Fatal("cached NetworkPolicy changes in a deep copy")
			}
			if cached.UID != np.UID || cached.Generation != np.Generation || cached.object().Name != np.Name {
				t.Fatalf("cached NetworkPolicy lost its identity: %+v", cached.cachedMeta)
			}
			e.UpsertCompiled(cached.compiled)
		} else {
			e.UpsertNetworkPolicy(np.DeepCopy())
		}
		e.UpsertAdminNetworkPolicy(anp.DeepCopy())
		return e, fed
	}
	full, fullPods := feed(false)
	slim, slimPods := feed(true)
	if got, want := slim.Snapshot(), full.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("engine computes differently from slim objects:\nslim: %+v\nfull: %+v", got, want)
	}
	if len(full.Snapshot().AddressGroups) == 0 {
		t.Fatal("the test computes nothing")
	}
	for i := range fullPods {
		if a, b := load.Excluded(slimPods[i]), load.Excluded(fullPods[i]); a != b {
			t.Errorf("pod %s: excluded %q from a slim object, %q from the full one", fullPods[i].Name, a, b)
		}
	}
	inFull, err := load.Inventory(&load.Objects{Pods: fullPods})
	if err != nil {
		t.Fatal(err)
	}
	inSlim, err := load.Inventory(&load.Objects{Pods: slimPods})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(inSlim.Pods(), inFull.Pods()) {
		t.Fatalf("tierctl's inventory differs from slim objects:\nslim: %+v\nfull: %+v", inSlim.Pods(), inFull.Pods())
	}
}

// TestCachedPodRebuildsItsFields: a cached pod that reads its addresses
// and named ports back from its preparation shows its readers exactly
// what one that kept the API object's fields shows; a pod whose
// preparation would not give them back exactly keeps them.
func TestCachedPodRebuildsItsFields(t *testing.T) {
	pods := richPods()
	variant := func(name string, edit func(p *corev1.Pod)) {
		p := richPods()[0].DeepCopy()
		p.Name = name
		p.Spec.InitContainers = nil
		p.Status.PodIPs = p.Status.PodIPs[:1]
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "http", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}, {ContainerPort: 9999}}
		edit(p)
		pods = append(pods, p)
	}
	variant("plain", func(*corev1.Pod) {})
	variant("v6-first", func(p *corev1.Pod) {
		p.Status.PodIP = "fd00::1"
		p.Status.PodIPs = []corev1.PodIP{{IP: "fd00::1"}, {IP: "10.0.0.1"}}
	})
	variant("dual-stack", func(p *corev1.Pod) {
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}
	})
	variant("pod-ip-only", func(p *corev1.Pod) { p.Status.PodIPs = nil })
	variant("bad-ip", func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "bad", []corev1.PodIP{{IP: "bad"}} })
	variant("mapped-ip", func(p *corev1.Pod) {
		p.Status.PodIP, p.Status.PodIPs = "::ffff:10.0.0.1", []corev1.PodIP{{IP: "::ffff:10.0.0.1"}}
	})
	variant("unsorted-ports", func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "z", ContainerPort: 1, Protocol: corev1.ProtocolTCP},
			{Name: "a", ContainerPort: 2, Protocol: corev1.ProtocolTCP}}
	})
	variant("protocol-unset", func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "a", ContainerPort: 2}}
	})
	variant("sorted-ports", func(p *corev1.Pod) {
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "a", ContainerPort: 2, Protocol: corev1.ProtocolTCP},
			{Name: "z", ContainerPort: 1, Protocol: corev1.ProtocolUDP}}
	})
	// Pods that take no part in policy: their node and host-network flag
	// are not in their preparation.
	variant("host-network", func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	variant("succeeded", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	variant("unscheduled", func(p *corev1.Pod) { p.Spec.NodeName, p.Status.PodIP, p.Status.PodIPs = "", "", nil })
	variant("unscheduled-no-ports", func(p *corev1.Pod) {
		p.Spec.NodeName, p.Status.PodIP, p.Status.PodIPs, p.Spec.Containers = "", "", nil, nil
	})
	rebuilt := 0
	for _, p := range pods {
		c := newCachedPod(p.DeepCopy())
		kept := *c
		api := apiPodFields(p, nil)
		kept.api = &api
		got, want := c.Pod(), kept.Pod()
		// Readers see an empty list and a nil one alike.
		if len(want.Status.PodIPs) == 0 {
			want.Status.PodIPs = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pod %s: rebuilt %+v\nwant %+v", p.Name, got, want)
		}
		if c.api == nil {
			rebuilt++
		}
	}
	if rebuilt < 3 { // plain, dual-stack, sorted-ports
		t.Fatalf("only %d pods read their fields from their preparation", rebuilt)
	}
}

// TestCachedPodLabels: a cached pod answers its object's labels (through
// GetLabels, Pod and a deep copy) whether its preparation keeps them (a
// pod that takes part in policy: no map of its own in the cache) or its
// metadata does (one that does not), and a reader changing the map it
// was given changes nothing cached.
func TestCachedPodLabels(t *testing.T) {
	for _, p := range append(richPods(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "unlabelled"},
		Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.1"}}) {
		want := maps.Clone(p.Labels)
		c := newCachedPod(p.DeepCopy())
		if c.prepared.Eligible() && c.Labels != nil {
			t.Errorf("pod %s: the cache keeps a label map besides its preparation", p.Name)
		}
		copied := c.DeepCopyObject().(*cachedPod)
		for _, got := range []map[string]string{c.GetLabels(), c.Pod().Labels, copied.GetLabels(), copied.Pod().Labels} {
			if !maps.Equal(got, want) {
				t.Fatalf("pod %s (eligible %v): labels %v, want %v", p.Name, c.prepared.Eligible(), got, want)
			}
		}
		if l := c.Pod().Labels; l != nil {
			l["app"] = "changed"
			if !maps.Equal(c.GetLabels(), want) {
				t.Fatalf("pod %s: a reader's change to Pod().Labels reached the cache: %v", p.Name, c.GetLabels())
			}
		}
	}
}
