package explain

import (
	"fmt"
	"net/netip"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/services"
)

// Verdicts of a connection to a Service (ServiceResult).
const (
	// VerdictMixed: some of the Service's endpoints allow the connection,
	// others deny it; which one it gets is the proxy's choice.
	VerdictMixed Verdict = "Mixed"
	// VerdictReject: the Service has no usable endpoint; the connection is
	// refused (ICMP port unreachable), as kube-proxy does.
	VerdictReject Verdict = "Reject"
	// VerdictDrop: internalTrafficPolicy Local and no usable endpoint on
	// the client's node: the connection is dropped.
	VerdictDrop Verdict = "Drop"
)

// ServiceResult explains a connection addressed to a Service: the
// frontend it reaches and, for each endpoint the proxy of the client's
// node may choose, the connection to that endpoint (policy decides on the
// endpoint, after translation).
type ServiceResult struct {
	// Verdict is Allow when every endpoint allows, Deny when none does,
	// Mixed otherwise; Reject or Drop when there is no endpoint to choose.
	Verdict Verdict `json:"verdict"`
	// Service is NAMESPACE/NAME, Port the Service port's name.
	Service string `json:"service"`
	Port    string `json:"port"`
	// Frontend is the address, protocol and port addressed, with its kind.
	Frontend  string             `json:"frontend"`
	Endpoints []EndpointDecision `json:"endpoints"`
}

// EndpointDecision is the connection through the Service to one endpoint.
type EndpointDecision struct {
	// Endpoint is ADDRESS:PORT, Pod NAMESPACE/NAME (when the slice names
	// one), Node its node.
	Endpoint string  `json:"endpoint"`
	Pod      string  `json:"pod,omitempty"`
	Node     string  `json:"node,omitempty"`
	Result   *Result `json:"result"`
}

// ExplainService explains q, addressed to target, as the Service proxy of
// the source pod's node carries it: every endpoint it may choose, each
// connection evaluated on the endpoint's address and port.
func (e *Evaluator) ExplainService(q Query, target services.Target) (*ServiceResult, error) {
	src, err := e.resolve(q.Src)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	node, v6 := "", false
	if src.pod != nil {
		node = src.pod.Node
	}
	if len(src.ips) > 0 {
		v6 = true
		for _, ip := range src.ips {
			if ip.Is4() {
				v6 = false
			}
		}
	}
	return ServiceDecisions(target, node, v6, func(ep services.Endpoint) (*Result, error) {
		return e.Explain(Query{Src: q.Src, Dst: Endpoint{IP: ep.IP}, Protocol: q.Protocol, Port: int32(ep.Port), ThroughService: true})
	})
}

// ServiceDecisions is the ServiceResult of a connection to target from a
// client on node (of an IPv6-only client, v6, for a NodePort), with one
// explaining the connection to each endpoint the proxy may choose.
func ServiceDecisions(target services.Target, node string, v6 bool, one func(services.Endpoint) (*Result, error)) (*ServiceResult, error) {
	p, f := target.Port, target.Frontend
	res := &ServiceResult{Service: p.Key.Namespace + "/" + p.Key.Name, Port: p.Key.Port, Frontend: f.String(), Endpoints: []EndpointDecision{}}
	eps, decision := p.Select(f, node, v6)
	switch decision {
	case services.Reject:
		res.Verdict = VerdictReject
		return res, nil
	case services.Drop:
		res.Verdict = VerdictDrop
		return res, nil
	}
	allowed := 0
	for _, ep := range eps {
		r, err := one(ep)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", ep, err)
		}
		if r.Verdict == VerdictAllow {
			allowed++
		}
		res.Endpoints = append(res.Endpoints, EndpointDecision{Endpoint: ep.String(), Pod: ep.Pod, Node: ep.NodeName, Result: r})
	}
	switch allowed {
	case len(eps):
		res.Verdict = VerdictAllow
	case 0:
		res.Verdict = VerdictDeny
	default:
		res.Verdict = VerdictMixed
	}
	return res, nil
}

// ServiceTarget finds the Service frontend q's destination reaches, if
// any: an address (IP, or a pod-less address) that is a frontend among
// ports (nodeAddrs: where NodePorts answer), or a Service named in
// q.Dst.Service.
func ServiceTarget(q Query, ports []services.Port, nodeAddrs []netip.Addr) (services.Target, bool) {
	proto := map[model.Protocol]uint8{model.ProtocolTCP: services.ProtoTCP, model.ProtocolUDP: services.ProtoUDP, model.ProtocolSCTP: services.ProtoSCTP}[q.Protocol]
	if q.Port < 1 || q.Port > 65535 || proto == 0 {
		return services.Target{}, false
	}
	if s := q.Dst.Service; s != nil {
		return services.FindByName(ports, s.Namespace, s.Name, proto, uint16(q.Port), false)
	}
	if q.Dst.Pod != nil || !q.Dst.IP.IsValid() {
		return services.Target{}, false
	}
	return services.Find(ports, nodeAddrs, q.Dst.IP, proto, uint16(q.Port))
}
