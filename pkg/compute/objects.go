package compute

import (
	"maps"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/model"
)

// metadataNameLabel is set on every namespace by the API server; tierflow
// adds it when it is missing (offline files, namespaces not seen yet) so
// that selecting a namespace by name always works.
const metadataNameLabel = "kubernetes.io/metadata.name"

type nsState struct {
	name      string
	labels    *labelSet // never nil
	known     bool      // an UpsertNamespace was seen (and no delete since)
	pods      podList   // nsPos
	podLabels labelIndex[*podState]
	groups    selectorIndex[*group] // groups fixed to this namespace, by pod selector
	nGroups   int
}

type podKey struct{ namespace, name string }

type podState struct {
	ns     *nsState
	labels *labelSet // shared (podLabelSets), never modified; never nil
	uid    types.UID
	// member is the pod as its groups list it: its node, its addresses
	// in its groups (statusIPs, unless its node's agent reported the pod
	// (same UID) with addresses, see nodepods.go) and its named ports.
	// Read them there (node, ips, ports), and its namespace and name in
	// member.Pod (key): with 100,000 pods, fields of their own would
	// hold 9 MiB more of the same headers.
	member    model.GroupMember
	statusIPs []netip.Addr
	groups    set[*group]
	// entryGen is the generation of the pod's NodePods entry.
	entryGen int64
	// nsPos and nodePos are its positions in its namespace's pods and
	// its node's (podList).
	nsPos, nodePos int32
}

type nodeState struct {
	name   string
	labels *labelSet // never nil
	member model.GroupMember
	groups set[*group]
}

func (e *Engine) nsFor(name string) *nsState {
	ns := e.namespaces[name]
	if ns == nil {
		ns = &nsState{
			name:      name,
			labels:    nameOnlyLabels(name),
			podLabels: newLabelIndex[*podState](),
			groups:    newSelectorIndex[*group](),
		}
		e.namespaces[name] = ns
		e.nsLabels.add(ns.labels, ns)
	}
	return ns
}

func (e *Engine) maybeDropNamespace(ns *nsState) {
	if ns.known || ns.pods.len() > 0 || ns.nGroups > 0 {
		return
	}
	e.nsLabels.remove(ns.labels, ns)
	delete(e.namespaces, ns.name)
}

// UpsertNamespace adds or updates a namespace. Its labels decide which
// namespace selectors select its pods.
func (e *Engine) UpsertNamespace(ns *corev1.Namespace) { e.update(e.upsertNamespace(ns)) }

func (e *Engine) upsertNamespace(ns *corev1.Namespace) func() {
	if ns == nil || ns.Name == "" {
		return nil
	}
	lbls := nameOnlyLabels(ns.Name)
	if _, ok := ns.Labels[metadataNameLabel]; ok {
		lbls = labelSetOf(ns.Labels)
	} else if len(ns.Labels) > 0 {
		m := maps.Clone(ns.Labels)
		m[metadataNameLabel] = ns.Name
		lbls = labelSetOf(m)
	}
	return func() {
		st := e.nsFor(ns.Name)
		st.known = true
		e.relabelNamespace(st, lbls)
	}
}

// DeleteNamespace forgets a namespace's labels: its pods (until deleted
// themselves) are selected only by selectors that match a namespace known
// by name alone.
func (e *Engine) DeleteNamespace(name string) { e.update(e.deleteNamespace(name)) }

func (e *Engine) deleteNamespace(name string) func() {
	return func() {
		st := e.namespaces[name]
		if st == nil {
			return
		}
		st.known = false
		e.relabelNamespace(st, nameOnlyLabels(name))
		e.maybeDropNamespace(st)
	}
}

// nameOnlyLabels are the labels of a namespace known by name alone.
func nameOnlyLabels(name string) *labelSet {
	return labelSetOf(map[string]string{metadataNameLabel: name})
}

