package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/services"
)

// Input is everything the proxy's flows depend on.
type Input struct {
	// Ports are every Service port of the cluster (pkg/services).
	Ports []services.Port
	// NodeAddrs are every node's addresses, where NodePort frontends
	// answer.
	NodeAddrs []netip.Addr
}

// Output is the proxy's share of the bridge and what else must happen
// when it is installed.
type Output struct {
	Flows  []openflow.Flow
	Keys   []string
	Groups []openflow.Group
	// DeleteCookies remove the session-affinity flows the switch learned
	// for endpoints that left their frontends (in the same bundle).
	DeleteCookies []flowsync.CookieMask
	// Flushes end the connections of endpoints and frontends that are
	// gone; run them after the bundle (before, a packet could pick the
	// endpoint again).
	Flushes []openflow.ConntrackFlush
	// Warnings: frontends claimed by two Services, and the like.
	Warnings []string
	// Incremental (CompileChanges): the flows and groups are not all of
	// them but what changed, in FlowChanges and GroupChanges.
	Incremental  bool
	FlowChanges  flowsync.Changes
	GroupChanges flowsync.GroupChanges
	// Ports maps the IDs in RoleService cookies to Service ports, and
	// Endpoints the IDs in RoleEndpoint and RoleAffinity cookies to
	// endpoints, for tooling: of every Service (Compile) or of those
	// compiled (CompileChanges).
	Ports     map[uint32]services.PortKey
	Endpoints map[uint32]EndpointRef
}

// EndpointRef is one endpoint of one Service port.
type EndpointRef struct {
	Port     services.PortKey
	Endpoint services.Endpoint
}

// MaxAffinityTimeout is the longest session affinity a learned flow can
// hold (OpenFlow's idle timeout is 16 bits of seconds); longer timeouts
// (the API allows a day) are cut to it.
const MaxAffinityTimeout = 65535 * time.Second

// rejectMaxLen is how much of a rejected packet the agent needs: its
// Ethernet, IP and transport headers, quoted in the ICMP error.
const rejectMaxLen = 256

// Compiler turns Service ports into flows and groups for one node. It
// keeps the IDs in cookies, group numbers and registers stable across
// compilations, and remembers what was last installed (Commit) to know
// what left. Each Service compiles on its own (a fragment of the output),
// so CompileChanges recompiles only the Services that changed. It is not
// safe for concurrent use.
type Compiler struct {
	node string
	zone uint16

	portIDs  map[services.PortKey]uint32
	portKeys map[uint32]services.PortKey
	epIDs    map[epKey]uint32
	epKeys   map[uint32]epKey
	nextPort uint32
	nextEP   uint32

	// committed is what was last installed; pending what the last
	// compilation decided, until Commit.
	committed *state
	pending   *pending
}

type epKey struct {
	port services.PortKey
	ip   netip.Addr
	num  uint16
}

// state is the installed compilation: every Service's fragment and what
// they share.
type state struct {
	compiled  bool
	round     uint8
	nodeAddrs []netip.Addr
	svcs      map[string]*fragment // by namespace/name
	// lb holds every ServiceLB frontend flow (by key) and which
	// Service's frontend it is; contested, the keys a Service was refused
	// because another held them.
	lb        map[string]frontendRef
	contested map[string]bool
	// responders counts the Services answering ARP/ND for each address.
	responders map[netip.Addr]int
	// warned are the Services with warnings.
	warned map[string]bool
}

// pending is a compilation not yet committed: all Services (full) or
// those that changed (nil: gone).
type pending struct {
	full      bool
	round     uint8
	nodeAddrs []netip.Addr
	svcs      map[string]*fragment
}

// fragment is one Service's share of the output.
type fragment struct {
	// ports are its ports as compiled (a port listed twice once).
	ports []services.Port
	flows []openflow.Flow
	keys  []string
	// groups, by ID.
	groups []openflow.Group
	// lb are the keys of its ServiceLB frontend flows, lbRefs whose they
	// are; refused, the keys another Service held.
	lb      []string
	lbRefs  []frontendRef
	refused []string
	// responders are its frontend addresses (ARP/ND answered).
	responders []netip.Addr
	// members is, per endpoint ID, the groups it is in: an endpoint whose
	// groups change loses its learned affinities.
	members map[uint32]string
	// affinity per port.
	affinity  map[services.PortKey]time.Duration
	portIDs   map[uint32]services.PortKey
	endpoints map[uint32]EndpointRef
	warnings  []string
}

