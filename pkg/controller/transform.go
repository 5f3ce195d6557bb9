package controller

import (
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/model"
)

// The core informers' caches hold only what the controller reads: on a
// large cluster they are most of its memory, and every byte of them is
// scanned by each garbage collection. Readers of the caches:
//
//   - the engine (pkg/compute): a pod's namespace, name, labels, node,
//     host network, phase, addresses and named container ports (of its
//     containers and of its sidecars, init containers with restartPolicy
//     Always); a namespace's and a node's name and labels; a node's
//     addresses and pod CIDRs (its gateway address is a nodes peer); a
//     pod's UID (its node's agent admits its port by it); a
//     NetworkPolicy's metadata and spec;
//   - tierctl's queries (Controller.Pods, pkg/explain/load): the same pod
//     fields;
//   - NetworkPolicy Events (syncNetworkPolicyEvents): the object's
//     reference (name, namespace, UID, resource version) and generation.
//
// The informers themselves need the namespace and name (cache keys) and
// the resource version. Everything else is dropped when an object enters
// the cache (client-go's transform runs before the object is stored or
// handed to a handler); pods are cached as cachedPod, NetworkPolicies as
// cachedNetworkPolicy (metadata and the engine's compilation), namespaces
// as cachedNamespace, nodes as cachedNode, their metadata as cachedMeta
// (meta.go). A new field
// the engine reads must be kept here too: TestSlimObjectsComputeAlike
// compares the engine's results on full and on slimmed objects.

// CoreTransform is the transform of the controller's core informers
// (benchmarks that reproduce the controller's informers use it too). A pod
// becomes a cachedPod, a NetworkPolicy a cachedNetworkPolicy, a namespace
// a cachedNamespace, a node a cachedNode (each keeps what it needs of the
// object client-go decoded, which nothing else holds, and drops the rest).
// From an apiserver that streams initial lists (kube-apiserver's WatchList,
// on by default from 1.34; client-go's reflectors ask for it), each object
// is transformed as it arrives and the decoded list is never held whole;
// from one that only lists, the whole list is decoded first.
func CoreTransform(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return newCachedPod(o), nil
	case *corev1.Namespace:
		return &cachedNamespace{newCachedMeta(&o.ObjectMeta)}, nil
	case *corev1.Node:
		return &cachedNode{cachedMeta: newCachedMeta(&o.ObjectMeta), podCIDR: o.Spec.PodCIDR, podCIDRs: o.Spec.PodCIDRs, addresses: o.Status.Addresses}, nil
	case *networkingv1.NetworkPolicy:
		return &cachedNetworkPolicy{cachedMeta: newCachedMeta(&o.ObjectMeta), compiled: compute.CompileNetworkPolicy(o)}, nil
	default:
		return stripManagedFields(obj)
	}
}

// cachedNamespace is what the namespace informer's cache holds: the
// namespace's name and labels (80 bytes; a trimmed corev1.Namespace took
// 352, 8 MiB for the 25,000 namespaces of small namespaces).
type cachedNamespace struct {
	cachedMeta
}

// Namespace is the namespace as the engine reads it (a new object; its
// labels are the cache's: never modified).
func (ns *cachedNamespace) Namespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: ns.objectMeta()}
}

// DeepCopyObject implements runtime.Object.
func (ns *cachedNamespace) DeepCopyObject() runtime.Object {
	return &cachedNamespace{ns.copied()}
}

// cachedNode is what the node informer's cache holds: the node's name,
// labels, pod CIDRs and addresses (160 bytes; a trimmed corev1.Node kept
// its 768).
type cachedNode struct {
	cachedMeta
	podCIDR   string
	podCIDRs  []string
	addresses []corev1.NodeAddress
}

// Node is the node as the engine reads it (a new object; its labels,
// CIDRs and addresses are the cache's: never modified).
func (n *cachedNode) Node() *corev1.Node {
	return &corev1.Node{ObjectMeta: n.objectMeta(), Spec: corev1.NodeSpec{PodCIDR: n.podCIDR, PodCIDRs: n.podCIDRs},
		Status: corev1.NodeStatus{Addresses: n.addresses}}
}

// DeepCopyObject implements runtime.Object.
func (n *cachedNode) DeepCopyObject() runtime.Object {
	c := *n
	c.cachedMeta = n.copied()
	c.podCIDRs, c.addresses = slices.Clone(n.podCIDRs), slices.Clone(n.addresses)
	return &c
}

