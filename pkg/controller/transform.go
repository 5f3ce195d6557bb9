package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The core informers' caches hold only what the controller reads: on a
// large cluster they are most of its memory, and every byte of them is
// scanned by each garbage collection. Readers of the caches:
//
//   - the engine (pkg/compute): a pod's namespace, name, labels, node,
//     host network, phase, addresses and named container ports (of its
//     containers and of its sidecars, init containers with restartPolicy
//     Always); a namespace's and a node's name and labels; a node's
//     addresses; a NetworkPolicy's metadata and spec;
//   - tierctl's queries (Controller.Pods, pkg/explain/load): the same pod
//     fields;
//   - NetworkPolicy Events (syncNetworkPolicyEvents): the object's
//     reference (name, namespace, UID, resource version).
//
// The informers themselves need the namespace and name (cache keys) and
// the resource version. Everything else is dropped when an object enters
// the cache (client-go's transform runs before the object is stored or
// handed to a handler). A new field the engine reads must be kept here
// too: TestSlimObjectsComputeAlike compares the engine's results on full
// and on slimmed objects.

// CoreTransform is the transform of the controller's core informers
// (benchmarks that reproduce the controller's informers use it too). It
// trims the object in
// place (client-go hands the transform the object it decoded, which
// nothing else holds): a copy would double the memory of an initial list
// while it is being stored.
func CoreTransform(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		slimPod(o)
	case *corev1.Namespace:
		*o = corev1.Namespace{ObjectMeta: slimMeta(&o.ObjectMeta)}
	case *corev1.Node:
		*o = corev1.Node{ObjectMeta: slimMeta(&o.ObjectMeta), Status: corev1.NodeStatus{Addresses: o.Status.Addresses}}
	default:
		// NetworkPolicies (small, and their spec is read whole) and
		// anything else keep everything but the managed fields.
		return stripManagedFields(obj)
	}
	return obj, nil
}

// slimMeta keeps the metadata fields the controller or the informers read.
func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            m.Name,
		Namespace:       m.Namespace,
		UID:             m.UID,
		ResourceVersion: m.ResourceVersion,
		Generation:      m.Generation,
		Labels:          m.Labels,
	}
}

// slimPod trims a pod to what the engine and tierctl's queries read.
func slimPod(p *corev1.Pod) {
	*p = corev1.Pod{
		ObjectMeta: slimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName:    p.Spec.NodeName,
			HostNetwork: p.Spec.HostNetwork,
			Containers:  portsOnly(p.Spec.Containers, false),
			// Sidecars serve ports for the pod's whole life; other init
			// containers do not count.
			InitContainers: portsOnly(p.Spec.InitContainers, true),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
}

// portsOnly keeps, of the containers with named ports (of the sidecars
// only, when sidecars), the name, restart policy and named ports.
func portsOnly(cs []corev1.Container, sidecars bool) []corev1.Container {
	var out []corev1.Container
	for i := range cs {
		c := &cs[i]
		if sidecars && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			continue
		}
		var ports []corev1.ContainerPort
		for _, p := range c.Ports {
			if p.Name != "" {
				ports = append(ports, corev1.ContainerPort{Name: p.Name, Protocol: p.Protocol, ContainerPort: p.ContainerPort})
			}
		}
		if len(ports) > 0 {
			out = append(out, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Ports: ports})
		}
	}
	return out
}