// frontendRef is one frontend of one Service port (of family v6 for a
// NodePort), for warnings.
type frontendRef struct {
	port services.PortKey
	f    services.Frontend
	v6   bool
}

func (r frontendRef) String() string {
	if r.f.Kind != services.NodePort {
		return fmt.Sprintf("%s of %s", r.f, r.port)
	}
	fam := "IPv4"
	if r.v6 {
		fam = "IPv6"
	}
	return fmt.Sprintf("%s (%s) of %s", r.f, fam, r.port)
}

// NewCompiler returns a compiler for node's bridge whose connections are
// tracked in conntrack zone.
func NewCompiler(node string, zone uint16) *Compiler {
	return &Compiler{node: node, zone: zone, portIDs: map[services.PortKey]uint32{}, portKeys: map[uint32]services.PortKey{},
		epIDs: map[epKey]uint32{}, epKeys: map[uint32]epKey{}, committed: newState()}
}

func newState() *state {
	return &state{svcs: map[string]*fragment{}, lb: map[string]frontendRef{}, contested: map[string]bool{},
		responders: map[netip.Addr]int{}, warned: map[string]bool{}}
}

// portID is the port's ID, assigned once and never reused (learned flows
// and cookies of a gone port must not name a new one).
func (c *Compiler) portID(k services.PortKey) uint32 {
	id, ok := c.portIDs[k]
	if !ok {
		c.nextPort++
		if c.nextPort >= 1<<30 { // group IDs are port ID << 2
			c.nextPort = 1
		}
		for _, used := c.portKeys[c.nextPort]; used; _, used = c.portKeys[c.nextPort] {
			c.nextPort++
		}
		id = c.nextPort
		c.portIDs[k] = id
		c.portKeys[id] = k
	}
	return id
}

// epID is the endpoint's ID, assigned once and never reused while the
// 32-bit counter lasts.
func (c *Compiler) epID(k epKey) uint32 {
	id, ok := c.epIDs[k]
	if !ok {
		c.nextEP++
		for _, used := c.epKeys[c.nextEP]; used || c.nextEP == 0; _, used = c.epKeys[c.nextEP] {
			c.nextEP++
		}
		id = c.nextEP
		c.epIDs[k] = id
		c.epKeys[id] = k
	}
	return id
}

// groupID names the group of a port's endpoints of one family, for
// internal (ClusterIP) or external frontends (they differ only with
// internalTrafficPolicy Local).
func groupID(port uint32, v6, external bool) uint32 {
	id := port << 2
	if v6 {
		id |= 2
	}
	if external {
		id |= 1
	}
	return id
}

// ServiceOf is the namespace/name of a port's Service: what compiles as
// one (Change.Services's keys).
func ServiceOf(k services.PortKey) string { return k.Namespace + "/" + k.Name }

