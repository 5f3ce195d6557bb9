package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

const flowsLong = `Show the OpenFlow flows that realize a policy, a rule, a pod or a table on
one node, as the node's agent installed them, with table names, priorities
and the bridge's packet and byte counters. With --controller (and no
--agent-socket) it asks the node's agent through the controller, from
anywhere; otherwise run it on the node (or in the agent's pod): it reads
the agent's query socket (--agent-socket).

--rule takes a rule index (with --direction when the policy has an ingress
and an egress rule of that index) or a rule name.

--check audits the node's realization instead of listing flows:
  - per policy, the controller's generation (for policies whose span holds
    the node) against the generation the agent holds and the one its bridge
    enforces, and the agent's realization error;
  - policies the agent holds that the controller does not send the node;
  - per rule, whether the bridge holds its action flows (a rule that can
    match nothing - no peer address, no local applied-to pod - needs none);
  - the bridge's flows (ovs-ofctl dump-flows) against the flows the agent
    installed: flows missing from the bridge and extra flows in it, and the
    agent's sentinel flow (its absence means OVS lost the flows).
It prints the report and exits 1 when it found a problem. It needs the
controller (--controller) as well as the agent, and ovs-ofctl (run by the
agent when it is reached through the controller).`

type flowsOptions struct {
	live      *liveOptions
	node      string
	policy    string
	direction string
	rule      string
	pod       string
	table     string
	check     bool
	output    string
}

