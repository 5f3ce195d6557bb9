package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

const traceLong = `Trace a new connection's first packet through the OVS pipeline with
ovs-appctl ofproto/trace (conntrack answered as a new connection) on the
source pod's node and, when the packet leaves that node for the
destination pod's node, on the destination node from the port it arrives
by: the uplink, in encap mode the tunnel port with the outer source and
destination (tun_src, tun_dst) the packet arrives with, in noEncap mode
the gateway. Every
flow the packet hits is printed with its table name and the rule its
cookie names; the verdict is Allow when every trace ends with the
connection committed and output, Deny when one drops it after a Deny rule
or an isolation drop, Dropped when it is dropped otherwise (e.g. no route
to an address that is no pod).

With --controller (and no --agent-socket) the agents are asked through
the controller, from anywhere: the source and destination pods' nodes
(every connected node for an address that is no pod), and each agent runs
ofproto/trace on its node. Otherwise the pods are found through the
agents' query sockets (--agent-socket, NODE=PATH for several nodes): run
it on the node, or give the sockets of both nodes; ovs-appctl then runs
locally (--vswitchd-ctl, --ovs-rundir).
Traces see flows, not the kernel: what they show is what the flows
decide.

A destination that is a Service (service/NS/NAME with its port, or a
frontend address and port: ClusterIP, externalIP, LoadBalancer IP, a node
address with a NodePort; read through the kubeconfig) is traced twice over:
the first packet to the frontend, up to the Service's select group (whose
bucket a datapath hash picks, where ofproto/trace stops), then the
connection as translated to each endpoint the source node's proxy may
choose (egress policy on the endpoint, the endpoint's node's ingress). The
verdict is Allow when every endpoint's trace allows, Deny when none does,
Mixed otherwise; Reject or Drop when there is no endpoint to choose.`

type traceOptions struct {
	live   *liveOptions
	src    string
	dst    string
	port   string
	output string
}