func (e *Engine) relabelNamespace(st *nsState, lbls *labelSet) {
	old := st.labels
	if old.equal(lbls) {
		return
	}
	e.nsLabels.remove(old, st)
	e.nsLabels.add(lbls, st)
	st.labels = lbls
	var cands set[*group]
	collect := func(g *group) { cands.add(g) }
	e.nsGroups.candidates(old, collect)
	e.nsGroups.candidates(lbls, collect)
	for g := range cands.all() {
		was := g.spec.nsSel.Matches(old)
		now := g.spec.nsSel.Matches(lbls)
		switch {
		case now && !was:
			e.addMatchingPodsOf(g, st)
		case was && !now:
			for _, p := range st.pods.pods {
				e.removePod(g, p)
			}
		}
	}
}

// podEligible says whether a pod takes part in policy: it needs a node,
// must not use the host network, and must not have terminated. It need not
// have an IP yet: a scheduled pod whose address is not reported (starting,
// or its sandbox being recreated) is already a subject, so the agent,
// which finds subjects by their OpenFlow port, isolates it from its first
// packet; as a peer it has no address and matches nothing until its IP is
// known.
func podEligible(pod *corev1.Pod) bool {
	if pod.Spec.HostNetwork || pod.Spec.NodeName == "" {
		return false
	}
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func podIPs(pod *corev1.Pod) []netip.Addr {
	var ips []netip.Addr
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		a = a.Unmap()
		if !slices.Contains(ips, a) {
			ips = append(ips, a)
		}
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	add(pod.Status.PodIP)
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}

// portContainers are the containers whose ports a pod serves on: its
// containers and its sidecars (init containers with restartPolicy Always,
// which run for the pod's whole life). Kubernetes resolves a Service's
// named targetPort over the same set; run-to-completion init containers
// are left out, as there.
func portContainers(pod *corev1.Pod) []corev1.Container {
	cs := pod.Spec.Containers
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs = append(slices.Clip(cs), c)
		}
	}
	return cs
}

// podNamedPorts lists the named container ports (protocol defaulting to
// TCP) of the pod's containers and sidecars, sorted by name and protocol.
// Port names are unique per container only: a name several containers
// declare with different numbers resolves to all of them.
func podNamedPorts(pod *corev1.Pod) []model.NamedPort {
	var ports []model.NamedPort
	for _, c := range portContainers(pod) {
		for _, cp := range c.Ports {
			if cp.Name == "" {
				continue
			}
			proto := model.Protocol(cp.Protocol)
			if proto == "" {
				proto = model.ProtocolTCP
			}
			ports = append(ports, model.NamedPort{Name: cp.Name, Protocol: proto, Port: cp.ContainerPort})
		}
	}
	slices.SortFunc(ports, func(a, b model.NamedPort) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		if a.Protocol != b.Protocol {
			if a.Protocol < b.Protocol {
				return -1
			}
			return 1
		}
		return int(a.Port - b.Port)
	})
	ports = slices.Compact(ports)
	if len(ports) == 1 {
		// Most pods name one port, and a workload's pods the same one:
		// they share its list (immutable; 48 bytes of each pod's).
		return oneNamedPortLists.list(ports[0])
	}
	return ports
}

// oneNamedPortLists are the shared lists of pods that name one port.
var oneNamedPortLists = newOneItemLists[model.NamedPort]()

// UpsertPod adds or updates a pod. A pod that cannot take part in policy
// (not scheduled, host network, terminated) is treated as absent.
func (e *Engine) UpsertPod(pod *corev1.Pod) {
	// What can be read from the object is read before taking the lock. A
	// value, not a closure: pods are the most frequent event.
	u, ok := preparePod(pod)
	if !ok {
		return
	}
	e.update(func() { e.applyPod(u) })
}

// PreparedPod is a pod as the engine reads it: what UpsertPod reads from
// the object, outside the engine's lock, before applying it. A cache of
// pods can prepare each pod as it arrives and keep the preparation
// (PreparePod, UpsertPreparedPod) instead of handing the engine an object
// rebuilt for the purpose. It is immutable and may be applied to any
// engine, any number of times; the zero value is ignored.
type PreparedPod struct {
	u  podUpdate
	ok bool
}