// cachedNetworkPolicy is what the NetworkPolicy informer's cache holds:
// the metadata Events and status need, and the policy as the engine reads
// it (compiled as it arrives, on the informer's goroutine; the engine
// keeps the same compilation, so the cache costs little beyond it).
type cachedNetworkPolicy struct {
	cachedMeta
	compiled compute.Compiled
}

// object is the policy as Events refer to it (metadata only).
func (np *cachedNetworkPolicy) object() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: np.objectMeta()}
}

// DeepCopyObject implements runtime.Object (the compilation is immutable).
func (np *cachedNetworkPolicy) DeepCopyObject() runtime.Object {
	c := *np
	c.cachedMeta = np.copied()
	return &c
}

// cachedPod is what the pod informer's cache holds of a pod: the fields
// the engine and tierctl's queries read, in about a third of a trimmed
// corev1.Pod's memory (on a large cluster the pod cache is most of the
// controller's). The engine is fed its preparation; Pod rebuilds the
// corev1.Pod tierctl's queries read.
type cachedPod struct {
	cachedMeta
	phase corev1.PodPhase
	// api holds the pod's node, host-network flag, addresses and named
	// ports as the API object wrote them, kept only when its preparation
	// does not give them back exactly (podFieldsOf): a pod that takes no
	// part in policy but has a node (host network, terminated), IPs not
	// in the preparation's order or form, sidecar ports. For the others
	// (nearly every pod) they are read from the preparation, which holds
	// them anyway: about 210 bytes less per pod (three allocations, and
	// a size class of 256 bytes instead of 384).
	api *podFields
	// prepared is the pod as the engine reads it, prepared as it arrives
	// on the informer's goroutine: the engine's goroutine then neither
	// rebuilds a corev1.Pod nor parses addresses (during an initial list
	// of 100,000 pods that was most of its work per pod).
	prepared compute.PreparedPod
}

// podFields are the node, host-network flag, addresses and named ports a
// cachedPod's readers see.
type podFields struct {
	nodeName    string
	hostNetwork bool
	podIP       string
	podIPs      []corev1.PodIP
	// ports are the named ports of the containers, sidecarPorts those of
	// the sidecars (init containers with restartPolicy Always, which serve
	// ports for the pod's whole life); which container declares a port
	// does not matter to their readers.
	ports, sidecarPorts []corev1.ContainerPort
}

func newCachedPod(p *corev1.Pod) *cachedPod {
	prepared := compute.PreparePod(p)
	meta := newCachedMeta(&p.ObjectMeta)
	if prepared.Eligible() {
		// Its preparation holds the labels, in a set shared with the
		// pods of equal labels and smaller than a map (GetLabels).
		meta.Labels = nil
	}
	c := &cachedPod{
		cachedMeta: meta,
		phase:      p.Status.Phase,
		prepared:   prepared,
	}
	// The fields as the object has them are checked against the
	// preparation on the stack (the ports in a buffer there): only a pod
	// whose fields the preparation does not give back has them made on
	// the heap (making them there for every pod, to drop them, was two
	// allocations per pod of an initial list).
	var buf [4]corev1.ContainerPort
	if f := apiPodFields(p, buf[:0]); !f.rebuiltBy(prepared) {
		f := apiPodFields(p, nil)
		c.api = &f
	}
	return c
}

// apiPodFields are the pod's addresses and named ports as its object has
// them, the ports appended to ports.
func apiPodFields(p *corev1.Pod, ports []corev1.ContainerPort) podFields {
	return podFields{
		nodeName:     p.Spec.NodeName,
		hostNetwork:  p.Spec.HostNetwork,
		podIP:        p.Status.PodIP,
		podIPs:       p.Status.PodIPs,
		ports:        appendNamedPorts(ports, p.Spec.Containers, false),
		sidecarPorts: appendNamedPorts(nil, p.Spec.InitContainers, true),
	}
}

// podFieldsOf rebuilds a pod's node, addresses and named ports from its
// preparation: the addresses in its order (the first one primary), the
// ports as its containers' (none for a pod that takes no part in
// policy, whose preparation holds none of them). A pod that does is not
// on the host network.
func podFieldsOf(prepared compute.PreparedPod) podFields {
	var f podFields
	if !prepared.Eligible() {
		return f
	}
	f.nodeName = prepared.Node()
	for _, ip := range prepared.IPs() {
		f.podIPs = append(f.podIPs, corev1.PodIP{IP: ip.String()})
	}
	if len(f.podIPs) > 0 {
		f.podIP = f.podIPs[0].IP
	}
	for _, np := range prepared.NamedPorts() {
		f.ports = append(f.ports, containerPortOf(np))
	}
	return f
}

