package explain

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/tierflow/tierflow/pkg/model"
)

// Pod is what explain needs to know about a pod that is an end of a
// connection: its name, node, addresses and named container ports.
type Pod struct {
	Ref   model.PodRef      `json:"ref"`
	Node  string            `json:"node"`
	IPs   []netip.Addr      `json:"ips"`
	Ports []model.NamedPort `json:"ports,omitempty"`
}

// Inventory is the set of pods explain can name as sources and
// destinations, indexed by name and by address.
type Inventory struct {
	byRef map[model.PodRef]*Pod
	byIP  map[netip.Addr][]*Pod
	order []*Pod
}

// NewInventory indexes pods. Two pods with the same namespace/name are an
// error: the inventory could not tell which one a query means.
func NewInventory(pods []Pod) (*Inventory, error) {
	inv := &Inventory{byRef: map[model.PodRef]*Pod{}, byIP: map[netip.Addr][]*Pod{}}
	for i := range pods {
		p := &pods[i]
		if _, dup := inv.byRef[p.Ref]; dup {
			return nil, fmt.Errorf("pod %s is declared twice", p.Ref)
		}
		inv.byRef[p.Ref] = p
		for _, ip := range p.IPs {
			ip = ip.Unmap()
			inv.byIP[ip] = append(inv.byIP[ip], p)
		}
		inv.order = append(inv.order, p)
	}
	sort.Slice(inv.order, func(i, j int) bool {
		a, b := inv.order[i].Ref, inv.order[j].Ref
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return inv, nil
}

// Pod returns the pod named ref, or nil.
func (inv *Inventory) Pod(ref model.PodRef) *Pod { return inv.byRef[ref] }

// PodByIP returns the one pod that has ip, or nil when no pod or more than
// one pod (host-network pods share their node's address) has it.
func (inv *Inventory) PodByIP(ip netip.Addr) *Pod {
	if ps := inv.byIP[ip.Unmap()]; len(ps) == 1 {
		return ps[0]
	}
	return nil
}

// Pods returns every pod, sorted by namespace then name.
func (inv *Inventory) Pods() []*Pod { return append([]*Pod(nil), inv.order...) }