// PreparePod reads what the engine needs of a pod (nil: the zero
// PreparedPod). Its labels are kept as a label set shared with the other
// prepared pods whose labels are equal (the pod's map is not kept).
func PreparePod(pod *corev1.Pod) PreparedPod {
	u, ok := preparePod(pod)
	if !ok {
		return PreparedPod{}
	}
	if u.delete {
		return PreparedPod{u: u, ok: ok}
	}
	u.set, u.labels = podLabelSets.intern(u.labels, u.labelsHash), nil
	return PreparedPod{u: u, ok: ok}
}

// Labels are the labels of the pod p was prepared from when Eligible, as
// a new map (nil when it has none, or is not Eligible).
func (p PreparedPod) Labels() map[string]string {
	if !p.Eligible() {
		return nil
	}
	return p.u.set.toMap()
}

// Eligible reports whether the pod p was prepared from takes part in
// policy (scheduled, not host network, not terminated): only then do IPs
// and NamedPorts hold what the engine reads.
func (p PreparedPod) Eligible() bool { return p.ok && !p.u.delete }

// Node is the node of the pod p was prepared from when Eligible (else
// "").
func (p PreparedPod) Node() string {
	if !p.Eligible() {
		return ""
	}
	return p.u.node
}

// IPs are the pod's status addresses as the engine reads them: parsed,
// unmapped, without duplicates, sorted (shared: never modify).
func (p PreparedPod) IPs() []netip.Addr { return p.u.ips }

// NamedPorts are the named ports of the pod's containers and sidecars as
// the engine reads them: protocol defaulted to TCP, sorted by name,
// protocol and number, without duplicates (shared: never modify).
func (p PreparedPod) NamedPorts() []model.NamedPort { return p.u.ports }

// UpsertPreparedPod adds or updates the pod p was prepared from, as
// UpsertPod does with the object.
func (e *Engine) UpsertPreparedPod(p PreparedPod) {
	if !p.ok {
		return
	}
	e.update(func() { e.applyPod(p.u) })
}

// podUpdate is a pod event, read from the object: an upsert, or a delete
// for a pod that cannot take part in policy.
type podUpdate struct {
	key    podKey
	delete bool
	// labels is the object's own map, read (under the engine's lock)
	// before the call returns and never kept; labelsHash its labelsHash.
	// A prepared pod's are in set instead (labels nil): its shared label
	// set, which nothing modifies, and the engine keeps.
	labels     map[string]string
	set        *labelSet
	labelsHash uint64
	node       string
	uid        types.UID
	ips        []netip.Addr // status
	ports      []model.NamedPort
}

func preparePod(pod *corev1.Pod) (podUpdate, bool) {
	if pod == nil {
		return podUpdate{}, false
	}
	u := podUpdate{key: podKey{pod.Namespace, pod.Name}}
	if !podEligible(pod) {
		u.delete = true
		return u, true
	}
	u.labels, u.labelsHash = pod.Labels, labelsHash(pod.Labels)
	u.node, u.uid, u.ips, u.ports = pod.Spec.NodeName, pod.UID, podIPs(pod), podNamedPorts(pod)
	return u, true
}

func (e *Engine) applyPod(u podUpdate) { e.applyPodMatched(u, nil, nil) }

