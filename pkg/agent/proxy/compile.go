package proxy

import (
	"fmt"
	"net/netip"
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
	// Ports maps the IDs in RoleService cookies to Service ports, and
	// Endpoints the IDs in RoleEndpoint and RoleAffinity cookies to
	// endpoints, for tooling.
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
// what left. It is not safe for concurrent use.
type Compiler struct {
	node string
	zone uint16

	portIDs  map[services.PortKey]uint32
	portKeys map[uint32]services.PortKey
	epIDs    map[epKey]uint32
	epKeys   map[uint32]epKey
	nextPort uint32
	nextEP   uint32

	// committed is the input and output last installed.
	committed *state
	pending   *state
}

type epKey struct {
	port services.PortKey
	ip   netip.Addr
	num  uint16
}

// state is what a compilation decided, kept to compare with the next.
type state struct {
	ports     map[services.PortKey]services.Port
	nodeAddrs []netip.Addr
	// members is, per endpoint ID, the groups it is in: an endpoint whose
	// groups change loses its learned affinities.
	members map[uint32]string
	// affinity per port.
	affinity map[services.PortKey]time.Duration
	// endpoints are the IDs in the output.
	endpoints map[uint32]bool
}

// NewCompiler returns a compiler for node's bridge whose connections are
// tracked in conntrack zone.
func NewCompiler(node string, zone uint16) *Compiler {
	return &Compiler{node: node, zone: zone, portIDs: map[services.PortKey]uint32{}, portKeys: map[uint32]services.PortKey{},
		epIDs: map[epKey]uint32{}, epKeys: map[uint32]epKey{},
		committed: &state{ports: map[services.PortKey]services.Port{}, members: map[uint32]string{}, affinity: map[services.PortKey]time.Duration{}, endpoints: map[uint32]bool{}}}
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

// Compile computes the flows and groups for in, with cookies of round,
// and what must go since the last committed compilation.
func (c *Compiler) Compile(in Input, round uint8) *Output {
	out := &Output{Ports: map[uint32]services.PortKey{}, Endpoints: map[uint32]EndpointRef{}}
	st := &state{ports: map[services.PortKey]services.Port{}, members: map[uint32]string{}, affinity: map[services.PortKey]time.Duration{},
		endpoints: map[uint32]bool{}, nodeAddrs: sortedAddrs(in.NodeAddrs)}
	ports := append([]services.Port(nil), in.Ports...)
	sort.Slice(ports, func(i, j int) bool { return lessKey(ports[i].Key, ports[j].Key) })

	svcCookie := pipeline.Cookie(round, pipeline.RoleService, 0)
	fl := &flowSet{keys: map[string]string{}}
	var v4Nodes, v6Nodes bool
	for _, a := range st.nodeAddrs {
		if a.Is4() {
			v4Nodes = true
		} else {
			v6Nodes = true
		}
		fl.add(openflow.Flow{Table: pipeline.ServiceNodePort.ID(), Priority: pipeline.PriorityNormal, Cookie: svcCookie,
			Match:   openflow.Match{EthType: ethType(a), IPDst: host(a)},
			Actions: []openflow.Action{pipeline.LoadService(pipeline.ServiceToNode)}}, "node address "+a.String())
	}
	responders := map[netip.Addr]bool{}
	groups := map[uint32]openflow.Group{}
	for _, p := range ports {
		if _, dup := st.ports[p.Key]; dup {
			out.Warnings = append(out.Warnings, fmt.Sprintf("Service port %s listed twice; the second is left out", p.Key))
			continue
		}
		st.ports[p.Key] = p
		st.affinity[p.Key] = p.Affinity
		id := c.portID(p.Key)
		out.Ports[id] = p.Key
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
				match, prio := frontendMatch(f, v6)
				what := fmt.Sprintf("%s of %s", f, p.Key)
				if fam := "IPv4"; f.Kind == services.NodePort {
					if v6 {
						fam = "IPv6"
					}
					what = fmt.Sprintf("%s (%s) of %s", f, fam, p.Key)
				}
				eps, decision := p.Select(f, c.node, v6)
				var acts []openflow.Action
				gid := groupID(id, v6, p.InternalLocal && !f.Kind.Internal())
				switch decision {
				case services.Balance:
					acts = []openflow.Action{openflow.GroupAction{ID: gid}}
				case services.Reject:
					acts = []openflow.Action{openflow.Controller{MaxLen: rejectMaxLen}}
				case services.Drop:
					// No actions: drop.
				}
				if !fl.add(openflow.Flow{Table: pipeline.ServiceLB.ID(), Priority: prio, Cookie: cookie, Match: match, Actions: acts}, what) {
					out.Warnings = append(out.Warnings, fmt.Sprintf("%s: the address is %s's already; left out", what, fl.keys[fl.last]))
					continue
				}
				if decision == services.Balance {
					g := openflow.Group{ID: gid}
					for _, e := range eps {
						epid := c.epID(epKey{port: p.Key, ip: e.IP, num: e.Port})
						used[epid] = e
						st.members[epid] += fmt.Sprintf("%d,", gid)
						g.Buckets = append(g.Buckets, openflow.Bucket{Weight: 100, Actions: []openflow.Action{
							openflow.LoadReg{Reg: pipeline.RegEndpoint, Start: 0, End: 31, Value: epid},
							pipeline.LoadService(pipeline.ServiceChosen),
							openflow.Resubmit{Table: pipeline.ServiceLB.ID()}}})
						if p.Affinity > 0 {
							fl.add(affinityFlow(match, f, v6, epid, p.Affinity, round), what+" affinity to "+e.String())
						}
					}
					groups[gid] = g
				}
				if f.IP.IsValid() && !responders[f.IP] {
					responders[f.IP] = true
					for _, r := range pipeline.Responder(f.IP, svcCookie) {
						fl.add(r, "responder "+f.IP.String())
					}
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
			st.endpoints[epid] = true
			out.Endpoints[epid] = EndpointRef{Port: p.Key, Endpoint: e}
			table := pipeline.EgressAdmin.ID()
			fl.add(openflow.Flow{Table: pipeline.ServiceDNAT.ID(), Priority: pipeline.PriorityNormal, Cookie: pipeline.Cookie(round, pipeline.RoleEndpoint, epid),
				Match: openflow.Match{EthType: ethType(e.IP), IPProto: p.Protocol, Regs: map[int]openflow.Masked{pipeline.RegEndpoint: {Value: epid}}},
				Actions: []openflow.Action{openflow.CT{Commit: true, Zone: c.zone, Table: &table,
					NAT:     &openflow.NAT{Dst: true, Addr: e.IP, Port: e.Port},
					SetMark: &openflow.Masked{Value: pipeline.CtMarkBlocked, Mask: pipeline.CtMarkBlocked}}}},
				fmt.Sprintf("endpoint %s of %s", e, p.Key))
		}
	}
	out.Flows, out.Keys = fl.flows, fl.order
	gids := make([]uint32, 0, len(groups))
	for id := range groups {
		gids = append(gids, id)
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i] < gids[j] })
	for _, id := range gids {
		out.Groups = append(out.Groups, groups[id])
	}
	c.gone(st, out)
	c.pending = st
	return out
}

