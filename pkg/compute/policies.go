package compute

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/model"
)

type prioKey struct {
	tier     model.Tier
	priority int32
}

type policyState struct {
	slot      pendSlot
	c         *compiledPolicy
	atg       *group
	ags       []*group
	gen       int64
	cache     *model.Policy
	prioConds []model.Condition
}

// policyKey identifies an API object regardless of its UID: the key of
// Engine.policies (a PolicyRef without its UID would take 16 bytes more
// of each of the map's slots).
type policyKey struct {
	kind            model.PolicyKind
	namespace, name string
}

// refKey is the key of the API object r refers to.
func refKey(r model.PolicyRef) policyKey {
	return policyKey{kind: r.Kind, namespace: r.Namespace, name: r.Name}
}

func (e *Engine) touchPolicy(p *policyState) {
	p.cache = nil
	p.gen = e.record(&p.slot, KindPolicy, Updated, p.c.id, p.gen)
}

// setPolicy installs the compilation of one API object (nil: the object is
// gone or produces no policy) and records what changed.
func (e *Engine) setPolicy(key policyKey, c *compiledPolicy, ignored []model.Condition) {
	if ignored != nil {
		e.ignoredConds[key] = ignored
	} else {
		delete(e.ignoredConds, key)
	}
	old := e.policies[key]
	if old != nil && (c == nil || old.c.id != c.id) {
		e.removePolicy(key, old)
		old = nil
	}
	if c == nil {
		return
	}
	if old == nil {
		p := &policyState{c: c}
		e.policies[key] = p
		e.policyByID[c.id] = p
		p.gen = e.record(&p.slot, KindPolicy, Added, c.id, 0)
		e.acquireGroups(p)
		e.prioAdd(p)
		return
	}
	if old.c.sameAs(c) {
		return
	}
	oldC, oldATG, oldAGs := old.c, old.atg, old.ags
	old.c = c
	// Acquire the new groups before releasing the old ones, so a group
	// both versions use is never dropped and rebuilt.
	e.acquireGroups(old)
	e.releaseGroups(old, oldATG, oldAGs)
	if oldC.prioritized != c.prioritized || oldC.tier != c.tier || oldC.priority != c.priority {
		e.prioRemove(old, oldC)
		e.prioAdd(old)
	}
	e.touchPolicy(old)
}

func (e *Engine) removePolicy(key policyKey, p *policyState) {
	atg, ags := p.atg, p.ags
	p.atg, p.ags = nil, nil
	e.releaseGroups(p, atg, ags)
	e.prioRemove(p, p.c)
	delete(e.policies, key)
	delete(e.policyByID, p.c.id)
	e.record(&p.slot, KindPolicy, Deleted, p.c.id, p.gen)
}

func (e *Engine) acquireGroups(p *policyState) {
	atg := e.getGroup(p.c.subject)
	atg.atgRefs++
	if atg.atgRefs == 1 {
		atg.atgCache = nil
		atg.atgGen = e.record(&atg.atgSlot, KindAppliedToGroup, Added, atg.atgID, 0)
	}
	atg.atgPolicies.add(p)
	ags := make([]*group, 0, len(p.c.peers))
	for _, spec := range p.c.peers {
		ag := e.getGroup(spec)
		ag.agRefs++
		if ag.agRefs == 1 {
			ag.agCache = nil
			ag.agGen = e.record(&ag.agSlot, KindAddressGroup, Added, ag.agID, 0)
		}
		e.link(atg, ag)
		ags = append(ags, ag)
	}
	p.atg, p.ags = atg, ags
}

func (e *Engine) releaseGroups(p *policyState, atg *group, ags []*group) {
	for _, ag := range ags {
		e.unlink(atg, ag)
		ag.agRefs--
		if ag.agRefs == 0 {
			ag.agCache = nil
			e.record(&ag.agSlot, KindAddressGroup, Deleted, ag.agID, ag.agGen)
		}
	}
	if atg.atgRefs--; atg.atgRefs == 0 {
		atg.atgCache = nil
		e.record(&atg.atgSlot, KindAppliedToGroup, Deleted, atg.atgID, atg.atgGen)
	}
	if p.atg != atg { // an update may keep the same subject group
		atg.atgPolicies.remove(p)
	}
	for _, ag := range ags {
		e.maybeDropGroup(ag)
	}
	e.maybeDropGroup(atg)
}

func (e *Engine) prioAdd(p *policyState) {
	if !p.c.prioritized {
		return
	}
	k := prioKey{p.c.tier, p.c.priority}
	s := e.byPriority[k]
	if s == nil {
		s = &set[*policyState]{}
		e.byPriority[k] = s
	}
	s.add(p)
	e.refreshPriority(k)
}