// applyPodMatched is applyPod. For a new pod of namespace state ns
// (non-nil: the caller found the pod in no state of the engine's),
// matches are the groups that select it, as eachMatchingGroup found them
// on the engine's current groups and namespace.
func (e *Engine) applyPodMatched(u podUpdate, ns *nsState, matches []*group) {
	if u.delete {
		e.removePodState(u.key)
		return
	}
	key, node, ports := u.key, u.node, u.ports
	ips := e.effectiveIPs(u)
	var p *podState
	if ns == nil {
		p = e.pods[key]
	}
	if p == nil {
		matched := ns != nil
		if !matched {
			ns = e.nsFor(key.namespace)
		}
		p = &podState{ns: ns, labels: u.sharedLabels(), uid: u.uid, statusIPs: u.ips}
		p.member.Pod = &model.PodRef{Namespace: key.namespace, Name: key.name}
		e.setPodInfo(p, node, ips, ports)
		ns.pods.add(p, nsPos)
		ns.podLabels.add(p.labels, p)
		e.pods[key] = p
		if !matched {
			e.addToMatchingGroups(p)
			return
		}
		// The pod's group set sized once: it joins at most these groups.
		p.groups.grow(len(matches))
		for _, g := range matches {
			if !p.groups.has(g) {
				e.addPod(g, p)
			}
		}
		return
	}
	p.statusIPs = u.ips
	if p.uid != u.uid {
		// A new pod of the same name whose delete was missed: another
		// pod as far as its node's agent is concerned.
		p.uid = u.uid
		e.touchPodEntry(p)
	}
	infoChanged := p.node() != node || !slices.Equal(p.ips(), ips) || !slices.Equal(p.ports(), ports)
	labelsChanged := !u.labelsEqual(p.labels)
	if !infoChanged && !labelsChanged {
		return
	}
	if labelsChanged {
		lbls := u.sharedLabels()
		p.ns.podLabels.remove(p.labels, p)
		p.ns.podLabels.add(lbls, p)
		p.labels = lbls
	}
	if p.node() != node {
		// Leave and re-join: keeps per-node counts (spans) right.
		for g := range p.groups.all() {
			e.removePod(g, p)
		}
		e.setPodInfo(p, node, ips, ports)
	} else {
		if infoChanged {
			for g := range p.groups.all() {
				g.notePod(p)
			}
			e.setPodInfo(p, node, ips, ports)
			for g := range p.groups.all() {
				e.touchGroup(g)
			}
		}
		for g := range p.groups.all() {
			if !e.podMatches(g, p) {
				e.removePod(g, p)
			}
		}
	}
	e.addToMatchingGroups(p)
}

// sharedLabels is the label set a pod's state keeps: a prepared pod's as
// it is (PreparePod shared it already), any other's the set podLabelSets
// shares among the pods of equal labels.
func (u *podUpdate) sharedLabels() *labelSet {
	if u.set != nil {
		return u.set
	}
	return podLabelSets.intern(u.labels, u.labelsHash)
}

// labelsEqual reports whether u's labels are those of s.
func (u *podUpdate) labelsEqual(s *labelSet) bool {
	if u.set != nil {
		return u.set.equal(s)
	}
	return s.equalMap(u.labels)
}

// asLabelSet is u's labels as a set: a prepared pod's shared one, else a
// new one.
func (u *podUpdate) asLabelSet() *labelSet {
	if u.set != nil {
		return u.set
	}
	return newLabelSet(u.labels, u.labelsHash)
}

// key is the pod's namespace and name.
func (p *podState) key() podKey { return podKey{p.member.Pod.Namespace, p.member.Pod.Name} }

func (p *podState) node() string { return p.member.Node }

func (p *podState) ips() []netip.Addr { return p.member.IPs }

func (p *podState) ports() []model.NamedPort { return p.member.Ports }

func (p *podState) setInfo(node string, ips []netip.Addr, ports []model.NamedPort) {
	p.member = model.GroupMember{
		Pod:   p.member.Pod, // set once, when the state is made; shared and immutable
		Node:  node,
		IPs:   ips,
		Ports: ports,
	}
}

func (e *Engine) podMatches(g *group, p *podState) bool {
	return selectsPod(g, p.ns, p.labels, p.ports())
}

// selectsPod reports whether g selects a pod of namespace ns with labels
// lbls and named ports ports.
func selectsPod(g *group, ns *nsState, lbls *labelSet, ports []model.NamedPort) bool {
	if g.spec.kind == groupNamedPort {
		return hasNamedPort(ports, g.spec.portName())
	}
	if g.spec.kind != groupPods || !g.spec.podSel.Matches(lbls) {
		return false
	}
	if g.spec.nsSel == nil {
		return g.spec.namespace == ns.name
	}
	return g.spec.nsSel.Matches(ns.labels)
}