func newFlowsCommand(live *liveOptions) *cobra.Command {
	o := &flowsOptions{live: live}
	cmd := &cobra.Command{
		Use:   "flows --node NODE (--policy KIND/[NS/]NAME [--rule INDEX|NAME] | --pod NS/POD | --table NAME) [--check]",
		Short: "Show the flows that realize a policy, rule, pod or table on a node",
		Long:  flowsLong,
		Example: `  tierctl flows --node n1 --policy AdminNetworkPolicy/a-not-to-c --rule deny-c
  tierctl flows --node n1 --pod default/web -o json
  tierctl flows --node n1 --check --controller 127.0.0.1:10352 --controller-ca-file ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.node, "node", "", "the node whose flows to show (required)")
	f.StringVar(&o.policy, "policy", "", "policy as KIND/[NS/]NAME (or its ID)")
	f.StringVar(&o.direction, "direction", "", "rule direction: ingress (In) or egress (Out)")
	f.StringVar(&o.rule, "rule", "", "rule index or name (needs --policy)")
	f.StringVar(&o.pod, "pod", "", "a local pod NS/POD (or POD in -n's namespace)")
	f.StringVar(&o.table, "table", "", "a pipeline table name, e.g. IngressAdmin")
	f.BoolVar(&o.check, "check", false, "audit the node's realization (see above)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func normalizeDirection(s string) (string, error) {
	switch strings.ToLower(s) {
	case "":
		return "", nil
	case "in", "ingress":
		return string(model.DirectionIn), nil
	case "out", "egress":
		return string(model.DirectionOut), nil
	}
	return "", fmt.Errorf("--direction %q: want ingress or egress", s)
}

func (o *flowsOptions) run(w io.Writer) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.node == "" {
		return fmt.Errorf("flows: --node NODE is required")
	}
	dir, err := normalizeDirection(o.direction)
	if err != nil {
		return err
	}
	if o.rule != "" && o.policy == "" {
		return fmt.Errorf("flows: --rule needs --policy")
	}
	if !o.check && o.policy == "" && o.pod == "" && o.table == "" {
		return fmt.Errorf("flows: one of --policy, --pod or --table is required (or --check)")
	}
	ctx, cancel := o.live.ctx()
	defer cancel()
	if o.check {
		return o.runCheck(ctx, w)
	}
	agent, _, err := o.live.agentFor(ctx, o.node)
	if err != nil {
		return err
	}
	f := agentquery.FlowFilter{Table: o.table, Direction: dir}
	if o.pod != "" {
		f.Pod = o.live.endpoint(o.pod)
	}
	if o.policy != "" {
		rules, err := agent.Rules(ctx)
		if err != nil {
			return err
		}
		real, err := agent.Realization(ctx)
		if err != nil {
			return err
		}
		held := false
		for _, p := range real.Policies {
			if p.ID == o.policy || p.Source.String() == o.policy {
				held = true
				f.Policy = p.ID
			}
		}
		if !held {
			return fmt.Errorf("policy %s not found on node %s (its agent does not hold it)", o.policy, o.node)
		}
		if o.rule != "" {
			ri, err := pickRule(rules.Rules, f.Policy, dir, o.rule)
			if err != nil {
				return fmt.Errorf("policy %s on node %s: %w", o.policy, o.node, err)
			}
			f.Direction = string(ri.Direction)
			idx := ri.Index
			f.Rule = &idx
		}
	}
	flows, err := agent.Flows(ctx, f)
	if err != nil {
		return fmt.Errorf("node %s: %w", o.node, err)
	}
	if o.output == "table" {
		return writeFlows(w, flows.Flows)
	}
	return write(w, o.output, flows)
}

// pickRule finds one rule of policy by index (and direction) or by name.
func pickRule(rules []agentquery.Rule, policyID, dir, rule string) (agentquery.Rule, error) {
	idx, byIndex := -1, false
	if n, err := strconv.Atoi(rule); err == nil {
		if n < 0 {
			return agentquery.Rule{}, fmt.Errorf("rule %q: want an index (0, 1, ...) or a name", rule)
		}
		idx, byIndex = n, true
	}
	var found []agentquery.Rule
	seen := map[string]bool{}
	for _, r := range rules {
		if r.PolicyID != policyID || (dir != "" && string(r.Direction) != dir) {
			continue
		}
		if (byIndex && r.Index == idx) || (!byIndex && r.Name == rule) {
			// A rule may own several IDs (one per tier table): count it once.
			k := fmt.Sprintf("%s/%d", r.Direction, r.Index)
			if !seen[k] {
				seen[k] = true
				found = append(found, r)
			}
		}
	}
	switch len(found) {
	case 0:
		return agentquery.Rule{}, fmt.Errorf("rule %s not found (no flows realize a rule by that index or name)", rule)
	case 1:
		return found[0], nil
	}
	return agentquery.Rule{}, fmt.Errorf("rule %s is ambiguous (an ingress and an egress rule): give --direction", rule)
}

func writeFlows(w io.Writer, flows []agentquery.Flow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tPRIORITY\tROLE\tRULE\tPACKETS\tBYTES\tFLOW")
	for _, f := range flows {
		rule := "-"
		if f.Rule != nil {
			rule = ruleName(f.Rule.Policy, f.Rule.Direction, f.Rule.Index, f.Rule.Name)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\n", f.Table, f.Priority, f.Role, rule, f.Packets, f.Bytes, f.Text)
	}
	return tw.Flush()
}

// ruleName renders a rule as POLICY ingress[i] (name).
func ruleName(p model.PolicyRef, dir model.Direction, index int, name string) string {
	d := "egress"
	if dir == model.DirectionIn {
		d = "ingress"
	}
	s := fmt.Sprintf("%s %s[%d]", p, d, index)
	if name != "" {
		s += " (" + name + ")"
	}
	return s
}

// CheckReport is the output of flows --check.
type CheckReport struct {
	Node   string `json:"node"`
	Bridge string `json:"bridge"`
	Round  uint8  `json:"round"`
	// OK: no policy or flow problem found.
	OK       bool          `json:"ok"`
	Policies []PolicyCheck `json:"policies"`
	// FlowsInstalled is how many flows the agent installed, FlowsInBridge
	// how many the bridge holds (the sentinel aside).
	FlowsInstalled int `json:"flowsInstalled"`
	FlowsInBridge  int `json:"flowsInBridge"`
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

type flowKey struct {
	cookie   uint64
	table    uint8
	priority uint16
}

func (o *flowsOptions) runCheck(ctx context.Context, w io.Writer) error {
	ctl, err := o.live.controllerClient()
	if err != nil {
		return err
	}
	agent, st, err := o.live.agentFor(ctx, o.node)
	if err != nil {
		return err
	}
	snap, err := ctl.Snapshot(ctx)
	if err != nil {
		return err
	}
	real, err := agent.Realization(ctx)
	if err != nil {
		return err
	}
	rules, err := agent.Rules(ctx)
	if err != nil {
		return err
	}
	installed, err := agent.Flows(ctx, agentquery.FlowFilter{})
	if err != nil {
		return err
	}
	pods, err := agent.Pods(ctx)
	if err != nil {
		return err
	}
	inBridge, err := o.dumpBridge(ctx, agent, st.Bridge)
	if err != nil {
		return err
	}
	rep := CheckReport{Node: o.node, Bridge: st.Bridge, Round: rules.Round, Policies: []PolicyCheck{}, MissingFlows: []FlowID{}, ExtraFlows: []FlowID{}}
	ruleByID := map[uint32]agentquery.Rule{}
	for _, r := range rules.Rules {
		ruleByID[r.ID] = r
	}
	describe := func(k flowKey) FlowID {
		id := FlowID{Cookie: fmt.Sprintf("%#x", k.cookie), Table: pipeline.Table(k.table).String(), Priority: k.priority}
		if _, _, rid := pipeline.DecodeCookie(k.cookie); rid != 0 {
			if r, ok := ruleByID[rid]; ok {
				id.Rule = ruleName(r.Policy, r.Direction, r.Index, r.Name)
			}
		}
		return id
	}

	// The bridge against the agent's installed flows.
	want := map[flowKey]int{}
	for _, f := range installed.Flows {
		c, err := strconv.ParseUint(strings.TrimPrefix(f.Cookie, "0x"), 16, 64)
		if err != nil {
			return fmt.Errorf("agent flow cookie %q: %v", f.Cookie, err)
		}
		want[flowKey{c, f.TableID, f.Priority}]++
	}
	rep.FlowsInstalled = len(installed.Flows)
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
	rep.FlowsInBridge = 0
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
	localPods := map[model.PodRef]bool{}
	for _, p := range pods.Pods {
		if p.Error == "" {
			localPods[model.PodRef{Namespace: p.Namespace, Name: p.Name}] = true
		}
	}
	agentHas := map[string]agentquery.PolicyRealization{}
	for _, p := range real.Policies {
		agentHas[p.ID] = p
	}
	expected := map[string]bool{}
	for _, p := range snap.Policies {
		if !slices.Contains(p.Span, o.node) {
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
		local := hasLocalMember(snap, p, o.node, localPods)
		for _, r := range p.Rules {
			rc := RuleCheck{Direction: r.Direction, Index: r.Index, Name: r.Name, Action: r.Action,
				ActionFlows: actionFlows[fmt.Sprintf("%s/%s/%d", p.ID, r.Direction, r.Index)]}
			why := ""
			if !local {
				why = "no applied-to pod of this node is attached to the bridge"
			} else {
				why = matchesNothing(snap, p, r, o.node, localPods)
			}
			switch {
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
	for _, p := range real.Policies {
		if !expected[p.ID] {
			rep.Policies = append(rep.Policies, PolicyCheck{Policy: p.Source.String(), ID: p.ID, Status: "unexpected",
				AgentGeneration: p.Wanted, RealizedGeneration: p.Generation, Error: p.Error})
		}
	}
	sort.Slice(rep.Policies, func(i, j int) bool { return rep.Policies[i].Policy < rep.Policies[j].Policy })
	rep.OK = len(rep.MissingFlows) == 0 && len(rep.ExtraFlows) == 0 && rep.Sentinel
	problems := len(rep.MissingFlows) + len(rep.ExtraFlows)
	if !rep.Sentinel {
		problems++
	}
	for _, p := range rep.Policies {
		if p.Status != "ok" {
			rep.OK = false
			problems++
		}
	}
	if o.output == "table" {
		err = writeCheck(w, &rep)
	} else {
		err = write(w, o.output, rep)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("check: node %s: %d problem(s) found", o.node, problems)
	}
	return nil
}

// hasLocalMember reports whether one of the policy's applied-to pods on
// node is attached to the bridge.
func hasLocalMember(snap *modelSnapshot, p *model.Policy, node string, local map[model.PodRef]bool) bool {
	for _, id := range p.AppliedToGroups {
		g := snap.AppliedToGroups[id]
		if g == nil {
			continue
		}
		for _, m := range g.MembersByNode[node] {
			if m.Pod != nil && local[*m.Pod] {
				return true
			}
		}
	}
	return false
}

// matchesNothing says why a rule can match no packet whatever its pods
// ("" when it can match some). It reads the rule as the agent's compiler
// (pkg/agent/policyflows) does: no peer address means no flow; a rule whose
// ports are all named ports has flows only for the names that resolve — on
// the node's applied-to pods for ingress, on the destination pods (address
// group members, and NamedPortGroups members inside an ipBlock) for egress.
func matchesNothing(snap *modelSnapshot, p *model.Policy, r model.Rule, node string, local map[model.PodRef]bool) string {
	hasPeer := false
	for _, blk := range r.Peer.IPBlocks {
		if blk.CIDR.IsValid() {
			hasPeer = true
		}
	}
	for _, id := range r.Peer.AddressGroups {
		if g := snap.AddressGroups[id]; g != nil && len(g.Members) > 0 {
			hasPeer = true
		}
	}
	if !hasPeer {
		return "its peers hold no address"
	}
	var named []model.Port
	for _, port := range r.Ports {
		if port.Name == "" {
			return "" // a numeric or protocol-only port matches something
		}
		named = append(named, port)
	}
	if len(named) == 0 {
		return ""
	}
	resolves := func(m model.GroupMember) bool {
		for _, want := range named {
			for _, np := range m.Ports {
				if np.Name == want.Name && (want.Protocol == "" || want.Protocol == np.Protocol) && np.Port >= 1 && np.Port <= 65535 {
					return true
				}
			}
		}
		return false
	}
	if r.Direction == model.DirectionIn {
		for _, id := range p.AppliedToGroups {
			if g := snap.AppliedToGroups[id]; g != nil {
				for _, m := range g.MembersByNode[node] {
					if m.Pod != nil && local[*m.Pod] && resolves(m) {
						return ""
					}
				}
			}
		}
		return "its named ports resolve on none of this node's applied-to pods"
	}
	for _, id := range r.Peer.AddressGroups {
		if g := snap.AddressGroups[id]; g != nil {
			for _, m := range g.Members {
				if resolves(m) {
					return ""
				}
			}
		}
	}
	for _, id := range r.NamedPortGroups {
		g := snap.AddressGroups[id]
		if g == nil {
			continue
		}
		for _, m := range g.Members {
			if m.Pod == nil || !resolves(m) {
				continue
			}
			for _, ip := range m.IPs {
				for _, blk := range r.Peer.IPBlocks {
					if blk.CIDR.IsValid() && blk.CIDR.Contains(ip.Unmap()) && !inExcept(blk, ip.Unmap()) {
						return ""
					}
				}
			}
		}
	}
	return "its named ports resolve on none of its destination pods"
}

func inExcept(blk model.IPBlock, ip netip.Addr) bool {
	for _, x := range blk.Except {
		if x.Contains(ip) {
			return true
		}
	}
	return false
}

type modelSnapshot = model.Snapshot

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

// dumpBridge reads the bridge's flows with ovs-ofctl (here, or by the agent
// when it is reached through the controller), counted by cookie,
// table and priority.
func (o *flowsOptions) dumpBridge(ctx context.Context, agent *agentquery.Client, bridge string) (map[flowKey]int, error) {
	if bridge == "" {
		return nil, fmt.Errorf("node %s: the agent has no bridge (datapath none): nothing to check", o.node)
	}
	var dump string
	if o.live.viaController() {
		// The same dump, run by the agent on its node.
		d, err := agent.BridgeFlows(ctx)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", o.node, err)
		}
		dump = d.Dump
	} else {
		var err error
		if dump, err = ovsctl.Run(ctx, o.live.ovsEnv(), "ovs-ofctl", ovsctl.DumpFlowsArgs(bridge)...); err != nil {
			return nil, err
		}
	}
	flows, err := ovsctl.ParseDumpFlows(dump)
	if err != nil {
		return nil, err
	}
	counts := map[flowKey]int{}
	for _, f := range flows {
		counts[flowKey{f.Cookie, f.Table, f.Priority}]++
	}
	return counts, nil
}

func writeCheck(w io.Writer, rep *CheckReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	verdict := "OK"
	if !rep.OK {
		verdict = "PROBLEMS FOUND"
	}
	fmt.Fprintf(tw, "NODE %s (bridge %s, round %d): %s\n", rep.Node, rep.Bridge, rep.Round, verdict)
	fmt.Fprintf(tw, "flows installed by the agent: %d, in the bridge: %d, missing: %d, extra: %d, sentinel present: %v\n\n",
		rep.FlowsInstalled, rep.FlowsInBridge, len(rep.MissingFlows), len(rep.ExtraFlows), rep.Sentinel)
	fmt.Fprintln(tw, "POLICY\tSTATUS\tGENERATION (CONTROLLER/AGENT/REALIZED)\tRULE\tRULE STATUS\tACTION FLOWS")
	for _, p := range rep.Policies {
		gen := fmt.Sprintf("%d/%d/%d", p.ControllerGeneration, p.AgentGeneration, p.RealizedGeneration)
		status := p.Status
		if p.Error != "" {
			status += ": " + p.Error
		}
		if len(p.Rules) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\n", p.Policy, status, gen)
		}
		for i, r := range p.Rules {
			name, stat := fmt.Sprintf("%s[%d]", strings.ToLower(map[model.Direction]string{model.DirectionIn: "ingress", model.DirectionOut: "egress"}[r.Direction]), r.Index), r.Status
			if r.Name != "" {
				name += " (" + r.Name + ")"
			}
			if r.Reason != "" {
				stat += ": " + r.Reason
			}
			pol, pst, pgen := p.Policy, status, gen
			if i > 0 {
				pol, pst, pgen = "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", pol, pst, pgen, name, stat, r.ActionFlows)
		}
	}
	for _, f := range rep.MissingFlows {
		fmt.Fprintf(tw, "missing from the bridge: table %s priority %d cookie %s %s\n", f.Table, f.Priority, f.Cookie, f.Rule)
	}
	for _, f := range rep.ExtraFlows {
		fmt.Fprintf(tw, "extra in the bridge: table %s priority %d cookie %s %s\n", f.Table, f.Priority, f.Cookie, f.Rule)
	}
	return tw.Flush()
}