func (e *Engine) prioRemove(p *policyState, c *compiledPolicy) {
	if !c.prioritized {
		return
	}
	k := prioKey{c.tier, c.priority}
	if s := e.byPriority[k]; s != nil {
		s.remove(p)
		if s.len() == 0 {
			delete(e.byPriority, k)
		}
	}
	if p.prioConds != nil {
		p.prioConds = nil
		if p.atg != nil { // still installed: its content changes
			e.touchPolicy(p)
		}
	}
	e.refreshPriority(k)
}

// maxListed bounds how many other policies a SamePriority message names.
const maxListed = 5

// refreshPriority puts a SamePriority warning on every policy sharing one
// tier and priority with another, and takes it off when it no longer does.
func (e *Engine) refreshPriority(k prioKey) {
	members := e.byPriority[k]
	if members == nil || members.len() == 0 {
		return
	}
	names := make([]*policyState, 0, members.len())
	for p := range members.all() {
		names = append(names, p)
	}
	slices.SortFunc(names, func(a, b *policyState) int { return strings.Compare(a.c.ref.String(), b.c.ref.String()) })
	for _, p := range names {
		var conds []model.Condition
		if len(names) > 1 {
			var others []string
			for _, o := range names {
				if o != p && len(others) < maxListed {
					others = append(others, o.c.ref.String())
				}
			}
			more := ""
			if n := len(names) - 1 - len(others); n > 0 {
				more = fmt.Sprintf(" and %d more", n)
			}
			conds = []model.Condition{{
				Reason:   "SamePriority",
				Severity: model.SeverityWarning,
				Message: fmt.Sprintf("priority %d in tier %s is shared with %s%s; tierflow evaluates policies of equal priority by kind, then namespace and name, but the API leaves their order undefined",
					k.priority, k.tier, strings.Join(others, ", "), more),
			}}
		}
		if !reflect.DeepEqual(conds, p.prioConds) {
			p.prioConds = conds
			e.touchPolicy(p)
		}
	}
}

func (e *Engine) policy(p *policyState) *model.Policy {
	if p.cache != nil {
		return p.cache
	}
	c := p.c
	var conds []model.Condition
	if len(c.conds)+len(p.prioConds) > 0 {
		conds = append(slices.Clip(c.conds), p.prioConds...)
	}
	p.cache = &model.Policy{
		Meta:             model.Meta{ID: c.id, Generation: p.gen, Span: p.atg.atgSpan()},
		Source:           c.ref,
		SourceGeneration: c.sourceGen,
		Tier:             c.tier,
		Priority:         c.priority,
		AppliedToGroups:  []string{p.atg.atgID},
		Isolates:         c.isolates.directions(),
		Rules:            c.rules,
		Conditions:       conds,
	}
	return p.cache
}

// Compiled is a policy object as the engine reads it: what the Upsert
// methods translate from the object, outside the engine's lock, before
// applying it. A cache of API objects can translate each object as it
// arrives and keep the translation instead of the object
// (CompileNetworkPolicy, UpsertCompiled). It is immutable and may be
// applied to any engine, any number of times; the zero value is ignored.
type Compiled struct {
	// c alone: the key (refKey of c.ref) is made when applied, not kept
	// (a cache of 75,000 NetworkPolicies held 4.6 MiB of copies).
	c *compiledPolicy
}

// CompileNetworkPolicy translates a NetworkPolicy (nil: the zero Compiled).
func CompileNetworkPolicy(np *networkingv1.NetworkPolicy) Compiled {
	if np == nil {
		return Compiled{}
	}
	c := compileNetworkPolicy(np)
	return Compiled{c: c}
}

// UpsertCompiled adds or updates the policy object c was compiled from,
// as its kind's Upsert method does with the object.
func (e *Engine) UpsertCompiled(c Compiled) {
	if c.c == nil {
		return
	}
	e.update(func() { e.setPolicy(refKey(c.c.ref), c.c, nil) })
}

// UpsertNetworkPolicy adds or updates a NetworkPolicy.
func (e *Engine) UpsertNetworkPolicy(np *networkingv1.NetworkPolicy) {
	e.UpsertCompiled(CompileNetworkPolicy(np))
}

// DeleteNetworkPolicy removes a NetworkPolicy.
func (e *Engine) DeleteNetworkPolicy(namespace, name string) {
	e.update(func() {
		e.setPolicy(policyKey{kind: model.KindNetworkPolicy, namespace: namespace, name: name}, nil, nil)
	})
}