// addToMatchingGroups adds p to every group that selects it and does not
// hold it yet.
func (e *Engine) addToMatchingGroups(p *podState) {
	e.eachMatchingGroup(p.ns, p.labels, p.ports(), func(g *group) {
		// The pod's own (small) set of groups, not the group's set of
		// pods: a large group's is a Go map of thousands, and probing it
		// for each candidate was a cache miss per candidate.
		if !p.groups.has(g) {
			e.addPod(g, p)
		}
	})
}

// eachMatchingGroup calls fn with every group that selects a pod of
// namespace ns with labels lbls and named ports ports, looking only at
// groups the selector indexes name (a group may come twice). It only reads
// the engine; fn must not change its indexes.
func (e *Engine) eachMatchingGroup(ns *nsState, lbls *labelSet, ports []model.NamedPort, fn func(*group)) {
	visit := func(g *group) {
		if selectsPod(g, ns, lbls, ports) {
			fn(g)
		}
	}
	ns.groups.candidates(lbls, visit)
	for _, np := range ports {
		if g := e.namedPortGroups[np.Name]; g != nil {
			visit(g)
		}
	}
	// Groups with a namespace selector are indexed twice, by pod selector
	// and by namespace selector; either index finds all that may match, so
	// take the one with fewer candidates.
	if e.nsGroups.count(ns.labels) < e.clusterPodGroups.count(lbls) {
		e.nsGroups.candidates(ns.labels, visit)
	} else {
		e.clusterPodGroups.candidates(lbls, visit)
	}
}

// podRunMin is the shortest run of pod upserts whose groups applyPods
// finds on every core first (shorter runs are applied one by one: the
// cores would not share the work). A variable: tests lower it to run the
// parallel path on small inputs.
var podRunMin = 2 * parallelMin

// applyPods applies a run of pod upserts (no deletes), as applyPod each
// in order. For a long run, the groups each new pod joins are found first,
// for all of them at once and on every core: finding them only reads the
// engine (pod upserts change no group, selector index or namespace), and
// on a large cluster's start, with pods the bulk of the engine's work, it
// is about half of a new pod's cost. Applying stays on one core, in
// order within each namespace.
func (e *Engine) applyPods(us []podUpdate) {
	if len(us) < podRunMin {
		for _, u := range us {
			e.applyPod(u)
		}
		return
	}
	type found struct {
		ns      *nsState
		matches []*group
	}
	pre := make([]found, len(us))
	// order holds each pod's place in the run in its low bits and its
	// namespace name's hash above them.
	shift := bits.Len(uint(len(us)))
	order := make([]uint64, len(us))
	inParallel(len(us), func(i int) {
		u := &us[i]
		order[i] = nsHash(u.key.namespace)<<shift | uint64(i)
		ns := e.namespaces[u.key.namespace]
		if u.delete || ns == nil || e.pods[u.key] != nil {
			return // applied the usual way
		}
		var ms []*group
		e.eachMatchingGroup(ns, u.asLabelSet(), u.ports, func(g *group) { ms = append(ms, g) })
		pre[i] = found{ns, ms}
	})
	// Applied namespace by namespace (in order within one: a pod that
	// comes twice keeps its order): streamed initial lists reach the
	// handlers in a map's order, and pods of one namespace in a row find
	// its pod lists and label index, and its groups, still in the cache.
	// The namespaces come in the order of their names' hashes: any order
	// that keeps a namespace's pods together does, and sorting numbers is
	// cheaper than comparing names (a stable sort by name was an eighth of
	// the instructions of applying a run, on the engine's one goroutine).
	// Two namespaces whose names share the hash's kept bits are applied
	// interleaved, each still in order: only the cache notices.
	slices.Sort(order)
	for _, o := range order {
		i := o & (1<<shift - 1)
		u, f := us[i], pre[i]
		if f.ns == nil || e.namespaces[u.key.namespace] != f.ns || e.pods[u.key] != nil {
			// Not a new pod (it came twice in the run), or its namespace
			// state is another than the one its groups were found in.
			e.applyPod(u)
			continue
		}
		e.applyPodMatched(u, f.ns, f.matches)
	}
}

