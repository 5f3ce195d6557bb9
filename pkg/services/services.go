package services

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Protocol numbers of the transport protocols Services use.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// ProxyNameLabel is the label that hands a Service to another proxy.
const ProxyNameLabel = "service.kubernetes.io/service-proxy-name"

// DefaultAffinityTimeout is sessionAffinityConfig.clientIP.timeoutSeconds'
// default.
const DefaultAffinityTimeout = 10800 * time.Second

// Kind is the kind of address a frontend answers on.
type Kind uint8

const (
	ClusterIP Kind = iota + 1
	// NodePort frontends answer on every node address (Frontend.IP is
	// invalid).
	NodePort
	ExternalIP
	LoadBalancerIP
)

func (k Kind) String() string {
	switch k {
	case ClusterIP:
		return "ClusterIP"
	case NodePort:
		return "NodePort"
	case ExternalIP:
		return "ExternalIP"
	case LoadBalancerIP:
		return "LoadBalancerIP"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Internal says whether the frontend follows internalTrafficPolicy
// (ClusterIP) rather than externalTrafficPolicy (the others).
func (k Kind) Internal() bool { return k == ClusterIP }

// PortKey names one port of one Service.
type PortKey struct {
	Namespace, Name string
	// Port is the Service port's name ("" for a single unnamed port).
	Port string
}

func (k PortKey) String() string {
	if k.Port == "" {
		return k.Namespace + "/" + k.Name
	}
	return k.Namespace + "/" + k.Name + ":" + k.Port
}

// Frontend is one address, protocol and port a Service port answers on.
type Frontend struct {
	Kind Kind
	// IP is invalid for NodePort frontends (they answer on node addresses).
	IP       netip.Addr
	Protocol uint8
	Port     uint16
}

func (f Frontend) String() string {
	addr := "<node>"
	if f.IP.IsValid() {
		addr = f.IP.String()
	}
	return fmt.Sprintf("%s %s:%d (%s)", ProtocolName(f.Protocol), addr, f.Port, f.Kind)
}

// Endpoint is one backend of a Service port.
type Endpoint struct {
	IP   netip.Addr
	Port uint16
	// NodeName is the endpoint's node ("" when the slice does not say).
	NodeName                    string
	Ready, Serving, Terminating bool
	// Pod is NAMESPACE/NAME of the pod behind the endpoint, if the slice
	// names one.
	Pod string
}

func (e Endpoint) String() string { return netip.AddrPortFrom(e.IP, e.Port).String() }

// Port is one port of a Service with its frontends and every endpoint its
// EndpointSlices list.
type Port struct {
	Key       PortKey
	Protocol  uint8
	Frontends []Frontend
	// Endpoints of both families, sorted by address and port.
	Endpoints []Endpoint
	// Affinity is the ClientIP session affinity timeout (0: none).
	Affinity time.Duration
	// InternalLocal: internalTrafficPolicy Local.
	InternalLocal bool
	// ExternalLocal: externalTrafficPolicy Local (does not restrict pods;
	// kept for tooling).
	ExternalLocal bool
}

// Translate reads one Service and its EndpointSlices (slices of other
// Services are ignored) into its ports, with warnings about what had to be
// left out. A Service that has no frontends (ExternalName, headless,
// another proxy's) yields no port.
func Translate(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) ([]Port, []string) {
	var warn []string
	warnf := func(format string, args ...any) {
		warn = append(warn, fmt.Sprintf("Service %s/%s: ", svc.Namespace, svc.Name)+fmt.Sprintf(format, args...))
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Labels[ProxyNameLabel] != "" {
		return nil, nil
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, nil
	}
	clusterIPs := parseIPs(svc.Spec.ClusterIPs, warnf, "clusterIP")
	if len(clusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		clusterIPs = parseIPs([]string{svc.Spec.ClusterIP}, warnf, "clusterIP")
	}
	externalIPs := parseIPs(svc.Spec.ExternalIPs, warnf, "externalIP")
	var lbIPs []netip.Addr
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP == "" || (in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy) {
				continue
			}
			lbIPs = append(lbIPs, parseIPs([]string{in.IP}, warnf, "LoadBalancer ingress IP")...)
		}
	}
	var affinity time.Duration
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		affinity = DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	internalLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	externalLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal

	var out []Port
	seen := map[string]bool{}
	for _, sp := range svc.Spec.Ports {
		proto, ok := protocolNumber(sp.Protocol)
		if !ok {
			warnf("port %q: protocol %q is not TCP, UDP or SCTP; left out", sp.Name, sp.Protocol)
			continue
		}
		if sp.Port < 1 || sp.Port > 65535 {
			warnf("port %q: port %d out of range; left out", sp.Name, sp.Port)
			continue
		}
		if seen[sp.Name] {
			warnf("port name %q used twice; the second is left out", sp.Name)
			continue
		}
		seen[sp.Name] = true
		p := Port{Key: PortKey{Namespace: svc.Namespace, Name: svc.Name, Port: sp.Name}, Protocol: proto,
			Affinity: affinity, InternalLocal: internalLocal, ExternalLocal: externalLocal}
		port := uint16(sp.Port)
		for _, ip := range clusterIPs {
			p.Frontends = append(p.Frontends, Frontend{Kind: ClusterIP, IP: ip, Protocol: proto, Port: port})
		}
		if sp.NodePort != 0 && (svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			if sp.NodePort < 1 || sp.NodePort > 65535 {
				warnf("port %q: nodePort %d out of range; left out", sp.Name, sp.NodePort)
			} else {
				p.Frontends = append(p.Frontends, Frontend{Kind: NodePort, Protocol: proto, Port: uint16(sp.NodePort)})
			}
		}
		for _, ip := range externalIPs {
			p.Frontends = append(p.Frontends, Frontend{Kind: ExternalIP, IP: ip, Protocol: proto, Port: port})
		}
		for _, ip := range lbIPs {
			p.Frontends = append(p.Frontends, Frontend{Kind: LoadBalancerIP, IP: ip, Protocol: proto, Port: port})
		}
		p.Endpoints = endpoints(svc, sp.Name, sp.Protocol, slices, warnf)
		out = append(out, p)
	}
	return out, warn
}

// endpoints collects the endpoints of the Service port named portName from
// the Service's slices.
func endpoints(svc *corev1.Service, portName string, proto corev1.Protocol, slices []*discoveryv1.EndpointSlice, warnf func(string, ...any)) []Endpoint {
	byAddr := map[netip.AddrPort]Endpoint{}
	for _, sl := range slices {
		if sl.Namespace != svc.Namespace || sl.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices are not proxied
		}
		var port int32 = -1
		for _, sp := range sl.Ports {
			name, p := "", corev1.ProtocolTCP
			if sp.Name != nil {
				name = *sp.Name
			}
			if sp.Protocol != nil {
				p = *sp.Protocol
			}
			if name == portName && p == proto {
				if sp.Port == nil || *sp.Port < 1 || *sp.Port > 65535 {
					warnf("EndpointSlice %s: port %q has no valid number; its endpoints are left out", sl.Name, portName)
					break
				}
				port = *sp.Port
				break
			}
		}
		if port < 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			e := Endpoint{Port: uint16(port), Ready: true, Serving: true}
			if c := ep.Conditions; c.Ready != nil {
				e.Ready = *c.Ready
			}
			if c := ep.Conditions; c.Serving != nil {
				e.Serving = *c.Serving
			} else {
				e.Serving = e.Ready
			}
			if c := ep.Conditions; c.Terminating != nil {
				e.Terminating = *c.Terminating
			}
			if ep.NodeName != nil {
				e.NodeName = *ep.NodeName
			}
			if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
				e.Pod = r.Namespace + "/" + r.Name
				if r.Namespace == "" {
					e.Pod = sl.Namespace + "/" + r.Name
				}
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || ip.Zone() != "" {
					warnf("EndpointSlice %s: address %q does not parse; left out", sl.Name, a)
					continue
				}
				ip = ip.Unmap()
				if ip.Is4() != (sl.AddressType == discoveryv1.AddressTypeIPv4) {
					warnf("EndpointSlice %s: address %s is not of the slice's type %s; left out", sl.Name, ip, sl.AddressType)
					continue
				}
				e := e
				e.IP = ip
				k := netip.AddrPortFrom(ip, e.Port)
				if old, dup := byAddr[k]; dup {
					// Listed twice (slices being rewritten): the more
					// usable reading wins.
					if !e.Ready && (old.Ready || !e.Serving) {
						continue
					}
				}
				byAddr[k] = e
			}
		}
	}
	out := make([]Endpoint, 0, len(byAddr))
	for _, e := range byAddr {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].IP.Compare(out[j].IP); c != 0 {
			return c < 0
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// Decision is what a connection to a frontend gets.
type Decision uint8

const (
	// Balance: the connection goes to one of the endpoints.
	Balance Decision = iota + 1
	// Reject: the Service has no usable endpoint (TCP RST / ICMP port
	// unreachable).
	Reject
	// Drop: internalTrafficPolicy Local and no usable endpoint on the
	// client's node while there are some elsewhere.
	Drop
)

func (d Decision) String() string {
	switch d {
	case Balance:
		return "balance"
	case Reject:
		return "reject"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Select returns the endpoints a connection from a pod on node to
// frontend f of p may reach (of the frontend's family; for a NodePort
// frontend, of family v6 or not), and what happens to it.
func (p *Port) Select(f Frontend, node string, v6 bool) ([]Endpoint, Decision) {
	if f.IP.IsValid() {
		v6 = f.IP.Is6()
	}
	var fam []Endpoint
	for _, e := range p.Endpoints {
		if e.IP.Is6() == v6 {
			fam = append(fam, e)
		}
	}
	usable := usableEndpoints(fam)
	if len(usable) == 0 {
		return nil, Reject
	}
	if f.Kind.Internal() && p.InternalLocal {
		// As kube-proxy: the node's ready endpoints, or its serving
		// terminating ones when none is ready.
		var onNode []Endpoint
		for _, e := range fam {
			if e.NodeName == node {
				onNode = append(onNode, e)
			}
		}
		local := usableEndpoints(onNode)
		if len(local) == 0 {
			return nil, Drop
		}
		return local, Balance
	}
	return usable, Balance
}

// usableEndpoints are the ready endpoints or, when none is ready, the
// serving terminating ones.
func usableEndpoints(eps []Endpoint) []Endpoint {
	var ready, draining []Endpoint
	for _, e := range eps {
		switch {
		case e.Ready:
			ready = append(ready, e)
		case e.Serving && e.Terminating:
			draining = append(draining, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return draining
}

func parseIPs(ss []string, warnf func(string, ...any), what string) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, s := range ss {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || ip.Zone() != "" {
			warnf("%s %q does not parse; left out", what, s)
			continue
		}
		ip = ip.Unmap()
		if ip.IsUnspecified() || seen[ip] {
			continue
		}
		seen[ip] = true
		out = append(out, ip)
	}
	return out
}

func protocolNumber(p corev1.Protocol) (uint8, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return ProtoTCP, true
	case corev1.ProtocolUDP:
		return ProtoUDP, true
	case corev1.ProtocolSCTP:
		return ProtoSCTP, true
	}
	return 0, false
}

// ProtocolName is TCP, UDP or SCTP.
func ProtocolName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "TCP"
	case ProtoUDP:
		return "UDP"
	case ProtoSCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto%d", p)
}