// Compile computes the flows and groups for in, with cookies of round,
// and what must go since the last committed compilation: every Service
// compiled again.
func (c *Compiler) Compile(in Input, round uint8) *Output {
	nodeAddrs := sortedAddrs(in.NodeAddrs)
	ports := append([]services.Port(nil), in.Ports...)
	sort.SliceStable(ports, func(i, j int) bool { return lessKey(ports[i].Key, ports[j].Key) })
	p := &pending{full: true, round: round, nodeAddrs: nodeAddrs, svcs: map[string]*fragment{}}
	lb := map[string]frontendRef{}
	var order []string
	for i := 0; i < len(ports); {
		svc := ServiceOf(ports[i].Key)
		j := i + 1
		for j < len(ports) && ServiceOf(ports[j].Key) == svc {
			j++
		}
		fr := c.compileService(ports[i:j], nodeAddrs, round, func(k string) (frontendRef, bool) {
			r, ok := lb[k]
			return r, ok
		})
		for n, k := range fr.lb {
			lb[k] = fr.lbRefs[n]
		}
		p.svcs[svc] = fr
		order = append(order, svc)
		i = j
	}

	out := &Output{Ports: map[uint32]services.PortKey{}, Endpoints: map[uint32]EndpointRef{}}
	svcCookie := pipeline.Cookie(round, pipeline.RoleService, 0)
	for _, a := range nodeAddrs {
		f := openflow.Flow{Table: pipeline.ServiceNodePort.ID(), Priority: pipeline.PriorityNormal, Cookie: svcCookie,
			Match:   openflow.Match{EthType: ethType(a), IPDst: host(a)},
			Actions: []openflow.Action{pipeline.LoadService(pipeline.ServiceToNode)}}
		out.Flows, out.Keys = append(out.Flows, f), append(out.Keys, f.Key())
	}
	responders := map[netip.Addr]bool{}
	for _, svc := range order {
		fr := p.svcs[svc]
		out.Flows, out.Keys = append(out.Flows, fr.flows...), append(out.Keys, fr.keys...)
		out.Groups = append(out.Groups, fr.groups...)
		out.Warnings = append(out.Warnings, fr.warnings...)
		fr.addRefs(out)
		for _, a := range fr.responders {
			responders[a] = true
		}
	}
	for _, a := range sortedAddrs(keysOf(responders)) {
		for _, f := range pipeline.Responder(a, svcCookie) {
			out.Flows, out.Keys = append(out.Flows, f), append(out.Keys, f.Key())
		}
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].ID < out.Groups[j].ID })
	sort.Strings(out.Warnings)

	prev := c.committed
	gone := make([]string, 0, len(prev.svcs))
	for svc := range prev.svcs {
		if p.svcs[svc] == nil {
			gone = append(gone, svc)
		}
	}
	for _, svc := range mergeSorted(order, gone) {
		c.gone(prev.svcs[svc], p.svcs[svc], prev.nodeAddrs, out)
	}
	c.pending = p
	return out
}

// Change is what changed since the last compilation: the current ports of
// every Service that changed (by namespace/name; none: it is gone or has
// no port), and the node addresses.
type Change struct {
	Services  map[string][]services.Port
	NodeAddrs []netip.Addr
}