// nsHash is a namespace name's 64-bit FNV-1a hash: fixed, so a run is
// applied in the same order in every process.
func nsHash(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// DeletePod removes a pod from every group.
func (e *Engine) DeletePod(namespace, name string) {
	e.update(func() { e.removePodState(podKey{namespace, name}) })
}

func (e *Engine) removePodState(key podKey) {
	p := e.pods[key]
	if p == nil {
		return
	}
	for g := range p.groups.all() {
		e.removePod(g, p)
	}
	p.ns.pods.remove(p, nsPos)
	p.ns.podLabels.remove(p.labels, p)
	delete(e.pods, key)
	e.maybeDropNamespace(p.ns)
	e.dropPodEntry(p)
}

// nodeAddresses lists the IP addresses in a node's status.addresses. The
// API selects "the IPs present in the node.Status.Addresses field", so
// every entry that is an IP counts, whatever its type (InternalIP,
// ExternalIP, or a Hostname/DNS entry that holds an address); names that
// are not addresses are skipped.
func nodeAddresses(node *corev1.Node) []netip.Addr {
	var ips []netip.Addr
	for _, a := range node.Status.Addresses {
		ip, err := netip.ParseAddr(strings.TrimSpace(a.Address))
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}

// nodePeerAddresses are what a nodes peer resolves a node to: the IPs of
// its status.addresses and its gateway address in each of its pod CIDRs
// (model.NodeGatewayAddress). A pod reaches its own node's host through
// the gateway address, and any node's through it as well (it is routed
// to that node like its pods): leaving it out would let a pod reach the
// kubelet around a Deny to the node. Pod CIDRs that do not parse add
// nothing.
func nodePeerAddresses(node *corev1.Node) []netip.Addr {
	ips := nodeAddresses(node)
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() || p.Masked() != p {
			continue // the agent makes no gateway of it either (pkg/agent/nodenet)
		}
		if gw := model.NodeGatewayAddress(p); gw.IsValid() && !slices.Contains(ips, gw) {
			ips = append(ips, gw)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}

// UpsertNode adds or updates a node: its labels decide which node
// selectors (egress "nodes" peers) select it, its addresses
// (nodePeerAddresses) are what they resolve to.
func (e *Engine) UpsertNode(node *corev1.Node) { e.update(e.upsertNode(node)) }

func (e *Engine) upsertNode(node *corev1.Node) func() {
	if node == nil || node.Name == "" {
		return nil
	}
	lbls := labelSetOf(node.Labels)
	ips := nodePeerAddresses(node)
	return func() {
		n := e.nodes[node.Name]
		if n == nil {
			n = &nodeState{name: node.Name, labels: lbls}
			n.member = model.GroupMember{Node: node.Name, IPs: ips}
			e.nodes[node.Name] = n
			e.nodeLabels.add(lbls, n)
		} else {
			if !slices.Equal(n.member.IPs, ips) {
				n.member = model.GroupMember{Node: node.Name, IPs: ips}
				for g := range n.groups.all() {
					g.noteNodes()
					e.touchGroup(g)
				}
			}
			if n.labels.equal(lbls) {
				return
			}
			e.nodeLabels.remove(n.labels, n)
			e.nodeLabels.add(lbls, n)
			n.labels = lbls
			for g := range n.groups.all() {
				if !g.spec.nodeSel.Matches(lbls) {
					e.removeNode(g, n)
				}
			}
		}
		e.nodeGroups.candidates(lbls, func(g *group) {
			if !g.nodeMembers().has(n) && g.spec.nodeSel.Matches(lbls) {
				e.addNode(g, n)
			}
		})
	}
}

// DeleteNode removes a node from every node group.
func (e *Engine) DeleteNode(name string) { e.update(e.deleteNode(name)) }

func (e *Engine) deleteNode(name string) func() {
	return func() {
		n := e.nodes[name]
		if n == nil {
			return
		}
		for g := range n.groups.all() {
			e.removeNode(g, n)
		}
		e.nodeLabels.remove(n.labels, n)
		delete(e.nodes, name)
	}
}
