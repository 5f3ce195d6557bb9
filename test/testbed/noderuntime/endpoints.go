package noderuntime

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/test/testbed/agnhost"
)

// PodHostname is the hostname a kubelet gives the pod: spec.hostname, else
// the pod's name, at most 63 characters.
func PodHostname(pod *corev1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// PodEndpoints is what a pod serves: the agnhost servers its containers run
// (serve-hostname, porter, netexec) and, for every declared containerPort
// no command serves, a listener answering with the hostname (raw TCP: write
// and close; UDP: reply), or DNS for a CoreDNS container (the agnhost
// package's DNS stand-in). Warnings name what cannot be served (SCTP ports,
// env values from references). Two servers on the same protocol and port
// are an error, as they would be for real containers sharing a network
// namespace.
func PodEndpoints(pod *corev1.Pod) ([]agnhost.Endpoint, []string, error) {
	hostname := PodHostname(pod)
	var eps []agnhost.Endpoint
	var warnings []string
	type key struct {
		proto string
		port  int
	}
	owner := map[key]string{}
	add := func(container string, ep agnhost.Endpoint) error {
		k := key{ep.Protocol(), ep.Port}
		if other, dup := owner[k]; dup {
			return fmt.Errorf("containers %s and %s both serve %s/%d", other, container, k.proto, k.port)
		}
		owner[k] = container
		eps = append(eps, ep)
		return nil
	}
	for _, c := range pod.Spec.Containers {
		argv, ok := agnhost.IsAgnhost(c.Image, c.Command, c.Args)
		if !ok {
			continue
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				warnings = append(warnings, fmt.Sprintf("container %s: env %s: valueFrom is not supported, ignored", c.Name, e.Name))
				continue
			}
			env[e.Name] = e.Value
		}
		planned, planWarnings, err := agnhost.Plan(argv, env, hostname)
		for _, w := range planWarnings {
			warnings = append(warnings, fmt.Sprintf("container %s: %s", c.Name, w))
		}
		if err != nil {
			return nil, warnings, fmt.Errorf("container %s: %w", c.Name, err)
		}
		for _, ep := range planned {
			if err := add(c.Name, ep); err != nil {
				return nil, warnings, err
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			var ep agnhost.Endpoint
			dns := agnhost.IsDNSImage(c.Image)
			switch {
			case proto == corev1.ProtocolTCP && dns:
				ep = agnhost.Endpoint{Kind: agnhost.KindDNSTCP, Port: int(p.ContainerPort)}
			case proto == corev1.ProtocolUDP && dns:
				ep = agnhost.Endpoint{Kind: agnhost.KindDNSUDP, Port: int(p.ContainerPort)}
			case proto == corev1.ProtocolTCP:
				ep = agnhost.Endpoint{Kind: agnhost.KindRawTCP, Port: int(p.ContainerPort), Body: hostname}
			case proto == corev1.ProtocolUDP:
				ep = agnhost.Endpoint{Kind: agnhost.KindUDP, Port: int(p.ContainerPort), Body: hostname}
			default:
				warnings = append(warnings, fmt.Sprintf("container %s: port %d/%s: protocol not supported, not served", c.Name, p.ContainerPort, proto))
				continue
			}
			if _, served := owner[key{ep.Protocol(), ep.Port}]; served {
				continue
			}
			if err := add(c.Name, ep); err != nil {
				return nil, warnings, err
			}
		}
	}
	return eps, warnings, nil
}

// ServiceLookup answers the DNS stand-in (agnhost.KindDNSUDP/KindDNSTCP)
// from a watch of every Service, as CoreDNS's kubernetes plugin answers
// from its own: a query never waits on the API server. (A GET per query
// made each answer wait for the API server and the queries queued behind
// one another: a name through the search list took seconds, longer than a
// probe's timeout.) It lists and watches until ctx ends, and returns once
// the first list is in, so the pod is ready only when it can answer.
func ServiceLookup(ctx context.Context, kube kubernetes.Interface) (agnhost.ServiceLookup, error) {
	factory := informers.NewSharedInformerFactory(kube, 0)
	services := factory.Core().V1().Services()
	lister := services.Lister()
	services.Informer()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("listing %v: %w", typ, context.Cause(ctx))
		}
	}
	return func(namespace, name string) ([]netip.Addr, bool) {
		svc, err := lister.Services(namespace).Get(name)
		if err != nil || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return nil, false
		}
		var ips []netip.Addr
		for _, s := range svc.Spec.ClusterIPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				ips = append(ips, ip)
			}
		}
		return ips, true
	}, nil
}