// UpsertAdminNetworkPolicy adds or updates an AdminNetworkPolicy.
func (e *Engine) UpsertAdminNetworkPolicy(anp *v1alpha1.AdminNetworkPolicy) {
	if anp == nil {
		return
	}
	c := compileAdminNetworkPolicy(anp)
	e.update(func() { e.setPolicy(refKey(c.ref), c, nil) })
}

// DeleteAdminNetworkPolicy removes an AdminNetworkPolicy.
func (e *Engine) DeleteAdminNetworkPolicy(name string) {
	e.update(func() { e.setPolicy(policyKey{kind: model.KindAdminNetworkPolicy, name: name}, nil, nil) })
}

// UpsertBaselineAdminNetworkPolicy adds or updates a
// BaselineAdminNetworkPolicy. Only the one named "default" takes effect;
// any other produces no policy, only a condition saying so.
func (e *Engine) UpsertBaselineAdminNetworkPolicy(banp *v1alpha1.BaselineAdminNetworkPolicy) {
	if banp == nil {
		return
	}
	c, ignored := compileBaselineAdminNetworkPolicy(banp)
	e.update(func() { e.setPolicy(banpKey(banp.Name), c, ignored) })
}

func banpKey(name string) policyKey {
	return policyKey{kind: model.KindBaselineAdminNetworkPolicy, name: name}
}

// DeleteBaselineAdminNetworkPolicy removes a BaselineAdminNetworkPolicy.
func (e *Engine) DeleteBaselineAdminNetworkPolicy(name string) {
	e.update(func() { e.setPolicy(banpKey(name), nil, nil) })
}

// UpsertClusterNetworkPolicy adds or updates a ClusterNetworkPolicy.
func (e *Engine) UpsertClusterNetworkPolicy(cnp *v1alpha2.ClusterNetworkPolicy) {
	if cnp == nil {
		return
	}
	c := compileClusterNetworkPolicy(cnp)
	e.update(func() { e.setPolicy(refKey(c.ref), c, nil) })
}

// DeleteClusterNetworkPolicy removes a ClusterNetworkPolicy.
func (e *Engine) DeleteClusterNetworkPolicy(name string) {
	e.update(func() { e.setPolicy(policyKey{kind: model.KindClusterNetworkPolicy, name: name}, nil, nil) })
}

// Policy returns the computed policy with the given ID.
func (e *Engine) Policy(id string) (*model.Policy, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.policyByID[id]
	if p == nil {
		return nil, false
	}
	return e.policy(p), true
}

// PolicyStatus is what status reporting reads of a computed policy.
type PolicyStatus struct {
	// Source is the API object the policy was computed from (shared and
	// immutable: never modify it; the controller remembers it for every
	// policy, and a pointer is a quarter of the value).
	Source *model.PolicyRef
	// Generation is the computed policy's; SourceGeneration the API
	// object's it was computed from.
	Generation, SourceGeneration int64
	Conditions                   []model.Condition
}

// PolicyStatus returns the source, generations and findings of the
// computed policy with the given ID, as Policy would, without building the
// model object (the controller reads them for every policy it syncs).
func (e *Engine) PolicyStatus(id string) (PolicyStatus, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.policyByID[id]
	if p == nil {
		return PolicyStatus{}, false
	}
	st := PolicyStatus{Source: &p.c.ref, Generation: p.gen, SourceGeneration: p.c.sourceGen}
	if len(p.c.conds)+len(p.prioConds) > 0 {
		st.Conditions = append(slices.Clone(p.c.conds), p.prioConds...)
	}
	return st, true
}

// AppliedToGroup returns the applied-to group with the given ID.
func (e *Engine) AppliedToGroup(id string) (*model.AppliedToGroup, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.atgByIDLocked(id)
	if g == nil {
		return nil, false
	}
	return e.appliedToGroup(g), true
}

// AddressGroup returns the address group with the given ID.
func (e *Engine) AddressGroup(id string) (*model.AddressGroup, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.agByIDLocked(id)
	if g == nil {
		return nil, false
	}
	return e.addressGroup(g), true
}

// PolicyConditions returns the validation findings for one API object
// (matched by kind, namespace and name): those of its computed policy, or,
// for an object that produces no policy (a BaselineAdminNetworkPolicy not
// named "default"), why not. Nil when the object is unknown or clean.
func (e *Engine) PolicyConditions(ref model.PolicyRef) []model.Condition {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := refKey(ref)
	if p := e.policies[key]; p != nil {
		return slices.Clone(e.policy(p).Conditions)
	}
	return slices.Clone(e.ignoredConds[key])
}