// containerPortOf is a prepared named port as a container's port.
func containerPortOf(np model.NamedPort) corev1.ContainerPort {
	return corev1.ContainerPort{Name: np.Name, Protocol: corev1.Protocol(np.Protocol), ContainerPort: np.Port}
}

// rebuiltBy reports whether podFieldsOf(prepared) gives readers exactly f
// (an empty list is a nil one). It compares in place: building the
// rebuilt fields for every pod of an informer's initial list, only to
// drop them, was garbage on the controller's busiest path.
func (f *podFields) rebuiltBy(prepared compute.PreparedPod) bool {
	if len(f.sidecarPorts) > 0 || f.hostNetwork || f.nodeName != prepared.Node() {
		return false
	}
	var ips []netip.Addr
	var ports []model.NamedPort
	if prepared.Eligible() {
		ips, ports = prepared.IPs(), prepared.NamedPorts()
	}
	if len(f.podIPs) != len(ips) || len(f.ports) != len(ports) {
		return false
	}
	var buf [64]byte
	for i, ip := range ips {
		if string(ip.AppendTo(buf[:0])) != f.podIPs[i].IP {
			return false
		}
	}
	primary := ""
	if len(ips) > 0 {
		primary = f.podIPs[0].IP
	}
	if f.podIP != primary {
		return false
	}
	for i, np := range ports {
		if f.ports[i] != containerPortOf(np) {
			return false
		}
	}
	return true
}

// fields are the pod's addresses and named ports, as the API object had
// them.
func (p *cachedPod) fields() podFields {
	if p.api != nil {
		return *p.api
	}
	return podFieldsOf(p.prepared)
}

// GetLabels is the pod's labels: its preparation's when it takes part in
// policy (a new map each call), else the object's (shared: never
// modify).
func (p *cachedPod) GetLabels() map[string]string {
	if p.prepared.Eligible() {
		return p.prepared.Labels()
	}
	return p.Labels
}

// Pod is the pod as its readers see it (a new object).
func (p *cachedPod) Pod() *corev1.Pod {
	f := p.fields()
	pod := &corev1.Pod{
		ObjectMeta: p.objectMeta(),
		Spec:       corev1.PodSpec{NodeName: f.nodeName, HostNetwork: f.hostNetwork},
		Status:     corev1.PodStatus{Phase: p.phase, PodIP: f.podIP, PodIPs: f.podIPs},
	}
	if p.prepared.Eligible() {
		pod.Labels = p.prepared.Labels() // a new map
	} else {
		pod.Labels = maps.Clone(p.Labels) // the cache's map is shared with other pods
	}
	if len(f.ports) > 0 {
		pod.Spec.Containers = []corev1.Container{{Name: "ports", Ports: f.ports}}
	}
	if len(f.sidecarPorts) > 0 {
		always := corev1.ContainerRestartPolicyAlways
		pod.Spec.InitContainers = []corev1.Container{{Name: "sidecar-ports", RestartPolicy: &always, Ports: f.sidecarPorts}}
	}
	return pod
}

// DeepCopyObject implements runtime.Object (the preparation is
// immutable).
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	c.cachedMeta = p.copied()
	if p.api != nil {
		api := *p.api
		api.podIPs = slices.Clone(api.podIPs)
		api.ports, api.sidecarPorts = slices.Clone(api.ports), slices.Clone(api.sidecarPorts)
		c.api = &api
	}
	return &c
}

// appendNamedPorts appends to out the named ports of the containers (of
// the sidecars only, when sidecars): name, protocol and number.
func appendNamedPorts(out []corev1.ContainerPort, cs []corev1.Container, sidecars bool) []corev1.ContainerPort {
	for i := range cs {
		c := &cs[i]
		if sidecars && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			continue
		}
		for _, p := range c.Ports {
			if p.Name != "" {
				out = append(out, corev1.ContainerPort{Name: p.Name, Protocol: p.Protocol, ContainerPort: p.ContainerPort})
			}
		}
	}
	return out
}
