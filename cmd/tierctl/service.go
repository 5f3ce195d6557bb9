package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/services"
)

// clusterServices is what a Service destination resolves against, read
// from the API server (live commands).
type clusterServices struct {
	kube      kubernetes.Interface
	ports     []services.Port
	nodeAddrs []netip.Addr
}

// readServices lists Services, EndpointSlices and Nodes through the
// kubeconfig, and reads them as the agents' proxy does.
func (o *liveOptions) readServices(ctx context.Context) (*clusterServices, error) {
	rc, err := o.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	svcs, err := kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	slices, err := kube.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing EndpointSlices: %w", err)
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	cs := &clusterServices{kube: kube}
	var sl []*discoveryv1.EndpointSlice
	for i := range slices.Items {
		sl = append(sl, &slices.Items[i])
	}
	for i := range svcs.Items {
		p, _ := services.Translate(&svcs.Items[i], sl)
		cs.ports = append(cs.ports, p...)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				cs.nodeAddrs = append(cs.nodeAddrs, ip.Unmap())
			}
		}
	}
	return cs, nil
}

// client returns the node of pod ns/name and whether all its addresses
// are IPv6.
func (cs *clusterServices) client(ctx context.Context, pod string) (node string, v6 bool, err error) {
	ns, name, _ := strings.Cut(pod, "/")
	p, err := cs.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", false, fmt.Errorf("source pod: %w", err)
	}
	v6 = len(p.Status.PodIPs) > 0
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
			v6 = false
		}
	}
	return p.Spec.NodeName, v6, nil
}

// serviceTarget reads dst (service/NS/NAME or an address) as a Service
// frontend, if it is one.
func serviceTarget(dst string, port explain.PortSpec, ports []services.Port, nodeAddrs []netip.Addr) (services.Target, bool, error) {
	ep, err := explain.ParseEndpoint(dst)
	if err != nil {
		return services.Target{}, false, err
	}
	t, ok := explain.ServiceTarget(explain.Query{Dst: ep, Protocol: port.Protocol, Port: port.Port}, ports, nodeAddrs)
	if !ok && ep.Service != nil {
		return services.Target{}, false, fmt.Errorf("Service %s has no %s port", ep.Service, port)
	}
	return t, ok, nil
}

// maybeService says whether dst may name a Service: service/NS/NAME or an
// address (pods are NS/POD).
func maybeService(dst string) bool {
	ep, err := explain.ParseEndpoint(dst)
	return err == nil && (ep.Service != nil || ep.IP.IsValid())
}

func writeServiceTable(w io.Writer, r *explain.ServiceResult, src string, port explain.PortSpec) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	name := r.Service
	if r.Port != "" {
		name += ":" + r.Port
	}
	fmt.Fprintf(tw, "VERDICT: %s\t(%s -> Service %s, %s)\n", r.Verdict, src, name, r.Frontend)
	switch r.Verdict {
	case explain.VerdictReject:
		fmt.Fprintln(tw, "no usable endpoint: the connection is refused (ICMP port unreachable)")
		return tw.Flush()
	case explain.VerdictDrop:
		fmt.Fprintln(tw, "internalTrafficPolicy Local and no usable endpoint on the client's node: the connection is dropped")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "\nENDPOINT\tPOD\tNODE\tVERDICT\tEGRESS\tINGRESS")
	for _, e := range r.Endpoints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Endpoint, dash(e.Pod), dash(e.Node), e.Result.Verdict, oneDecision(e.Result.Egress), oneDecision(e.Result.Ingress))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneDecision is a direction's decision in a few words.
func oneDecision(d explain.Decision) string {
	s := fmt.Sprintf("%s %s", d.Tier, d.Action)
	if d.Policy != nil {
		s += " by " + d.Policy.String()
		if d.Rule != nil {
			s += fmt.Sprintf(" rule %d", d.Rule.Index)
		}
	} else {
		s += " (" + string(d.Reason) + ")"
	}
	return s
}