// CompileChanges compiles only the Services of ch, against the last
// committed compilation, and returns the flows and groups that change
// (Output.Incremental; Flows, Keys and Groups are nil; Ports and
// Endpoints are those of the Services of ch). It returns nil when only a
// full Compile can say what changes: nothing committed yet, another
// round, other node addresses, or a frontend address and port that two
// Services claim among those involved (which one holds it depends on
// their order).
func (c *Compiler) CompileChanges(ch Change, round uint8) *Output {
	prev := c.committed
	nodeAddrs := sortedAddrs(ch.NodeAddrs)
	if !prev.compiled || prev.round != round || !slices.Equal(nodeAddrs, prev.nodeAddrs) {
		return nil
	}
	order := make([]string, 0, len(ch.Services))
	for svc := range ch.Services {
		order = append(order, svc)
	}
	sort.Strings(order)
	for _, svc := range order {
		if old := prev.svcs[svc]; old != nil && old.involved(prev) {
			return nil
		}
	}
	changed := make(map[string]bool, len(order))
	for _, svc := range order {
		changed[svc] = true
	}
	lb := map[string]frontendRef{}
	p := &pending{round: round, nodeAddrs: prev.nodeAddrs, svcs: make(map[string]*fragment, len(order))}
	for _, svc := range order {
		ports := append([]services.Port(nil), ch.Services[svc]...)
		if len(ports) == 0 {
			p.svcs[svc] = nil
			continue
		}
		sort.SliceStable(ports, func(i, j int) bool { return lessKey(ports[i].Key, ports[j].Key) })
		fr := c.compileService(ports, nodeAddrs, round, func(k string) (frontendRef, bool) {
			if r, ok := lb[k]; ok {
				return r, true
			}
			r, ok := prev.lb[k]
			return r, ok && !changed[ServiceOf(r.port)]
		})
		if len(fr.refused) > 0 {
			return nil
		}
		for n, k := range fr.lb {
			lb[k] = fr.lbRefs[n]
		}
		p.svcs[svc] = fr
	}

	out := &Output{Incremental: true, Ports: map[uint32]services.PortKey{}, Endpoints: map[uint32]EndpointRef{}}
	svcCookie := pipeline.Cookie(round, pipeline.RoleService, 0)
	wanted := map[string]bool{}
	groups := map[uint32]bool{}
	responders := map[netip.Addr]int{}
	for _, svc := range order {
		if old := prev.svcs[svc]; old != nil {
			for _, a := range old.responders {
				responders[a]--
			}
		}
		fr := p.svcs[svc]
		if fr == nil {
			continue
		}
		out.FlowChanges.Upserts = append(out.FlowChanges.Upserts, fr.flows...)
		out.FlowChanges.Keys = append(out.FlowChanges.Keys, fr.keys...)
		out.GroupChanges.Upserts = append(out.GroupChanges.Upserts, fr.groups...)
		for _, k := range fr.keys {
			wanted[k] = true
		}
		for _, g := range fr.groups {
			groups[g.ID] = true
		}
		for _, a := range fr.responders {
			responders[a]++
		}
		fr.addRefs(out)
	}
	for _, a := range sortedAddrs(keysOf(responders)) {
		before := prev.responders[a]
		after := before + responders[a]
		if (before == 0) == (after == 0) {
			continue
		}
		for _, f := range pipeline.Responder(a, svcCookie) {
			k := f.Key()
			if after > 0 {
				out.FlowChanges.Upserts, out.FlowChanges.Keys = append(out.FlowChanges.Upserts, f), append(out.FlowChanges.Keys, k)
				wanted[k] = true
			} else {
				out.FlowChanges.Removes = append(out.FlowChanges.Removes, k)
			}
		}
	}
	for _, svc := range order {
		old := prev.svcs[svc]
		if old == nil {
			continue
		}
		for _, k := range old.keys {
			if !wanted[k] {
				out.FlowChanges.Removes = append(out.FlowChanges.Removes, k)
			}
		}
		for _, g := range old.groups {
			if !groups[g.ID] {
				out.GroupChanges.Removes = append(out.GroupChanges.Removes, g.ID)
			}
		}
	}
	for svc := range prev.warned {
		if !changed[svc] {
			out.Warnings = append(out.Warnings, prev.svcs[svc].warnings...)
		}
	}
	for _, svc := range order {
		if fr := p.svcs[svc]; fr != nil {
			out.Warnings = append(out.Warnings, fr.warnings...)
		}
		c.gone(prev.svcs[svc], p.svcs[svc], prev.nodeAddrs, out)
	}
	sort.Strings(out.Warnings)
	c.pending = p
	return out
}

// involved says whether the Service's frontends were contested: it was
// refused a frontend, or holds one another was refused.
func (fr *fragment) involved(st *state) bool {
	if len(fr.refused) > 0 {
		return true
	}
	for _, k := range fr.lb {
		if st.contested[k] {
			return true
		}
	}
	return false
}

// addRefs adds the fragment's port and endpoint IDs to out.
func (fr *fragment) addRefs(out *Output) {
	for id, k := range fr.portIDs {
		out.Ports[id] = k
	}
	for id, e := range fr.endpoints {
		out.Endpoints[id] = e
	}
}

