package audit

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// Input is what an audit of Node reads.
type Input struct {
	Node string
	// Snapshot is the controller's computed model.
	Snapshot *model.Snapshot
	// The node's agent's answers.
	Realization *agentquery.Realization
	Rules       *agentquery.Rules
	Installed   *agentquery.Flows
	Pods        *agentquery.Pods
	// Bridge is the node's bridge and BridgeFlows its flows, as
	// ovs-ofctl dump-flows lists them.
	Bridge      string
	BridgeFlows []ovsctl.DumpedFlow
}

// Report is one node's audit: the output of tierctl flows --check.
type Report struct {
	Node   string `json:"node"`
	Bridge string `json:"bridge"`
	Round  uint8  `json:"round"`
	// OK: no policy or flow problem found.
	OK       bool          `json:"ok"`
	Policies []PolicyCheck `json:"policies"`
	// FlowsInstalled is how many flows the agent installed, FlowsInBridge
	// how many the bridge holds (the sentinel and learned flows aside).
	FlowsInstalled int `json:"flowsInstalled"`
	FlowsInBridge  int `json:"flowsInBridge"`
	// LearnedFlows is how many flows the bridge learned itself: the
	// Service proxy's session affinity (cookie role affinity), neither
	// installed by the agent nor extra.
	LearnedFlows int `json:"learnedFlows"`
	// MissingFlows are installed flows the bridge does not hold, ExtraFlows
	// flows the bridge holds that the agent did not install (as cookie,
	// table and priority: what OpenFlow statistics identify a flow by).
	MissingFlows []FlowID `json:"missingFlows"`
	ExtraFlows   []FlowID `json:"extraFlows"`
	// Sentinel: the bridge holds the agent's OpenFlow connection sentinel
	// (pkg/ovs/openflow), whose absence tells the agent OVS lost its flows.
	Sentinel bool `json:"sentinel"`
}

// PolicyCheck is one policy's audit.
type PolicyCheck struct {
	Policy string `json:"policy"`
	ID     string `json:"id"`
	// Status: ok, notReceived (the agent does not hold it), stale (the
	// agent holds or enforces an older generation), failed (realization
	// error), unexpected (the agent holds a policy the controller does not
	// send the node), rulesMissing (a rule lacks flows in the bridge).
	Status               string      `json:"status"`
	ControllerGeneration int64       `json:"controllerGeneration,omitempty"`
	AgentGeneration      int64       `json:"agentGeneration,omitempty"`
	RealizedGeneration   int64       `json:"realizedGeneration,omitempty"`
	Error                string      `json:"error,omitempty"`
	Rules                []RuleCheck `json:"rules,omitempty"`
}

// RuleCheck is one rule's audit.
type RuleCheck struct {
	Direction model.Direction `json:"direction"`
	Index     int             `json:"index"`
	Name      string          `json:"name,omitempty"`
	Action    model.Action    `json:"action"`
	// Status: ok (its action flows are in the bridge), missing (no action
	// flow of it in the bridge), noMatch (it can match nothing on this node,
	// so it needs no flows; Reason says why).
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
	ActionFlows int    `json:"actionFlows"`
}

// FlowID identifies a flow the way OpenFlow statistics do.
type FlowID struct {
	Cookie   string `json:"cookie"`
	Table    string `json:"table"`
	Priority uint16 `json:"priority"`
	Rule     string `json:"rule,omitempty"`
}

// Problems counts what the audit found wrong: missing and extra flows, a
// missing sentinel, and every policy whose status is not ok.
func (r *Report) Problems() int {
	n := len(r.MissingFlows) + len(r.ExtraFlows)
	if !r.Sentinel {
		n++
	}
	for _, p := range r.Policies {
		if p.Status != "ok" {
			n++
		}
	}
	return n
}

type flowKey struct {
	cookie   uint64
	table    uint8
	priority uint16
}