// ServiceTrace is trace's output for a connection addressed to a Service.
type ServiceTrace struct {
	// Verdict is Allow when every endpoint's trace allows, Deny when none
	// does, Mixed otherwise; Reject or Drop without an endpoint to choose.
	Verdict  string `json:"verdict"`
	Service  string `json:"service"`
	Port     string `json:"port"`
	Frontend string `json:"frontend"`
	// FrontendTrace is the first packet addressed to the frontend on the
	// source node, up to the Service's group (whose bucket a datapath
	// hash picks: ofproto/trace stops there).
	FrontendTrace *TraceResult `json:"frontendTrace"`
	// Endpoints are the connection after translation to each endpoint the
	// proxy of the source node may choose.
	Endpoints []EndpointTrace `json:"endpoints"`
}

// EndpointTrace is the trace of the connection translated to one endpoint.
type EndpointTrace struct {
	Endpoint string       `json:"endpoint"`
	Pod      string       `json:"pod,omitempty"`
	Node     string       `json:"node,omitempty"`
	Trace    *TraceResult `json:"trace"`
}

// traceService traces a connection to a Service's frontend and, after
// translation, to each endpoint. It returns nil when dst is no Service
// frontend (an address that is none, or Services cannot be read).
func (o *traceOptions) traceService(ctx context.Context, src, dst string, port explain.PortSpec) (*ServiceTrace, error) {
	cs, err := o.live.readServices(ctx)
	if err != nil {
		if strings.HasPrefix(dst, "service/") {
			return nil, fmt.Errorf("--dst %s: Services are read from the API server (--kubeconfig): %w", dst, err)
		}
		return nil, nil
	}
	t, ok, err := serviceTarget(dst, port, cs.ports, cs.nodeAddrs)
	if err != nil || !ok {
		return nil, err
	}
	node, v6, err := cs.client(ctx, src)
	if err != nil {
		return nil, err
	}
	f := t.Frontend
	front := dst
	if f.IP.IsValid() {
		front = f.IP.String()
	}
	out := &ServiceTrace{Service: t.Port.Key.Namespace + "/" + t.Port.Key.Name, Port: t.Port.Key.Port, Frontend: f.String(), Endpoints: []EndpointTrace{}}
	if out.FrontendTrace, err = o.traceTo(ctx, src, front, explain.PortSpec{Protocol: port.Protocol, Port: int32(f.Port)}); err != nil {
		return nil, fmt.Errorf("frontend %s: %w", f, err)
	}
	eps, decision := t.Port.Select(f, node, v6)
	switch decision {
	case services.Reject:
		out.Verdict = string(explain.VerdictReject)
		return out, nil
	case services.Drop:
		out.Verdict = string(explain.VerdictDrop)
		return out, nil
	}
	allowed := 0
	for _, ep := range eps {
		tr, err := o.traceTo(ctx, src, ep.IP.String(), explain.PortSpec{Protocol: port.Protocol, Port: int32(ep.Port)})
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", ep, err)
		}
		if tr.Verdict == string(explain.VerdictAllow) {
			allowed++
		}
		out.Endpoints = append(out.Endpoints, EndpointTrace{Endpoint: ep.String(), Pod: ep.Pod, Node: ep.NodeName, Trace: tr})
	}
	switch allowed {
	case len(eps):
		out.Verdict = string(explain.VerdictAllow)
	case 0:
		out.Verdict = string(explain.VerdictDeny)
	default:
		out.Verdict = string(explain.VerdictMixed)
	}
	return out, nil
}

func writeServiceTrace(w io.Writer, st *ServiceTrace) error {
	name := st.Service
	if st.Port != "" {
		name += ":" + st.Port
	}
	fmt.Fprintf(w, "SERVICE VERDICT: %s\t(Service %s, %s)\n\n", st.Verdict, name, st.Frontend)
	fmt.Fprintf(w, "== to the frontend (up to the Service's group)\n")
	if err := writeTrace(w, st.FrontendTrace); err != nil {
		return err
	}
	for _, e := range st.Endpoints {
		fmt.Fprintf(w, "\n== translated to endpoint %s (pod %s, node %s)\n", e.Endpoint, dash(e.Pod), dash(e.Node))
		if err := writeTrace(w, e.Trace); err != nil {
			return err
		}
	}
	return nil
}
