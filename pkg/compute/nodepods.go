package compute

import (
	"iter"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/model"
)

// Node pods: each node's pods as the engine computed them (model.NodePods,
// Change kind KindNodePods, ID the node's name). A node's agent admits a
// pod's port only when the pod is listed with the port's UID and
// addresses, so an entry must change exactly when what the admission
// depends on changes: the pod's UID, node or addresses, or whether
// another pod claims one of its addresses. Each such change gives the
// object a new generation, and that generation becomes the entry's: it is
// the engine generation at which the pod's group memberships (computed in
// the same call) include it with those addresses. The distribution server
// sends an entry only together with every change up to its generation
// (see pkg/distribution/server, nodepods.go).
//
// Addresses: a pod's addresses are those of its status, unless its
// node's agent reported the pod (same UID) attached with addresses
// (SetReportedPods): the CNI plugin assigns them, and the kubelet writes
// them to the status only once the pod's sandbox is up, after the CNI ADD
// that waits for the pod's admission. The agent is trusted for pods bound
// to its node only, as the kubelet is.

// nodePodsState is one node's NodePods object.
type nodePodsState struct {
	name  string
	pods  podList // nodePos
	slot  pendSlot
	gen   int64
	cache *model.NodePods
}

// reportedPod is a pod a node's agent found attached to its bridge.
type reportedPod struct {
	uid types.UID
	ips []netip.Addr
}

// effectiveIPs are the addresses a pod's memberships carry.
func (e *Engine) effectiveIPs(u podUpdate) []netip.Addr {
	if rp, ok := e.reported[u.node][u.key]; ok && u.uid != "" && rp.uid == u.uid && len(rp.ips) > 0 {
		return rp.ips
	}
	return u.ips
}

// setPodInfo sets a pod's node, addresses and named ports, keeping the
// address owners and the NodePods entries (its own and those of pods
// sharing an address it takes or leaves) up to date.
func (e *Engine) setPodInfo(p *podState, node string, ips []netip.Addr, ports []model.NamedPort) {
	moved := p.node() != node
	changedIPs := !slices.Equal(p.ips(), ips)
	if moved && p.node() != "" {
		e.leaveNodePods(p)
	}
	if changedIPs {
		for _, ip := range p.ips() {
			e.releaseAddress(ip, p)
		}
	}
	p.setInfo(node, ips, ports)
	if changedIPs {
		for _, ip := range ips {
			owners := e.ipOwners[ip]
			e.touchOwners(owners)
			e.ipOwners[ip] = owners.with(p)
		}
	}
	if moved {
		n := e.nodePods[node]
		if n == nil {
			n = &nodePodsState{name: node}
			e.nodePods[node] = n
		}
		n.pods.add(p, nodePos)
	}
	if moved || changedIPs {
		e.touchPodEntry(p)
	}
}

// addressOwners are the pods claiming one address: nearly always one,
// held in place (a set of its own took two allocations for every pod
// address); a set only while several do (a reused address whose previous
// pod is still in the engine).
type addressOwners struct {
	one  *podState       // the owner, when there is exactly one
	many *set[*podState] // the owners, when there are several
}

func (o addressOwners) len() int {
	switch {
	case o.many != nil:
		return o.many.len()
	case o.one != nil:
		return 1
	}
	return 0
}

// all visits the owners.
func (o addressOwners) all() iter.Seq[*podState] {
	return func(yield func(*podState) bool) {
		if o.many == nil {
			if o.one != nil {
				yield(o.one)
			}
			return
		}
		for q := range o.many.all() {
			if !yield(q) {
				return
			}
		}
	}
}

// with is o with p among the owners.
func (o addressOwners) with(p *podState) addressOwners {
	switch {
	case o.many != nil:
		o.many.add(p)
	case o.one == nil || o.one == p:
		o.one = p
	default:
		o.many = &set[*podState]{}
		o.many.add(o.one)
		o.many.add(p)
		o.one = nil
	}
	return o
}

// without is o without p, and whether p was an owner.
func (o addressOwners) without(p *podState) (addressOwners, bool) {
	switch {
	case o.many != nil:
		if !o.many.remove(p) {
			return o, false
		}
		if o.many.len() == 1 {
			for q := range o.many.all() {
				o.one = q
			}
			o.many = nil
		}
		return o, true
	case o.one != nil && o.one == p:
		return addressOwners{}, true
	}
	return o, false
}

// touchOwners notes a change of the pods claiming one address (one joins
// or leaves): those whose conflict starts or ends see their entry change.
func (e *Engine) touchOwners(owners addressOwners) {
	if owners.len() > 2 {
		return // conflicting before and after
	}
	for q := range owners.all() {
		e.touchPodEntry(q)
	}
}