// Commit records that the last Compile's output is installed: what left
// is measured from it from now on.
func (c *Compiler) Commit() {
	if c.pending == nil {
		return
	}
	c.committed, c.pending = c.pending, nil
	// IDs nothing installed names any more are forgotten (never reused
	// while the counters last: a new endpoint gets a new ID).
	for id, k := range c.epKeys {
		if !c.committed.endpoints[id] {
			delete(c.epKeys, id)
			delete(c.epIDs, k)
		}
	}
	for id, k := range c.portKeys {
		if _, ok := c.committed.ports[k]; !ok {
			delete(c.portKeys, id)
			delete(c.portIDs, k)
		}
	}
}

// gone adds to out the learned affinities and the connections that must
// go: those of endpoints that left a frontend's groups or the Service port,
// and of frontends that are no more.
func (c *Compiler) gone(now *state, out *Output) {
	prev := c.committed
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
	keys := make([]services.PortKey, 0, len(prev.ports))
	for k := range prev.ports {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return lessKey(keys[i], keys[j]) })
	for _, k := range keys {
		old := prev.ports[k]
		cur, still := now.ports[k]
		for _, f := range old.Frontends {
			dsts := frontendAddrs(f, prev.nodeAddrs)
			if !still || !hasFrontend(cur, f) {
				for _, d := range dsts {
					out.Flushes = append(out.Flushes, openflow.ConntrackFlush{Zone: c.zone, IPProto: f.Protocol,
						Orig: openflow.ConntrackTuple{Dst: d, DstPort: f.Port}})
				}
				continue
			}
			for _, e := range old.Endpoints {
				if hasEndpoint(cur, e) {
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
	keys  map[string]string // key → what added it
	last  string
}

func (s *flowSet) add(f openflow.Flow, what string) bool {
	k := f.Key()
	s.last = k
	if _, dup := s.keys[k]; dup {
		return false
	}
	s.keys[k] = what
	s.flows = append(s.flows, f)
	s.order = append(s.order, k)
	return true
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
