package services

import (
	"net/netip"
	"sort"
)

// Target is the frontend of a Service port a connection is addressed to.
type Target struct {
	Port     *Port
	Frontend Frontend
}

// Find returns the frontend a new connection to dst (protocol proto, port
// port) reaches, with the precedence the proxy gives them: an address
// frontend (ClusterIP, externalIP, LoadBalancer IP) before a NodePort on a
// node address (nodeAddrs), and of two Services claiming one frontend the
// first by namespace and name. ok is false when dst is no frontend.
func Find(ports []Port, nodeAddrs []netip.Addr, dst netip.Addr, proto uint8, port uint16) (t Target, ok bool) {
	dst = dst.Unmap()
	sorted := sortedByKey(ports)
	for _, p := range sorted {
		for _, f := range p.Frontends {
			if f.IP.IsValid() && f.IP == dst && f.Protocol == proto && f.Port == port {
				return Target{Port: p, Frontend: f}, true
			}
		}
	}
	isNode := false
	for _, a := range nodeAddrs {
		if a.Unmap() == dst {
			isNode = true
		}
	}
	if !isNode {
		return Target{}, false
	}
	for _, p := range sorted {
		for _, f := range p.Frontends {
			if f.Kind == NodePort && f.Protocol == proto && f.Port == port {
				return Target{Port: p, Frontend: f}, true
			}
		}
	}
	return Target{}, false
}

// FindByName returns the ClusterIP frontend of Service namespace/name with
// service port number port and protocol proto, of the family v6 if it has
// both.
func FindByName(ports []Port, namespace, name string, proto uint8, port uint16, v6 bool) (Target, bool) {
	var found *Target
	for _, p := range sortedByKey(ports) {
		if p.Key.Namespace != namespace || p.Key.Name != name || p.Protocol != proto {
			continue
		}
		for _, f := range p.Frontends {
			if f.Kind == ClusterIP && f.Port == port {
				if f.IP.Is6() == v6 {
					return Target{Port: p, Frontend: f}, true
				}
				if found == nil {
					found = &Target{Port: p, Frontend: f}
				}
			}
		}
	}
	if found != nil {
		return *found, true
	}
	return Target{}, false
}

func sortedByKey(ports []Port) []*Port {
	out := make([]*Port, len(ports))
	for i := range ports {
		out[i] = &ports[i]
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Port < b.Port
	})
	return out
}