// releaseAddress takes p off the owners of ip.
func (e *Engine) releaseAddress(ip netip.Addr, p *podState) {
	owners, had := e.ipOwners[ip].without(p)
	if !had {
		return
	}
	e.touchOwners(owners)
	if owners.len() == 0 {
		delete(e.ipOwners, ip)
	} else {
		e.ipOwners[ip] = owners
	}
}

// touchPodEntry notes that p's NodePods entry changed: its node's object
// takes a new generation, which becomes the entry's.
func (e *Engine) touchPodEntry(p *podState) {
	n := e.nodePods[p.node()]
	if n == nil {
		return
	}
	n.cache = nil
	n.gen = e.record(&n.slot, KindNodePods, Updated, n.name, n.gen)
	p.entryGen = n.gen
}

// leaveNodePods takes p out of its node's object (deleted when empty).
func (e *Engine) leaveNodePods(p *podState) {
	n := e.nodePods[p.node()]
	if n == nil {
		return
	}
	n.pods.remove(p, nodePos)
	n.cache = nil
	if n.pods.len() == 0 {
		e.record(&n.slot, KindNodePods, Deleted, n.name, n.gen)
		delete(e.nodePods, n.name)
		return
	}
	n.gen = e.record(&n.slot, KindNodePods, Updated, n.name, n.gen)
}

// dropPodEntry removes a deleted pod from its node's object and from the
// owners of its addresses.
func (e *Engine) dropPodEntry(p *podState) {
	e.leaveNodePods(p)
	for _, ip := range p.ips() {
		e.releaseAddress(ip, p)
	}
}

// entryIPs are the addresses p's entry lists: none while another pod
// claims one of them (a reused address whose previous pod is still in
// the engine: neither may be admitted with it).
func (e *Engine) entryIPs(p *podState) []netip.Addr {
	for _, ip := range p.ips() {
		if e.ipOwners[ip].len() > 1 {
			return nil
		}
	}
	return p.ips()
}

// NodePods returns one node's pods (false: the node has none).
func (e *Engine) NodePods(node string) (*model.NodePods, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.nodePods[node]
	if n == nil {
		return nil, false
	}
	return e.nodePodsModel(n), true
}

func (e *Engine) nodePodsModel(n *nodePodsState) *model.NodePods {
	if n.cache != nil {
		return n.cache
	}
	out := &model.NodePods{Meta: model.Meta{ID: n.name, Generation: n.gen, Span: []string{n.name}}, Pods: make([]model.NodePod, 0, n.pods.len())}
	for _, p := range n.pods.pods {
		out.Pods = append(out.Pods, model.NodePod{Pod: *p.member.Pod,
			UID: p.uid, IPs: e.entryIPs(p), Generation: p.entryGen})
	}
	slices.SortFunc(out.Pods, func(a, b model.NodePod) int {
		if c := strings.Compare(a.Pod.Namespace, b.Pod.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Pod.Name, b.Pod.Name)
	})
	n.cache = out
	return out
}

// SetReportedPods records the pods node's agent found attached to its
// bridge (each with the UID and addresses its CNI plugin recorded),
// replacing what it reported before. A reported pod counts only for the
// pod of that namespace, name and UID bound to node: its addresses become
// the pod's (see effectiveIPs). Invalid addresses are ignored.
func (e *Engine) SetReportedPods(node string, pods []model.NodePod) {
	next := map[podKey]reportedPod{}
	for _, rp := range pods {
		if rp.Pod.Namespace == "" || rp.Pod.Name == "" || rp.UID == "" {
			continue
		}
		var ips []netip.Addr
		for _, ip := range rp.IPs {
			if ip.IsValid() && ip.Zone() == "" && !ip.IsUnspecified() && !slices.Contains(ips, ip.Unmap()) {
				ips = append(ips, ip.Unmap())
			}
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		next[podKey{rp.Pod.Namespace, rp.Pod.Name}] = reportedPod{uid: rp.UID, ips: ips}
	}
	e.update(func() {
		prev := e.reported[node]
		if len(next) == 0 {
			delete(e.reported, node)
		} else {
			e.reported[node] = next
		}
		for _, keys := range []map[podKey]reportedPod{prev, next} {
			for key := range keys {
				if p := e.pods[key]; p != nil && p.node() == node {
					e.applyPod(podUpdate{key: key, set: p.labels, labelsHash: p.labels.hash, node: p.node(), uid: p.uid, ips: p.statusIPs, ports: p.ports()})
				}
			}
		}
	})
}