func newTraceCommand(live *liveOptions) *cobra.Command {
	o := &traceOptions{live: live}
	cmd := &cobra.Command{
		Use:     "trace --src NS/POD --dst NS/POD|IP|service/NS/NAME --port PROTO/PORT",
		Short:   "Trace a connection through the OVS pipeline, annotated with tables and rules",
		Long:    traceLong,
		Example: `  tierctl trace --src default/a --dst default/b --port TCP/80 --agent-socket n1=/run/a.sock --agent-socket n2=/run/b.sock`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.src, "src", "", "source pod NS/POD")
	f.StringVar(&o.dst, "dst", "", "destination pod NS/POD, an IP address, or service/NS/NAME")
	f.StringVar(&o.port, "port", "", "destination PROTO/PORT (TCP, UDP or SCTP)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// TraceResult is the output of trace.
type TraceResult struct {
	// Verdict is Allow or Deny as explain has it, or Dropped when the
	// packet was dropped outside the policy tables (no route: e.g. an
	// address that is no pod arriving at a node from its uplink).
	Verdict string     `json:"verdict"`
	Src     string     `json:"src"`
	Dst     string     `json:"dst"`
	SrcIP   netip.Addr `json:"srcIP"`
	DstIP   netip.Addr `json:"dstIP"`
	Port    string     `json:"port"`
	// Decisions are the rules whose action flows the packet hit, in order,
	// and isolation drops.
	Decisions []TraceDecision `json:"decisions"`
	Traces    []NodeTrace     `json:"traces"`
}

// TraceDecision is a rule (or an isolation drop) the packet hit.
type TraceDecision struct {
	Node   string `json:"node"`
	Table  string `json:"table"`
	Rule   string `json:"rule,omitempty"`
	Action string `json:"action"`
}

// NodeTrace is one ofproto/trace run.
type NodeTrace struct {
	Node    string `json:"node"`
	Bridge  string `json:"bridge"`
	Flow    string `json:"flow"`
	Verdict string `json:"verdict"`
	// DroppedIn is the table of the last flow hit when the packet was
	// dropped.
	DroppedIn string `json:"droppedIn,omitempty"`
	// DatapathActions are the "Datapath actions" of each conntrack pass.
	DatapathActions []string    `json:"datapathActions"`
	Steps           []TraceStep `json:"steps"`
	Raw             string      `json:"raw"`

	trace *ovsctl.Trace // Raw, read
}

// TraceStep is one flow the packet hit.
type TraceStep struct {
	Bridge   string `json:"bridge"`
	Node     string `json:"node,omitempty"`
	TableID  int    `json:"tableID"`
	Table    string `json:"table"`
	Priority int    `json:"priority"`
	Cookie   string `json:"cookie,omitempty"`
	Role     string `json:"role,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Action   string `json:"action,omitempty"`
	Match    string `json:"match"`
}

// agentView is one reachable agent with what trace needs of it.
type agentView struct {
	// client is the agent's query client; it runs ofproto/trace when
	// agents are reached through the controller.
	client *agentquery.Client
	node   string
	status *agentquery.Status
	pods   *agentquery.Pods
	rules  map[uint32]agentquery.Rule
}

func (o *traceOptions) agents(ctx context.Context, srcName, dstName string) ([]*agentView, error) {
	var clients []*agentquery.Client
	if o.live.viaController() {
		ctl, err := o.live.controllerClient()
		if err != nil {
			return nil, err
		}
		pods, ips := []string{srcName}, []string(nil)
		if _, err := netip.ParseAddr(dstName); err == nil {
			ips = append(ips, dstName)
		} else {
			pods = append(pods, dstName)
		}
		nodes, err := ctl.Nodes(ctx, pods, ips)
		if err != nil {
			return nil, err
		}
		if len(nodes) == 0 {
			return nil, fmt.Errorf("no agent reachable: no node hosting %s is connected to the controller", strings.Join(append(pods, ips...), " or "))
		}
		for _, n := range nodes {
			clients = append(clients, ctl.Agent(n))
		}
	} else {
		sockets := o.live.agentSockets
		if len(sockets) == 0 {
			sockets = []string{agentquery.DefaultSocket}
		}
		for _, s := range sockets {
			path := s
			if _, p, ok := strings.Cut(s, "="); ok {
				path = p
			}
			clients = append(clients, agentquery.NewClient(path))
		}
	}
	var out []*agentView
	var errs []string
	for _, c := range clients {
		st, err := c.Status(ctx)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		pods, err := c.Pods(ctx)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", st.Node, err)
		}
		rules, err := c.Rules(ctx)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", st.Node, err)
		}
		av := &agentView{client: c, node: st.Node, status: st, pods: pods, rules: map[uint32]agentquery.Rule{}}
		for _, r := range rules.Rules {
			av.rules[r.ID] = r
		}
		out = append(out, av)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no agent reachable: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

func (o *traceOptions) run(w io.Writer) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.src == "" || o.dst == "" || o.port == "" {
		return fmt.Errorf("trace: --src, --dst and --port are required")
	}
	port, err := explain.ParsePortSpec(o.port)
	if err != nil {
		return err
	}
	srcName, dstName := o.live.endpoint(o.src), o.live.endpoint(o.dst)
	if !strings.Contains(srcName, "/") {
		return fmt.Errorf("--src %q: want a pod, NS/POD", o.src)
	}
	ctx, cancel := o.live.ctx()
	defer cancel()
	if maybeService(dstName) {
		st, err := o.traceService(ctx, srcName, dstName, port)
		if err != nil {
			return err
		}
		if st != nil {
			if o.output == "table" {
				return writeServiceTrace(w, st)
			}
			return write(w, o.output, st)
		}
	}
	res, err := o.traceTo(ctx, srcName, dstName, port)
	if err != nil {
		return err
	}
	if o.output == "table" {
		return writeTrace(w, res)
	}
	return write(w, o.output, res)
}

// traceTo traces a new connection from pod srcName to dstName (NS/POD or
// an address) on its source node and, when it leaves that node for the
// destination pod's, from the destination node's uplink.
func (o *traceOptions) traceTo(ctx context.Context, srcName, dstName string, port explain.PortSpec) (*TraceResult, error) {
	agents, err := o.agents(ctx, srcName, dstName)
	if err != nil {
		return nil, err
	}
	srcAgent, src := findPod(agents, srcName, netip.Addr{})
	if src == nil {
		return nil, fmt.Errorf("unknown pod %s: attached on no node whose agent was reached (%s)", srcName, nodeList(agents))
	}
	var dstAgent *agentView
	var dst *agentquery.Pod
	var dstIPs []netip.Addr
	if ip, err := netip.ParseAddr(dstName); err == nil {
		dstIPs = []netip.Addr{ip.Unmap()}
		dstAgent, dst = findPod(agents, "", ip.Unmap())
	} else {
		if !strings.Contains(dstName, "/") {
			return nil, fmt.Errorf("--dst %q: want NS/POD or an IP address", o.dst)
		}
		dstAgent, dst = findPod(agents, dstName, netip.Addr{})
		if dst == nil {
			return nil, fmt.Errorf("unknown pod %s: attached on no node whose agent was reached (%s)", dstName, nodeList(agents))
		}
		dstIPs = dst.IPs
	}
	srcIP, dstIP, ok := sameFamily(src.IPs, dstIPs)
	if !ok {
		return nil, fmt.Errorf("%s to %s: source and destination share no address family", srcName, dstName)
	}
	dstMAC := "02:00:00:00:00:01" // Forwarding looks at addresses, not at this.
	if dst != nil && dst.MAC != "" {
		dstMAC = dst.MAC
	}
	res := &TraceResult{Src: srcName, Dst: dstName, SrcIP: srcIP, DstIP: dstIP, Port: port.String(), Decisions: []TraceDecision{}}
	byBridge := map[string]*agentView{}
	for _, a := range agents {
		byBridge[a.status.Bridge] = a
	}
	first, err := o.trace(ctx, srcAgent, src.OFPort, "", src.MAC, dstMAC, srcIP, dstIP, port, byBridge)
	if err != nil {
		return nil, err
	}
	if dstAgent != srcAgent {
		confineToBridge(first, srcAgent.status.Bridge)
	}
	res.Traces = append(res.Traces, *first)
	// The destination node's ingress: traced from the port the packet
	// arrives by (with the tunnel metadata it carries there), once it left
	// the source node.
	if dstAgent != nil && dstAgent != srcAgent && first.Verdict == "Allow" {
		inPort, tunnel, err := arrival(srcAgent, dstAgent)
		if err != nil {
			return nil, err
		}
		second, err := o.trace(ctx, dstAgent, inPort, tunnel, src.MAC, dstMAC, srcIP, dstIP, port, byBridge)
		if err != nil {
			return nil, err
		}
		res.Traces = append(res.Traces, *second)
	}
	res.Verdict = string(explain.VerdictAllow)
	for _, t := range res.Traces {
		switch {
		case t.Verdict == "Deny" || t.Verdict == "Unknown":
			res.Verdict = t.Verdict
		case t.Verdict == "Dropped" && res.Verdict == string(explain.VerdictAllow):
			res.Verdict = t.Verdict
		}
		for _, s := range t.Steps {
			if s.Role == pipeline.RoleAction.String() || s.Role == pipeline.RoleIsolation.String() || s.Role == pipeline.RoleOverflow.String() {
				res.Decisions = append(res.Decisions, TraceDecision{Node: s.Node, Table: s.Table, Rule: s.Rule, Action: s.Action})
			}
		}
	}
	return res, nil
}

// arrival is where a packet from src's node enters dst's bridge: the
// uplink; in encap mode the tunnel port, with the outer addresses it
// carries (from src's endpoint to dst's); in noEncap mode the gateway.
func arrival(src, dst *agentView) (inPort uint32, tunnel string, err error) {
	if dst.pods.Uplink != 0 {
		return dst.pods.Uplink, "", nil
	}
	sn, dn := src.status.NodeNetwork, dst.status.NodeNetwork
	if dn == nil || (dn.TunnelPort == 0 && dn.GatewayPort == 0) {
		return 0, "", fmt.Errorf("node %s has no uplink, tunnel or gateway port: cannot trace the packet's arrival there", dst.node)
	}
	if dn.TunnelPort == 0 {
		return dn.GatewayPort, "", nil
	}
	var from netip.Addr
	var err1 error
	if sn != nil {
		from, err1 = netip.ParseAddr(sn.TunnelEndpoint)
	}
	to, err2 := netip.ParseAddr(dn.TunnelEndpoint)
	if sn == nil || err1 != nil || err2 != nil {
		return 0, "", fmt.Errorf("tunnel endpoints of nodes %s and %s unknown: cannot trace the packet's arrival", src.node, dst.node)
	}
	return dn.TunnelPort, ovsctl.TunnelFields(from, to), nil
}

func nodeList(agents []*agentView) string {
	var ns []string
	for _, a := range agents {
		ns = append(ns, a.node)
	}
	return "nodes " + strings.Join(ns, ", ")
}

// findPod finds a local pod by NS/NAME, or by address.
func findPod(agents []*agentView, name string, ip netip.Addr) (*agentView, *agentquery.Pod) {
	for _, a := range agents {
		for i := range a.pods.Pods {
			p := &a.pods.Pods[i]
			if name != "" && p.Namespace+"/"+p.Name == name {
				return a, p
			}
			if ip.IsValid() {
				for _, pip := range p.IPs {
					if pip.Unmap() == ip {
						return a, p
					}
				}
			}
		}
	}
	return nil, nil
}

func sameFamily(srcs, dsts []netip.Addr) (netip.Addr, netip.Addr, bool) {
	for _, d := range dsts {
		for _, s := range srcs {
			if s.Unmap().Is4() == d.Unmap().Is4() {
				return s.Unmap(), d.Unmap(), true
			}
		}
	}
	return netip.Addr{}, netip.Addr{}, false
}

// confineToBridge judges a trace that starts on bridge by what happens
// there alone. A packet the source node lets out crosses its uplink into
// other bridges (the same ovs-vswitchd), where ofproto/trace follows every
// copy a NORMAL-switching fabric floods, each ending in a pass of its own;
// the last "Datapath actions" then belongs to whichever copy came last. The
// source bridge outputs to its uplink only what its egress policy allowed
// (denied packets are dropped at ConntrackCommit before any output), so
// reaching another bridge (ovsctl.Trace.LeftBridge) means Allow, unless a
// Deny or isolation flow was hit on the way out; the destination node's
// verdict comes from a trace of its own. Steps on other bridges are
// dropped.
func confineToBridge(t *NodeTrace, bridge string) {
	if !t.trace.LeftBridge(bridge) {
		return
	}
	var own []TraceStep
	for _, s := range t.Steps {
		if s.Bridge == bridge || s.Bridge == "" {
			own = append(own, s)
		}
	}
	t.Steps = own
	t.Verdict, t.DroppedIn = "Allow", ""
	if denied(own) {
		t.Verdict = "Deny"
		if n := len(own); n > 0 {
			t.DroppedIn = own[n-1].Table
		}
	}
}

var protoNumber = map[model.Protocol]int{model.ProtocolTCP: 6, model.ProtocolUDP: 17, model.ProtocolSCTP: 132}

func (o *traceOptions) trace(ctx context.Context, a *agentView, inPort uint32, tunnel, srcMAC, dstMAC string, srcIP, dstIP netip.Addr,
	port explain.PortSpec, byBridge map[string]*agentView) (*NodeTrace, error) {
	l3, addr := "ip", fmt.Sprintf("nw_src=%s,nw_dst=%s", srcIP, dstIP)
	if srcIP.Is6() {
		l3, addr = "ipv6", fmt.Sprintf("ipv6_src=%s,ipv6_dst=%s", srcIP, dstIP)
	}
	if srcMAC == "" {
		srcMAC = "02:00:00:00:00:02"
	}
	spec := fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,%s,nw_proto=%d,%s_dst=%d", inPort, l3, srcMAC, dstMAC, addr,
		protoNumber[port.Protocol], strings.ToLower(string(port.Protocol)), port.Port)
	if tunnel != "" {
		spec = tunnel + "," + spec
	}
	var out string
	if o.live.viaController() {
		// The same trace, run by the agent on its node.
		res, err := a.client.OfprotoTrace(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", a.node, err)
		}
		out = res.Output
	} else {
		var err error
		if out, err = ovsctl.Run(ctx, o.live.ovsEnv(), "ovs-appctl", ovsctl.TraceArgs(o.live.vswitchdCtl, a.status.Bridge, spec)...); err != nil {
			return nil, fmt.Errorf("node %s: %w", a.node, err)
		}
	}
	t := readTrace(out, byBridge)
	t.Node, t.Bridge, t.Flow = a.node, a.status.Bridge, spec
	return t, nil
}

// readTrace reads ofproto/trace output (pkg/ovs/ovsctl) and names what
// the packet hit: each flow's table, and the rule its cookie names on the
// agent of the flow's bridge; the verdict is the last pass's.
func readTrace(out string, byBridge map[string]*agentView) *NodeTrace {
	tr := ovsctl.ParseTrace(out)
	t := &NodeTrace{Raw: out, Steps: []TraceStep{}, DatapathActions: tr.DatapathActions, trace: tr}
	for _, st := range tr.Steps {
		s := TraceStep{Bridge: st.Bridge, TableID: int(st.Table), Table: pipeline.Table(st.Table).String(), Priority: int(st.Priority), Match: st.Match}
		a := byBridge[st.Bridge]
		if a != nil {
			s.Node = a.node
		}
		if st.Cookie != 0 {
			s.Cookie = fmt.Sprintf("%#x", st.Cookie)
			_, role, rid := pipeline.DecodeCookie(st.Cookie)
			s.Role = role.String()
			if a != nil && rid != 0 {
				if r, ok := a.rules[rid]; ok {
					s.Rule = r.String()
					s.Action = string(r.Action)
				}
			}
			switch role {
			case pipeline.RoleIsolation:
				s.Action = "Deny (isolation)"
			case pipeline.RoleOverflow:
				s.Action = "Deny (a policy of this pod did not fit in the table: fail closed)"
			}
		}
		t.Steps = append(t.Steps, s)
	}
	t.Verdict = "Unknown"
	if n := len(t.DatapathActions); n > 0 {
		last := t.DatapathActions[n-1]
		switch {
		case strings.Contains(last, "drop") || last == "":
			// A drop is policy's when the packet hit a Deny rule or an
			// isolation drop (they mark the packet; the drop itself may
			// come in a later table).
			t.Verdict = "Dropped"
			if n := len(t.Steps); n > 0 {
				t.DroppedIn = t.Steps[n-1].Table
			}
			if denied(t.Steps) {
				t.Verdict = "Deny"
			}
		case strings.Contains(last, "ct(commit") && !strings.HasSuffix(last, ")"):
			// Committed, then output: the connection passes.
			t.Verdict = "Allow"
		}
	}
	return t
}

// denied reports whether the packet hit a Deny rule or an isolation drop.
func denied(steps []TraceStep) bool {
	for _, st := range steps {
		if st.Role == pipeline.RoleIsolation.String() || st.Role == pipeline.RoleOverflow.String() || (st.Role == pipeline.RoleAction.String() && st.Action == string(model.ActionDeny)) {
			return true
		}
	}
	return false
}

func writeTrace(w io.Writer, r *TraceResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "VERDICT: %s\t(%s %s -> %s %s %s)\n", r.Verdict, r.Src, r.SrcIP, r.Dst, r.DstIP, r.Port)
	for _, d := range r.Decisions {
		rule := d.Rule
		if rule == "" {
			rule = "-"
		}
		fmt.Fprintf(tw, "decided on %s in %s: %s %s\n", d.Node, d.Table, d.Action, rule)
	}
	for _, t := range r.Traces {
		v := t.Verdict
		if t.DroppedIn != "" {
			v += " (dropped in " + t.DroppedIn + ")"
		}
		fmt.Fprintf(tw, "\nnode %s, bridge %s: %s\nflow: %s\n", t.Node, t.Bridge, v, t.Flow)
		fmt.Fprintln(tw, "BRIDGE\tTABLE\tPRIORITY\tROLE\tRULE\tMATCH")
		for _, s := range t.Steps {
			rule := s.Rule
			if rule == "" {
				rule = "-"
			}
			role := s.Role
			if role == "" {
				role = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Bridge, s.Table, s.Priority, role, rule, s.Match)
		}
		for _, a := range t.DatapathActions {
			fmt.Fprintf(tw, "datapath actions: %s\n", a)
		}
	}
	return tw.Flush()
}
