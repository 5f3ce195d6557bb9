package load

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
)

// Inventory lists the pods of objs that take part in network policy (see
// Excluded) for explain: name, node, addresses (status.podIPs) and named
// container ports (a port without protocol is TCP, as the API server
// defaults it).
func Inventory(objs *Objects) (*explain.Inventory, error) {
	pods := make([]explain.Pod, 0, len(objs.Pods))
	for _, p := range objs.Pods {
		if Excluded(p) != "" {
			continue
		}
		ep := explain.Pod{Ref: model.PodRef{Namespace: p.Namespace, Name: p.Name}, Node: p.Spec.NodeName}
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err != nil {
				return nil, fmt.Errorf("pod %s: status.podIPs: %w", ep.Ref, err)
			}
			ep.IPs = append(ep.IPs, a.Unmap())
		}
		ep.Ports = NamedPorts(p)
		pods = append(pods, ep)
	}
	return explain.NewInventory(pods)
}

// NamedPorts are a pod's named container ports, as pkg/compute reads them
// (the ports of spec.containers and of sidecars: init containers with
// restartPolicy Always).
func NamedPorts(p *corev1.Pod) []model.NamedPort {
	var out []model.NamedPort
	cs := p.Spec.Containers
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs = append(cs[:len(cs):len(cs)], c)
		}
	}
	for _, c := range cs {
		for _, cp := range c.Ports {
			if cp.Name == "" {
				continue
			}
			proto := model.Protocol(cp.Protocol)
			if proto == "" {
				proto = model.ProtocolTCP
			}
			out = append(out, model.NamedPort{Name: cp.Name, Protocol: proto, Port: cp.ContainerPort})
		}
	}
	return out
}

// Excluded says why a pod cannot be an end of a connection explain
// evaluates, or "" when it can. The first three reasons are pkg/compute's:
// such a pod is in no group, so no policy applies to it and no peer
// selector selects it. A scheduled pod without an IP yet is in its groups
// (policies already apply to it, by port) but has no address to connect
// from or to.
func Excluded(p *corev1.Pod) string {
	switch {
	case p.Spec.HostNetwork:
		return "it uses the host network"
	case p.Spec.NodeName == "":
		return "it is not scheduled to a node"
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return "it has terminated"
	case len(p.Status.PodIPs) == 0 && p.Status.PodIP == "":
		return "it has no IP address yet (policies already apply to it, but it is no end of a connection)"
	}
	return ""
}