// compileService compiles one Service's ports (sorted); held says which
// Service frontend holds a ServiceLB frontend flow key already.
func (c *Compiler) compileService(ports []services.Port, nodeAddrs []netip.Addr, round uint8, held func(string) (frontendRef, bool)) *fragment {
	fr := &fragment{members: map[uint32]string{}, affinity: map[services.PortKey]time.Duration{},
		portIDs: map[uint32]services.PortKey{}, endpoints: map[uint32]EndpointRef{}}
	var v4Nodes, v6Nodes bool
	for _, a := range nodeAddrs {
		if a.Is4() {
			v4Nodes = true
		} else {
			v6Nodes = true
		}
	}
	fl := &flowSet{keys: map[string]bool{}}
	own := map[string]frontendRef{}
	groups := map[uint32]openflow.Group{}
	responders := map[netip.Addr]bool{}
	seen := map[services.PortKey]bool{}
	for _, p := range ports {
		if seen[p.Key] {
			fr.warnings = append(fr.warnings, fmt.Sprintf("Service port %s listed twice; the second is left out", p.Key))
			continue
		}
		seen[p.Key] = true
		fr.ports = append(fr.ports, p)
		fr.affinity[p.Key] = p.Affinity
		id := c.portID(p.Key)
		fr.portIDs[id] = p.Key
		cookie := pipeline.Cookie(round, pipeline.RoleService, id)
		used := map[uint32]services.Endpoint{}
		for _, f := range p.Frontends {
			fams := []bool{f.IP.Is6()}
			if f.Kind == services.NodePort {
				fams = nil
				if v4Nodes {
					fams = append(fams, false)
				}
				if v6Nodes {
					fams = append(fams, true)
				}
			}
			for _, v6 := range fams {
				ref := frontendRef{port: p.Key, f: f, v6: v6}
				match, prio := frontendMatch(f, v6)
				eps, decision := p.Select(f, c.node, v6)
				var acts []openflow.Action
				gid := groupID(id, v6, p.InternalLocal && !f.Kind.Internal())
				switch decision {
				case services.Balance:
					acts = []openflow.Action{openflow.GroupAction{ID: gid}}
					if p.Affinity > 0 {
						acts = append([]openflow.Action{sourcePortInDatapath(p.Protocol)}, acts...)
					}
				case services.Reject:
					acts = []openflow.Action{openflow.Controller{MaxLen: rejectMaxLen}}
				case services.Drop:
					// No actions: drop.
				}
				lbFlow := openflow.Flow{Table: pipeline.ServiceLB.ID(), Priority: prio, Cookie: cookie, Match: match, Actions: acts}
				k := lbFlow.Key()
				holder, taken := own[k]
				if !taken {
					holder, taken = held(k)
				}
				if taken {
					fr.warnings = append(fr.warnings, fmt.Sprintf("%s: the address is %s's already; left out", ref, holder))
					if ServiceOf(holder.port) != ServiceOf(p.Key) {
						fr.refused = append(fr.refused, k)
					}
					continue
				}
				own[k] = ref
				fl.addKeyed(lbFlow, k)
				fr.lb, fr.lbRefs = append(fr.lb, k), append(fr.lbRefs, ref)
				if decision == services.Balance {
					g := openflow.Group{ID: gid}
					for _, e := range eps {
						epid := c.epID(epKey{port: p.Key, ip: e.IP, num: e.Port})
						used[epid] = e
						fr.members[epid] += fmt.Sprintf("%d,", gid)
						g.Buckets = append(g.Buckets, openflow.Bucket{Weight: 100, Actions: []openflow.Action{
							openflow.LoadReg{Reg: pipeline.RegEndpoint, Start: 0, End: 31, Value: epid},
							pipeline.LoadService(pipeline.ServiceChosen),
							openflow.Resubmit{Table: pipeline.ServiceLB.ID()}}})
						if p.Affinity > 0 {
							fl.add(affinityFlow(match, f, v6, epid, p.Affinity, round))
						}
					}
					groups[gid] = g // frontends of one family share it
				}
				if f.IP.IsValid() && !responders[f.IP] {
					responders[f.IP] = true
					fr.responders = append(fr.responders, f.IP)
				}
			}
		}
		ids := make([]uint32, 0, len(used))
		for id := range used {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, epid := range ids {
			e := used[epid]
			fr.endpoints[epid] = EndpointRef{Port: p.Key, Endpoint: e}
			table := pipeline.EgressAdmin.ID()
			fl.add(openflow.Flow{Table: pipeline.ServiceDNAT.ID(), Priority: pipeline.PriorityNormal, Cookie: pipeline.Cookie(round, pipeline.RoleEndpoint, epid),
				Match: openflow.Match{EthType: ethType(e.IP), IPProto: p.Protocol, Regs: map[int]openflow.Masked{pipeline.RegEndpoint: {Value: epid}}},
				Actions: []openflow.Action{openflow.CT{Commit: true, Zone: c.zone, Table: &table,
					NAT:     &openflow.NAT{Dst: true, Addr: e.IP, Port: e.Port},
					SetMark: &openflow.Masked{Value: pipeline.CtMarkBlocked, Mask: pipeline.CtMarkBlocked}}}})
		}
	}
	fr.flows, fr.keys = fl.flows, fl.order
	for _, g := range groups {
		fr.groups = append(fr.groups, g)
	}
	sort.Slice(fr.groups, func(i, j int) bool { return fr.groups[i].ID < fr.groups[j].ID })
	return fr
}

// Commit records that the last compilation's output is installed: what
// left is measured from it from now on.
func (c *Compiler) Commit() {
	p := c.pending
	if p == nil {
		return
	}
	c.pending = nil
	st := c.committed
	if p.full {
		st = newState()
	}
	st.compiled, st.round, st.nodeAddrs = true, p.round, p.nodeAddrs
	// All that left first: a frontend can pass from one Service to
	// another.
	for svc, fr := range p.svcs {
		if old := st.svcs[svc]; old != nil {
			st.remove(svc, old)
			c.forget(old, fr)
		}
	}
	for svc, fr := range p.svcs {
		if fr != nil {
			st.add(svc, fr)
		}
	}
	c.committed = st
	if !p.full {
		return
	}
	// IDs nothing installed names any more are forgotten (never reused
	// while the counters last: a new endpoint gets a new ID).
	inUse := map[uint32]bool{}
	ports := map[services.PortKey]bool{}
	for _, fr := range st.svcs {
		for id := range fr.endpoints {
			inUse[id] = true
		}
		for _, k := range fr.portIDs {
			ports[k] = true
		}
	}
	for id, k := range c.epKeys {
		if !inUse[id] {
			delete(c.epKeys, id)
			delete(c.epIDs, k)
		}
	}
	for id, k := range c.portKeys {
		if !ports[k] {
			delete(c.portKeys, id)
			delete(c.portIDs, k)
		}
	}
}

// forget drops the IDs of the endpoints and ports of old that now (nil:
// the Service is gone) no longer has.
func (c *Compiler) forget(old, now *fragment) {
	for id := range old.endpoints {
		if now == nil || now.endpoints[id] == (EndpointRef{}) {
			if k, ok := c.epKeys[id]; ok {
				delete(c.epKeys, id)
				delete(c.epIDs, k)
			}
		}
	}
	for id, k := range old.portIDs {
		if now == nil || now.portIDs[id] != k {
			delete(c.portKeys, id)
			delete(c.portIDs, k)
		}
	}
}

func (st *state) add(svc string, fr *fragment) {
	st.svcs[svc] = fr
	for n, k := range fr.lb {
		st.lb[k] = fr.lbRefs[n]
	}
	for _, k := range fr.refused {
		st.contested[k] = true
	}
	for _, a := range fr.responders {
		st.responders[a]++
	}
	if len(fr.warnings) > 0 {
		st.warned[svc] = true
	}
}

func (st *state) remove(svc string, fr *fragment) {
	delete(st.svcs, svc)
	for _, k := range fr.lb {
		delete(st.lb, k)
	}
	for _, a := range fr.responders {
		if st.responders[a]--; st.responders[a] <= 0 {
			delete(st.responders, a)
		}
	}
	delete(st.warned, svc)
}

// gone adds to out the learned affinities and the connections of one
// Service that must go (prev: as installed, nil if new; now: as compiled,
// nil if gone): those of endpoints that left a frontend's groups or the
// Service port, and of frontends that are no more.
func (c *Compiler) gone(prev, now *fragment, nodeAddrs []netip.Addr, out *Output) {
	if prev == nil {
		return
	}
	if now == nil {
		now = &fragment{}
	}
	// Learned affinities of endpoints whose groups changed, or whose
	// port's affinity did.
	var ids []uint32
	for epid, groups := range prev.members {
		k, ok := c.keyOf(epid)
		if now.members[epid] != groups || !ok || now.affinity[k.port] != prev.affinity[k.port] {
			ids = append(ids, epid)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, epid := range ids {
		out.DeleteCookies = append(out.DeleteCookies, flowsync.CookieMask{Value: pipeline.Cookie(0, pipeline.RoleAffinity, epid), Mask: roleAndID})
	}
	// Connections through frontends and to endpoints that are gone.
	cur := make(map[services.PortKey]services.Port, len(now.ports))
	for _, p := range now.ports {
		cur[p.Key] = p
	}
	for _, old := range prev.ports {
		p, still := cur[old.Key]
		for _, f := range old.Frontends {
			dsts := frontendAddrs(f, nodeAddrs)
			if !still || !hasFrontend(p, f) {
				for _, d := range dsts {
					out.Flushes = append(out.Flushes, openflow.ConntrackFlush{Zone: c.zone, IPProto: f.Protocol,
						Orig: openflow.ConntrackTuple{Dst: d, DstPort: f.Port}})
				}
				continue
			}
			for _, e := range old.Endpoints {
				if hasEndpoint(p, e) {
					continue
				}
				for _, d := range dsts {
					if d.Is6() != e.IP.Is6() {
						continue
					}
					out.Flushes = append(out.Flushes, openflow.ConntrackFlush{Zone: c.zone, IPProto: f.Protocol,
						Orig: openflow.ConntrackTuple{Dst: d, DstPort: f.Port}, Reply: openflow.ConntrackTuple{Src: e.IP, SrcPort: e.Port}})
				}
			}
		}
	}
}

// roleAndID selects a cookie's role and ID, whatever its round.
const roleAndID = uint64(0xff)<<48 | 0xffffffff

func (c *Compiler) keyOf(epid uint32) (epKey, bool) {
	k, ok := c.epKeys[epid]
	return k, ok
}

func hasFrontend(p services.Port, f services.Frontend) bool {
	for _, x := range p.Frontends {
		if x == f {
			return true
		}
	}
	return false
}

func hasEndpoint(p services.Port, e services.Endpoint) bool {
	for _, x := range p.Endpoints {
		if x.IP == e.IP && x.Port == e.Port {
			return true
		}
	}
	return false
}

// frontendAddrs are the destination addresses connections to f have:
// its IP, or every node address for a NodePort.
func frontendAddrs(f services.Frontend, nodes []netip.Addr) []netip.Addr {
	if f.IP.IsValid() {
		return []netip.Addr{f.IP}
	}
	return nodes
}

// frontendMatch matches new connections to f (of family v6 for a
// NodePort) in ServiceLB; IP frontends take precedence over NodePorts (an
// externalIP may be a node's address).
func frontendMatch(f services.Frontend, v6 bool) (openflow.Match, uint16) {
	et := uint16(0x0800)
	if v6 {
		et = 0x86dd
	}
	m := openflow.Match{EthType: et, IPProto: f.Protocol, L4Dst: &openflow.Masked{Value: uint32(f.Port)}}
	if f.Kind == services.NodePort {
		m.Regs = map[int]openflow.Masked{pipeline.RegService: pipeline.MatchService(pipeline.ServiceToNode)}
		return m, pipeline.PriorityNormal - 10
	}
	m.IPDst = host(f.IP)
	return m, pipeline.PriorityNormal
}

// sourcePortInDatapath is a no-op (the L4 source port moved onto itself)
// that makes the datapath flow of a new connection to a frontend with
// session affinity match the connection's source port, so each new
// connection is translated afresh and finds the affinity the client's
// earlier connections learned. Without it one datapath flow serves every
// new connection to the frontend and keeps balancing by the group until
// the switch's revalidators replace it, which under load can take longer
// than a client takes to open its next connection; that connection then
// learns another endpoint. The cost is one upcall per new connection, for
// frontends with affinity only.
func sourcePortInDatapath(proto uint8) openflow.Move {
	f := openflow.FieldTCPSrc
	switch proto {
	case services.ProtoUDP:
		f = openflow.FieldUDPSrc
	case services.ProtoSCTP:
		f = openflow.FieldSCTPSrc
	}
	return openflow.Move{Src: f, Dst: f}
}

// affinityFlow learns, when the frontend's group chose endpoint epid, that
// this client goes to it for the affinity timeout; then the connection
// goes on to ServiceDNAT.
func affinityFlow(frontend openflow.Match, f services.Frontend, v6 bool, epid uint32, timeout time.Duration, round uint8) openflow.Flow {
	m := frontend
	regs := map[int]openflow.Masked{pipeline.RegEndpoint: {Value: epid}}
	svc := pipeline.MatchService(pipeline.ServiceChosen)
	if r, ok := m.Regs[pipeline.RegService]; ok {
		svc.Value |= r.Value
		svc.Mask |= r.Mask
	}
	regs[pipeline.RegService] = svc
	m.Regs = regs
	if timeout > MaxAffinityTimeout {
		timeout = MaxAffinityTimeout
	}
	return openflow.Flow{Table: pipeline.ServiceLB.ID(), Priority: pipeline.PriorityHigh + 10, Cookie: pipeline.Cookie(round, pipeline.RoleService, 0),
		Match: m, Actions: []openflow.Action{
			openflow.Learn{Table: pipeline.ServiceAffinity.ID(), Priority: pipeline.PriorityNormal, IdleTimeout: uint16(timeout / time.Second),
				Cookie: pipeline.Cookie(round, pipeline.RoleAffinity, epid), EthType: m.EthType, IPProto: f.Protocol,
				MatchIPSrc: true, MatchIPDst: true, MatchL4Dst: true,
				CopyRegs: []int{pipeline.RegEndpoint}, LoadRegs: []openflow.LoadReg{pipeline.LoadService(pipeline.ServiceAffine)}},
			openflow.GotoTable{Table: pipeline.ServiceDNAT.ID()}}}
}

// flowSet collects flows with their keys, keeping the first of two flows
// with one key.
type flowSet struct {
	flows []openflow.Flow
	order []string
	keys  map[string]bool
}

func (s *flowSet) add(f openflow.Flow) { s.addKeyed(f, f.Key()) }

func (s *flowSet) addKeyed(f openflow.Flow, k string) {
	if s.keys[k] {
		return
	}
	s.keys[k] = true
	s.flows = append(s.flows, f)
	s.order = append(s.order, k)
}

// keysOf is a set's members.
func keysOf[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// mergeSorted is the sorted union of two sorted, disjoint lists.
func mergeSorted(a, b []string) []string {
	out := append(append(make([]string, 0, len(a)+len(b)), a...), b...)
	sort.Strings(out)
	return out
}

func ethType(a netip.Addr) uint16 {
	if a.Is4() {
		return 0x0800
	}
	return 0x86dd
}

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func sortedAddrs(in []netip.Addr) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, a := range in {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a.Unmap())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

func lessKey(a, b services.PortKey) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Port < b.Port
}

// StillOut keeps of flushes (Output.Flushes of earlier compilations)
// those whose connections the installed compilation (the last Commit)
// still does not balance: the frontend (protocol, destination address
// and port) is gone, or the endpoint (reply source) is not among its
// port's endpoints. The agent flushes a removed endpoint's connections a
// second time once the switch has revalidated its datapath flows; an
// endpoint or frontend that came back by then is left alone (its new
// connections are legitimate). A frontend that came back counts as back
// for every endpoint: a flush by frontend does not know the endpoints it
// had. One pass over the installed frontends, whatever len(flushes).
func (c *Compiler) StillOut(flushes []openflow.ConntrackFlush) []openflow.ConntrackFlush {
	type fkey struct {
		proto uint8
		dst   netip.Addr
		port  uint16
	}
	wanted := make(map[fkey][]*services.Port, len(flushes))
	for _, f := range flushes {
		wanted[fkey{f.IPProto, f.Orig.Dst, f.Orig.DstPort}] = nil
	}
	st := c.committed
	for _, fr := range st.svcs {
		for i := range fr.ports {
			p := &fr.ports[i]
			for _, fe := range p.Frontends {
				for _, a := range frontendAddrs(fe, st.nodeAddrs) {
					k := fkey{fe.Protocol, a, fe.Port}
					if ps, ok := wanted[k]; ok {
						wanted[k] = append(ps, p)
					}
				}
			}
		}
	}
	var out []openflow.ConntrackFlush
	for _, f := range flushes {
		back := false
		for _, p := range wanted[fkey{f.IPProto, f.Orig.Dst, f.Orig.DstPort}] {
			if !f.Reply.Src.IsValid() || hasEndpoint(*p, services.Endpoint{IP: f.Reply.Src, Port: f.Reply.SrcPort}) {
				back = true
				break
			}
		}
		if !back {
			out = append(out, f)
		}
	}
	return out
}