// Snapshot returns every computed object, consistent as of one moment.
// Policies are sorted by model.ComparePolicies. The objects are shared and
// immutable (a later change replaces them, never edits them), so the
// snapshot stays valid while the engine moves on; callers must not modify
// them.
func (e *Engine) Snapshot() *model.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Model objects not built yet (after a large start, all of them) are
	// built on every core: each group's build touches that group alone,
	// and a policy's reads its applied-to group's span, built first.
	groups := make([]*group, 0, len(e.groups))
	atgs, ags := 0, 0
	for _, g := range e.groups {
		if g.atgRefs > 0 || g.agRefs > 0 {
			groups = append(groups, g)
		}
		if g.atgRefs > 0 {
			atgs++
		}
		if g.agRefs > 0 {
			ags++
		}
	}
	inParallel(len(groups), func(i int) {
		g := groups[i]
		if g.atgRefs > 0 {
			e.appliedToGroup(g)
			g.atgSpan()
		}
		if g.agRefs > 0 {
			e.addressGroup(g)
		}
	})
	states := make([]*policyState, 0, len(e.policyByID))
	for _, p := range e.policyByID {
		states = append(states, p)
	}
	// The maps are sized up front: a snapshot is built when the heap is
	// at its largest (a start's end), where growing maps of every group
	// would leave their smaller copies as garbage.
	s := &model.Snapshot{
		Policies:        make([]*model.Policy, len(states)),
		AppliedToGroups: make(map[string]*model.AppliedToGroup, atgs),
		AddressGroups:   make(map[string]*model.AddressGroup, ags),
	}
	inParallel(len(states), func(i int) { s.Policies[i] = e.policy(states[i]) })
	slices.SortFunc(s.Policies, model.ComparePolicies)
	for _, g := range groups {
		if g.atgRefs > 0 {
			s.AppliedToGroups[g.atgID] = g.atgCache
		}
		if g.agRefs > 0 {
			s.AddressGroups[g.agID] = g.agCache
		}
	}
	if len(e.nodePods) > 0 {
		// Each node's object is built from its own pods (and reads of
		// the address owners): on every core too.
		nodes := make([]*nodePodsState, 0, len(e.nodePods))
		for _, n := range e.nodePods {
			nodes = append(nodes, n)
		}
		inParallel(len(nodes), func(i int) { e.nodePodsModel(nodes[i]) })
		s.NodePods = make(map[string]*model.NodePods, len(nodes))
		for _, n := range nodes {
			s.NodePods[n.name] = n.cache
		}
	}
	return s
}

// parallelMin is the number of items below which inParallel works alone:
// goroutines cost more than small builds save.
const parallelMin = 256

// parallelChunk is how many indexes an inParallel worker takes at a time.
const parallelChunk = 32

// inParallel calls fn for every index below n, on every core when n is
// large; fn must be safe to call concurrently for different indexes.
// The caller works too, and the indexes are handed out in small chunks
// as the workers ask: when the other cores are busy (during a start, with
// the informers' goroutines), a worker that is not scheduled takes no
// share the caller then waits for, it leaves the work to the others.
func inParallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/parallelMin)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var next, done atomic.Int64
	finished := make(chan struct{})
	work := func() {
		for {
			lo := int(next.Add(parallelChunk)) - parallelChunk
			if lo >= n {
				return
			}
			hi := min(lo+parallelChunk, n)
			for i := lo; i < hi; i++ {
				fn(i)
			}
			// The worker that completes the last chunk says so; the
			// atomic count orders every chunk's work before it.
			if done.Add(int64(hi-lo)) == int64(n) {
				close(finished)
			}
		}
	}
	for w := 1; w < workers; w++ {
		go work()
	}
	work()
	<-finished
}

func (e *Engine) atgByIDLocked(id string) *group {
	if g := e.groupByID("atg", id); g != nil && g.atgID == id && g.atgRefs > 0 {
		return g
	}
	return nil
}

func (e *Engine) agByIDLocked(id string) *group {
	if g := e.groupByID("ag", id); g != nil && g.agID == id && g.agRefs > 0 {
		return g
	}
	return nil
}

// groupByID is the group whose ID in the role prefix names is id (nil if
// none; the caller checks the ID itself, which also rejects another
// spelling of the same hash).
func (e *Engine) groupByID(prefix, id string) *group {
	h, ok := parseGroupID(prefix, id)
	if !ok {
		return nil
	}
	return e.byKeyHash[h]
}
