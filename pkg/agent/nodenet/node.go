package nodenet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/pkg/model"
)

// Node is what node networking needs to know about a Node object.
type Node struct {
	Name string
	// PodCIDRs has at most one prefix per address family, each a network
	// address with room for a gateway and pods.
	PodCIDRs []netip.Prefix
	// InternalIPs are the node's InternalIP addresses (the next hops of the
	// routes to its pods), at most one per family (the first listed).
	InternalIPs []netip.Addr
}

// ErrNoPodCIDR: the Node has no spec.podCIDRs (kube-controller-manager
// allocates them with --allocate-node-cidrs; kubeadm and kind enable it).
var ErrNoPodCIDR = errors.New("no spec.podCIDRs allocated (kube-controller-manager --allocate-node-cidrs)")

// ParseNode validates a Node's pod CIDRs and collects its InternalIPs.
// A Node without pod CIDRs, with a malformed one, with two of one family
// or with one too small for a gateway and a pod is an error: the caller
// must neither route to it nor derive a gateway from it.
func ParseNode(n *corev1.Node) (Node, error) {
	out := Node{Name: n.Name}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	if len(cidrs) == 0 {
		return out, fmt.Errorf("node %s: %w", n.Name, ErrNoPodCIDR)
	}
	seen := map[bool]bool{}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return Node{Name: n.Name}, fmt.Errorf("node %s: pod CIDR %q is not a CIDR", n.Name, c)
		}
		if p.Masked() != p {
			return Node{Name: n.Name}, fmt.Errorf("node %s: pod CIDR %q has host bits set (want %s)", n.Name, c, p.Masked())
		}
		if p.Bits() > p.Addr().BitLen()-2 {
			return Node{Name: n.Name}, fmt.Errorf("node %s: pod CIDR %s is too small for a gateway and pods", n.Name, p)
		}
		if seen[p.Addr().Is4()] {
			return Node{Name: n.Name}, fmt.Errorf("node %s: pod CIDRs %v: more than one per address family", n.Name, cidrs)
		}
		seen[p.Addr().Is4()] = true
		out.PodCIDRs = append(out.PodCIDRs, p)
	}
	fam := map[bool]bool{}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || ip.Zone() != "" {
			continue // reported by routesTo when the family is needed
		}
		ip = ip.Unmap()
		if fam[ip.Is4()] {
			continue
		}
		fam[ip.Is4()] = true
		out.InternalIPs = append(out.InternalIPs, ip)
	}
	return out, nil
}

// GatewayPrefixes are the gateway's addresses: the first address of each
// pod CIDR with the CIDR's length (the host-local IPAM plugin of the
// tierflow-cni configuration gives pods the same address as their gateway).
func GatewayPrefixes(podCIDRs []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(podCIDRs))
	for _, p := range podCIDRs {
		out = append(out, netip.PrefixFrom(model.NodeGatewayAddress(p), p.Bits()))
	}
	return out
}

// Route is one kernel route to another node's pods.
type Route struct {
	Node string
	Dst  netip.Prefix
	Via  netip.Addr
	// Iface is the interface the route leaves by: set for installed
	// routes (packets from that node's pods must arrive on it); in a
	// wanted route "" lets the kernel pick the interface of Via's
	// connected network (noEncap). OnLink makes Via a next hop on Iface
	// though no address of Iface covers it (encap: the other node's
	// gateway address, through the local gateway).
	Iface  string
	OnLink bool
}

func (r Route) String() string {
	s := fmt.Sprintf("%s via %s", r.Dst, r.Via)
	if r.OnLink {
		s += " dev " + r.Iface + " onlink"
	}
	return s + fmt.Sprintf(" (node %s)", r.Node)
}

// claims are the pod CIDRs of other nodes that can be routed safely, per
// node, in the nodes' order; errs says why the others cannot: a pod CIDR
// overlapping the local node's (it would divert local pods' traffic) or
// another node's (ambiguous), a node whose spec does not parse (bad).
// Leaving a CIDR out fails closed: its pods are not reachable, nothing
// else is opened.
func claims(local Node, others []Node, bad map[string]error) ([]Node, map[string]error) {
	errs := map[string]error{}
	for name, err := range bad {
		if name != local.Name {
			errs[name] = err
		}
	}
	type claim struct {
		node string
		p    netip.Prefix
	}
	var all []claim
	for _, n := range others {
		if n.Name == local.Name {
			continue
		}
		for _, p := range n.PodCIDRs {
			all = append(all, claim{n.Name, p})
		}
	}
	var out []Node
	for _, n := range others {
		if n.Name == local.Name {
			continue
		}
		ok := Node{Name: n.Name, InternalIPs: n.InternalIPs}
		for _, p := range n.PodCIDRs {
			var why error
			for _, lp := range local.PodCIDRs {
				if lp.Overlaps(p) {
					why = fmt.Errorf("node %s: pod CIDR %s overlaps this node's %s; not routed", n.Name, p, lp)
				}
			}
			for _, c := range all {
				if why == nil && c.node != n.Name && c.p.Overlaps(p) {
					why = fmt.Errorf("node %s: pod CIDR %s overlaps node %s's %s; not routed", n.Name, p, c.node, c.p)
				}
			}
			if why != nil {
				errs[n.Name] = errors.Join(errs[n.Name], why)
				continue
			}
			ok.PodCIDRs = append(ok.PodCIDRs, p)
		}
		out = append(out, ok)
	}
	return out, errs
}

// internalIP is n's InternalIP of ip's family (invalid: none).
func (n Node) internalIP(v4 bool) netip.Addr {
	for _, ip := range n.InternalIPs {
		if ip.Is4() == v4 {
			return ip
		}
	}
	return netip.Addr{}
}

// DesiredRoutes computes the routes to every other node's pod CIDRs via
// that node's InternalIP of the same family (noEncap). Nodes (or CIDRs)
// that cannot be routed safely are left out, each with an error (see
// claims), and so is a family without an InternalIP.
func DesiredRoutes(local Node, others []Node, bad map[string]error) ([]Route, map[string]error) {
	nodes, errs := claims(local, others, bad)
	var out []Route
	for _, n := range nodes {
		for _, p := range n.PodCIDRs {
			via := n.internalIP(p.Addr().Is4())
			if !via.IsValid() {
				errs[n.Name] = errors.Join(errs[n.Name], fmt.Errorf("node %s: no InternalIP of the family of pod CIDR %s; not routed", n.Name, p))
				continue
			}
			out = append(out, Route{Node: n.Name, Dst: p, Via: via})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dst.String() < out[j].Dst.String() })
	return out, errs
}

// GetNode reads and parses the Node named name.
func GetNode(ctx context.Context, kube kubernetes.Interface, name string) (Node, error) {
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Node{}, err
	}
	return ParseNode(n)
}