// Check audits in.Node.
func Check(in Input) (*Report, error) {
	rep := &Report{Node: in.Node, Bridge: in.Bridge, Round: in.Rules.Round, Policies: []PolicyCheck{}, MissingFlows: []FlowID{}, ExtraFlows: []FlowID{}}
	ruleByID := map[uint32]agentquery.Rule{}
	for _, r := range in.Rules.Rules {
		ruleByID[r.ID] = r
	}
	describe := func(k flowKey) FlowID {
		id := FlowID{Cookie: fmt.Sprintf("%#x", k.cookie), Table: pipeline.Table(k.table).String(), Priority: k.priority}
		if _, _, rid := pipeline.DecodeCookie(k.cookie); rid != 0 {
			if r, ok := ruleByID[rid]; ok {
				id.Rule = r.String()
			}
		}
		return id
	}

	// The bridge against the agent's installed flows.
	want := map[flowKey]int{}
	for _, f := range in.Installed.Flows {
		c, err := strconv.ParseUint(strings.TrimPrefix(f.Cookie, "0x"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("agent flow cookie %q: %v", f.Cookie, err)
		}
		want[flowKey{c, f.TableID, f.Priority}]++
	}
	rep.FlowsInstalled = len(in.Installed.Flows)
	inBridge := map[flowKey]int{}
	for _, f := range in.BridgeFlows {
		if _, role, _ := pipeline.DecodeCookie(f.Cookie); role == pipeline.RoleAffinity {
			rep.LearnedFlows++
			continue
		}
		inBridge[flowKey{f.Cookie, f.Table, f.Priority}]++
	}
	// The OpenFlow client's sentinel flow is installed outside the
	// pipeline's flows: expected, once, not "extra".
	for k := range inBridge {
		if k.cookie == openflow.SentinelCookie {
			rep.Sentinel = true
			inBridge[k]--
			if inBridge[k] == 0 {
				delete(inBridge, k)
			}
			break
		}
	}
	for _, n := range inBridge {
		rep.FlowsInBridge += n
	}
	present := map[flowKey]int{}
	for k, n := range want {
		have := inBridge[k]
		present[k] = min(have, n)
		for i := have; i < n; i++ {
			rep.MissingFlows = append(rep.MissingFlows, describe(k))
		}
	}
	for k, n := range inBridge {
		for i := want[k]; i < n; i++ {
			rep.ExtraFlows = append(rep.ExtraFlows, describe(k))
		}
	}
	sortFlowIDs(rep.MissingFlows)
	sortFlowIDs(rep.ExtraFlows)

	// Action flows in the bridge per rule.
	actionFlows := map[string]int{} // policyID/direction/index
	for k, n := range present {
		_, role, rid := pipeline.DecodeCookie(k.cookie)
		if role != pipeline.RoleAction {
			continue
		}
		if r, ok := ruleByID[rid]; ok {
			actionFlows[fmt.Sprintf("%s/%s/%d", r.PolicyID, r.Direction, r.Index)] += n
		}
	}
	local := localPods(in.Pods)
	agentHas := map[string]agentquery.PolicyRealization{}
	for _, p := range in.Realization.Policies {
		agentHas[p.ID] = p
	}
	expected := map[string]bool{}
	for _, p := range in.Snapshot.Policies {
		if !slices.Contains(p.Span, in.Node) {
			continue
		}
		expected[p.ID] = true
		pc := PolicyCheck{Policy: p.Source.String(), ID: p.ID, ControllerGeneration: p.Generation, Status: "ok"}
		ar, held := agentHas[p.ID]
		switch {
		case !held:
			pc.Status = "notReceived"
		case ar.Error != "":
			pc.Status, pc.AgentGeneration, pc.RealizedGeneration, pc.Error = "failed", ar.Wanted, ar.Generation, ar.Error
		case ar.Wanted != p.Generation || ar.Generation != p.Generation:
			pc.Status, pc.AgentGeneration, pc.RealizedGeneration = "stale", ar.Wanted, ar.Generation
		default:
			pc.AgentGeneration, pc.RealizedGeneration = ar.Wanted, ar.Generation
		}
		nothing := MatchesNothing(in.Snapshot, p, in.Node, local)
		for _, r := range p.Rules {
			key := ruleKey(r.Direction, r.Index)
			rc := RuleCheck{Direction: r.Direction, Index: r.Index, Name: r.Name, Action: r.Action,
				ActionFlows: actionFlows[p.ID+"/"+key]}
			switch why := nothing[key]; {
			case rc.ActionFlows > 0:
				rc.Status = "ok"
			case why != "":
				rc.Status, rc.Reason = "noMatch", why
			default:
				rc.Status = "missing"
				if pc.Status == "ok" {
					pc.Status = "rulesMissing"
				}
			}
			pc.Rules = append(pc.Rules, rc)
		}
		rep.Policies = append(rep.Policies, pc)
	}
	for _, p := range in.Realization.Policies {
		if !expected[p.ID] {
			rep.Policies = append(rep.Policies, PolicyCheck{Policy: p.Source.String(), ID: p.ID, Status: "unexpected",
				AgentGeneration: p.Wanted, RealizedGeneration: p.Generation, Error: p.Error})
		}
	}
	sort.Slice(rep.Policies, func(i, j int) bool { return rep.Policies[i].Policy < rep.Policies[j].Policy })
	rep.OK = rep.Problems() == 0
	return rep, nil
}

func ruleKey(d model.Direction, index int) string { return fmt.Sprintf("%s/%d", d, index) }

// localPods are the pods the agent attached to its bridge, as the flow
// compiler takes them (those it could not classify get no flows).
func localPods(pods *agentquery.Pods) []pipeline.LocalPod {
	var out []pipeline.LocalPod
	for _, p := range pods.Pods {
		mac, err := net.ParseMAC(p.MAC)
		if p.Error != "" || err != nil {
			continue
		}
		out = append(out, pipeline.LocalPod{Pod: model.PodRef{Namespace: p.Namespace, Name: p.Name}, OFPort: p.OFPort, MAC: mac, IPs: p.IPs})
	}
	return out
}

// MatchesNothing says, for each rule of p by direction and index
// ("In/0"), why it can match no packet on node and so needs no flow. It
// compiles p as node's agent does (pkg/agent/policyflows), from the
// controller's groups and the pods attached to node's bridge; a rule it
// gives flows is absent. A policy that does not compile is absent too:
// its rules' flows are then missing, not unneeded.
func MatchesNothing(snap *model.Snapshot, p *model.Policy, node string, local []pipeline.LocalPod) map[string]string {
	res, err := policyflows.NewCompiler(0).Compile(policyflows.Input{Node: node, Policies: []*model.Policy{p},
		AppliedToGroups: snap.AppliedToGroups, AddressGroups: snap.AddressGroups, Pods: local})
	if err != nil {
		return nil
	}
	out := map[string]string{}
	placed := map[string]bool{}
	for id, ri := range res.Rules {
		k := ruleKey(ri.Direction, ri.Index)
		placed[k] = true
		if why, ok := res.MatchesNothing[id]; ok {
			out[k] = why
		}
	}
	for _, r := range p.Rules {
		if k := ruleKey(r.Direction, r.Index); !placed[k] {
			// The compiler leaves out a NetworkPolicy's rules of a
			// direction its policyTypes do not isolate.
			out[k] = "its policy does not isolate this direction"
		}
	}
	return out
}

func sortFlowIDs(xs []FlowID) {
	sort.Slice(xs, func(i, j int) bool {
		if xs[i].Table != xs[j].Table {
			return xs[i].Table < xs[j].Table
		}
		if xs[i].Priority != xs[j].Priority {
			return xs[i].Priority > xs[j].Priority
		}
		return xs[i].Cookie < xs[j].Cookie
	})
}
