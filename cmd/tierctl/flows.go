package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tierflow/tierflow/pkg/agent/audit"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

const flowsLong = `Show the OpenFlow flows that realize a policy, a rule, a pod or a table on
one node, as the node's agent installed them, with table names, priorities
and the bridge's packet and byte counters. With --controller (and no
--agent-socket) it asks the node's agent through the controller, from
anywhere; otherwise run it on the node (or in the agent's pod): it reads
the agent's query socket (--agent-socket), and --node defaults to that
agent's node.

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
		Use:   "flows [--node NODE] (--policy KIND/[NS/]NAME [--rule INDEX|NAME] | --pod NS/POD | --table NAME) [--check]",
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
	f.StringVar(&o.node, "node", "", "the node whose flows to show (required, except on a node: its agent's)")
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
	if o.node == "" {
		// On a node (or in the agent's pod) the one agent there names it.
		node, err := o.live.localNode(ctx)
		if err != nil {
			return fmt.Errorf("flows: --node NODE is required (%v)", err)
		}
		o.node = node
	}
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
			rule = f.Rule.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\n", f.Table, f.Priority, f.Role, rule, f.Packets, f.Bytes, f.Text)
	}
	return tw.Flush()
}

// runCheck audits the node's realization (pkg/agent/audit) with what the
// controller and the node's agent answer and the bridge's flows.
func (o *flowsOptions) runCheck(ctx context.Context, w io.Writer) error {
	ctl, err := o.live.controllerClient()
	if err != nil {
		return err
	}
	agent, st, err := o.live.agentFor(ctx, o.node)
	if err != nil {
		return err
	}
	in := audit.Input{Node: o.node, Bridge: st.Bridge}
	if in.Snapshot, err = ctl.Snapshot(ctx); err != nil {
		return err
	}
	if in.Realization, err = agent.Realization(ctx); err != nil {
		return err
	}
	if in.Rules, err = agent.Rules(ctx); err != nil {
		return err
	}
	if in.Installed, err = agent.Flows(ctx, agentquery.FlowFilter{}); err != nil {
		return err
	}
	if in.Pods, err = agent.Pods(ctx); err != nil {
		return err
	}
	if in.BridgeFlows, err = o.dumpBridge(ctx, agent, st.Bridge); err != nil {
		return err
	}
	rep, err := audit.Check(in)
	if err != nil {
		return err
	}
	if o.output == "table" {
		err = writeCheck(w, rep)
	} else {
		err = write(w, o.output, rep)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("check: node %s: %d problem(s) found", o.node, rep.Problems())
	}
	return nil
}

// dumpBridge reads the bridge's flows with ovs-ofctl: here, or by the agent
// when it is reached through the controller.
func (o *flowsOptions) dumpBridge(ctx context.Context, agent *agentquery.Client, bridge string) ([]ovsctl.DumpedFlow, error) {
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
	return ovsctl.ParseDumpFlows(dump)
}

func writeCheck(w io.Writer, rep *audit.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	verdict := "OK"
	if !rep.OK {
		verdict = "PROBLEMS FOUND"
	}
	fmt.Fprintf(tw, "NODE %s (bridge %s, round %d): %s\n", rep.Node, rep.Bridge, rep.Round, verdict)
	fmt.Fprintf(tw, "flows installed by the agent: %d, in the bridge: %d, missing: %d, extra: %d, learned (session affinity): %d, sentinel present: %v\n\n",
		rep.FlowsInstalled, rep.FlowsInBridge, len(rep.MissingFlows), len(rep.ExtraFlows), rep.LearnedFlows, rep.Sentinel)
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
