package runtime

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// rulesInfo answers /v1/rules.
func (d *ovsDatapath) rulesInfo() agentquery.Rules {
	r := d.current()
	out := agentquery.Rules{Round: r.Round(), Rules: []agentquery.Rule{}}
	for id, ri := range r.Rules() {
		out.Rules = append(out.Rules, agentquery.Rule{RuleInfo: ri, Cookie: fmt.Sprintf("%#x", pipeline.Cookie(out.Round, pipeline.RoleAction, id))})
	}
	sort.Slice(out.Rules, func(i, j int) bool { return out.Rules[i].ID < out.Rules[j].ID })
	return out
}

// flowsInfo answers /v1/flows: the flows of this run's round the agent
// installed, with the bridge's counters, filtered by f.
func (d *ovsDatapath) flowsInfo(ctx context.Context, f agentquery.FlowFilter) (agentquery.Flows, error) {
	r := d.current()
	round := r.Round()
	rules := r.Rules()
	flows := d.inst.installed(round)
	stats, err := r.Stats(ctx)
	if err != nil {
		return agentquery.Flows{}, fmt.Errorf("reading flow statistics: %w", err)
	}
	keep, err := d.flowSelector(ctx, f, rules, flows)
	if err != nil {
		return agentquery.Flows{}, err
	}
	// OpenFlow statistics name a flow by table, priority and cookie only.
	type statKey struct {
		table    uint8
		priority uint16
		cookie   uint64
	}
	type sum struct{ packets, bytes uint64 }
	counters := map[statKey]sum{}
	for _, st := range stats {
		k := statKey{st.Table, st.Priority, st.Cookie}
		s := counters[k]
		s.packets += st.Packets
		s.bytes += st.Bytes
		counters[k] = s
	}
	sharing := map[statKey]int{}
	for _, fl := range flows {
		sharing[statKey{fl.Table, fl.Priority, fl.Cookie}]++
	}
	out := agentquery.Flows{Round: round, Flows: []agentquery.Flow{}}
	for _, fl := range flows {
		if !keep(fl) {
			continue
		}
		_, role, id := pipeline.DecodeCookie(fl.Cookie)
		k := statKey{fl.Table, fl.Priority, fl.Cookie}
		qf := agentquery.Flow{Table: pipeline.Table(fl.Table).String(), TableID: fl.Table, Priority: fl.Priority,
			Cookie: fmt.Sprintf("%#x", fl.Cookie), Role: role.String(), RuleID: id, Text: fl.String(),
			Packets: counters[k].packets, Bytes: counters[k].bytes}
		if n := sharing[k]; n > 1 {
			qf.SharedCounters = n
		}
		if ri, ok := rules[id]; ok && id != 0 {
			ri := ri
			qf.Rule = &ri
		}
		out.Flows = append(out.Flows, qf)
	}
	sort.Slice(out.Flows, func(i, j int) bool {
		a, b := out.Flows[i], out.Flows[j]
		if a.TableID != b.TableID {
			return a.TableID < b.TableID
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Text < b.Text
	})
	return out, nil
}

// flowSelector turns a filter into a predicate. A rule's flows are the
// flows whose cookie names it plus the conjunction clause flows feeding
// its conjunctions (a clause flow shared by several rules names only one
// of them in its cookie).
func (d *ovsDatapath) flowSelector(ctx context.Context, f agentquery.FlowFilter, rules map[uint32]agentquery.RuleInfo, flows []openflow.Flow) (func(openflow.Flow) bool, error) {
	var preds []func(openflow.Flow) bool
	if f.Table != "" {
		t, ok := pipeline.TableByName(f.Table)
		if !ok {
			return nil, fmt.Errorf("unknown table %q", f.Table)
		}
		preds = append(preds, func(fl openflow.Flow) bool { return fl.Table == t.ID() })
	}
	if f.Rule != nil && (f.Policy == "" || f.Direction == "") {
		return nil, fmt.Errorf("rule needs policy and direction")
	}
	if f.Direction != "" && f.Direction != string(model.DirectionIn) && f.Direction != string(model.DirectionOut) {
		return nil, fmt.Errorf("direction %q: want In or Out", f.Direction)
	}
	if f.Policy != "" || f.Direction != "" {
		ids := map[uint32]bool{}
		for id, ri := range rules {
			if f.Policy != "" && ri.PolicyID != f.Policy && ri.Policy.String() != f.Policy {
				continue
			}
			if f.Direction != "" && string(ri.Direction) != f.Direction {
				continue
			}
			if f.Rule != nil && ri.Index != *f.Rule {
				continue
			}
			ids[id] = true
		}
		conj := map[uint32]bool{}
		for _, fl := range flows {
			if _, _, id := pipeline.DecodeCookie(fl.Cookie); ids[id] && fl.Match.ConjID != nil {
				conj[*fl.Match.ConjID] = true
			}
		}
		preds = append(preds, func(fl openflow.Flow) bool {
			_, role, id := pipeline.DecodeCookie(fl.Cookie)
			if ids[id] && role != pipeline.RolePipeline && role != pipeline.RoleIsolation && role != pipeline.RoleDefault {
				return true
			}
			for _, a := range fl.Actions {
				if c, ok := a.(openflow.Conjunction); ok && conj[c.ID] {
					return true
				}
			}
			return false
		})
	}
	if f.Pod != "" {
		ns, name, ok := strings.Cut(f.Pod, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("pod %q: want NAMESPACE/NAME", f.Pod)
		}
		p, ok := d.pod(ctx, ns, name)
		if !ok {
			return nil, fmt.Errorf("pod %s has no port on this node", f.Pod)
		}
		preds = append(preds, func(fl openflow.Flow) bool { return flowNamesPod(fl, p.OFPort, p.MAC, p.IPs) })
	}
	return func(fl openflow.Flow) bool {
		for _, p := range preds {
			if !p(fl) {
				return false
			}
		}
		return true
	}, nil
}

// flowNamesPod reports whether a flow matches the pod's port, MAC or one of
// its addresses exactly (not through a wider prefix: every pod is inside
// 0.0.0.0/0), or outputs to its port.
func flowNamesPod(fl openflow.Flow, port uint32, mac []byte, ips []netip.Addr) bool {
	m := fl.Match
	if port != 0 && m.InPort == port {
		return true
	}
	if r, ok := m.Regs[pipeline.RegOutPort]; ok && port != 0 && r.Value == port && (r.Mask == 0 || r.Mask == 0xffffffff) {
		return true
	}
	for _, a := range fl.Actions {
		if o, ok := a.(openflow.Output); ok && port != 0 && o.Port == port {
			return true
		}
		if l, ok := a.(openflow.LoadReg); ok && port != 0 && l.Reg == pipeline.RegOutPort && l.Value == port {
			return true
		}
	}
	if len(mac) == 6 && (bytes.Equal(m.EthSrc, mac) || bytes.Equal(m.EthDst, mac) || bytes.Equal(m.ArpSha, mac)) {
		return true
	}
	for _, ip := range ips {
		host := netip.PrefixFrom(ip, ip.BitLen())
		if m.IPSrc == host || m.IPDst == host || m.ArpSpa == ip || m.ArpTpa == ip || m.NDTarget == host {
			return true
		}
	}
	return false
}
