package agentquery

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/tierflow/tierflow/pkg/model"
)

// Datapath modes of the agent.
const (
	// DatapathOVS: the agent programs an Open vSwitch bridge.
	DatapathOVS = "ovs"
	// DatapathNone: no datapath; the agent only keeps the rule cache and
	// reports every policy realized (fan-out tests, see pkg/agent/nodatapath).
	DatapathNone = "none"
)

// Status is /v1/status.
type Status struct {
	Node     string `json:"node"`
	Datapath string `json:"datapath"`
	Bridge   string `json:"bridge,omitempty"`
	// MetricsAddress is where /metrics, /healthz and /readyz are served
	// (the bound address: a configured port 0 shows the port chosen).
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// Round is the cookie round of this run's flows (bits 56-63 of every
	// cookie; see pkg/agent/pipeline).
	Round uint8 `json:"round,omitempty"`
	// Ready: the datapath enforces a complete policy state (restored from
	// disk or received from the controller). Before that no pod traffic
	// passes.
	Ready bool `json:"ready"`
	// Restored: the state came from the agent's state file at start.
	Restored bool `json:"restored"`
	// ControllerConnected: a stream to the controller is open.
	ControllerConnected bool   `json:"controllerConnected"`
	Epoch               string `json:"epoch,omitempty"`
	Version             uint64 `json:"version"`
	Policies            int    `json:"policies"`
	LocalPods           int    `json:"localPods"`
	// LastRealization is when the datapath last changed to a new state,
	// LastError the error of the last attempt ("" when it succeeded).
	LastRealization time.Time `json:"lastRealization,omitempty"`
	LastError       string    `json:"lastError,omitempty"`
	// Warnings are rules compiled differently from their text (always
	// towards denying), from the last realization.
	Warnings []string `json:"warnings,omitempty"`
	// NodeNetwork is the noEncap or encap node network (nil in uplink
	// mode).
	NodeNetwork *NodeNetwork `json:"nodeNetwork,omitempty"`
}

// NodeNetwork is the state of the noEncap or encap node network
// (pkg/agent/nodenet).
type NodeNetwork struct {
	// Mode is noEncap or encap.
	Mode string `json:"mode"`
	// PodMTU is the MTU of the pods and the gateway (0: the kernel's
	// default).
	PodMTU int `json:"podMTU,omitempty"`
	// GatewayPort and GatewayIPs: the gateway the pipeline uses (0 and
	// none while it is not ready: pods then reach only local pods).
	GatewayPort uint32   `json:"gatewayPort"`
	GatewayIPs  []string `json:"gatewayIPs,omitempty"`
	// Routes are the agent's kernel routes, "CIDR via IP (node NAME)".
	Routes []string `json:"routes,omitempty"`
	// TunnelType, TunnelPort (0 while not ready) and TunnelEndpoint (the
	// node's own address) of encap mode; TunnelPeers the other nodes the
	// tunnel reaches, "NODE IP CIDR...".
	TunnelType     string   `json:"tunnelType,omitempty"`
	TunnelPort     uint32   `json:"tunnelPort,omitempty"`
	TunnelEndpoint string   `json:"tunnelEndpoint,omitempty"`
	TunnelPeers    []string `json:"tunnelPeers,omitempty"`
	// Error is why the last sync failed; NodeErrors why nodes are not
	// routed.
	Error      string            `json:"error,omitempty"`
	NodeErrors map[string]string `json:"nodeErrors,omitempty"`
}

// PolicyRealization is one policy's state on this node.
type PolicyRealization struct {
	ID     string          `json:"id"`
	Source model.PolicyRef `json:"source"`
	// Generation is the policy's generation (model.Meta.Generation) the
	// datapath enforces; 0 when it never enforced this policy.
	Generation int64 `json:"generation"`
	// Wanted is the generation the agent holds; it differs from Generation
	// while a realization failed (Error says why).
	Wanted int64  `json:"wanted"`
	Error  string `json:"error,omitempty"`
}

// Realization is /v1/realization.
type Realization struct {
	Node     string              `json:"node"`
	Policies []PolicyRealization `json:"policies"`
}

// Updates is /v1/updates: the agent's last updates from the controller
// (up to MaxUpdateTimings, oldest first).
type Updates struct {
	Node    string         `json:"node"`
	Updates []UpdateTiming `json:"updates"`
}

// MaxUpdateTimings is how many updates /v1/updates keeps.
const MaxUpdateTimings = 256

// UpdateTiming is when one update from the controller passed each stage
// on its way to the bridge, each stamped as it happened (the controller's
// times by the controller, on the same clock only when both run on one
// machine). Zero: not known (an update realized together with the next
// one, or one that changed no flow, has no bundle times).
type UpdateTiming struct {
	Version uint64 `json:"version"`
	Full    bool   `json:"full,omitempty"`
	// The controller's (wire.Trace): the engine reported the first change
	// it carries to the distribution server; the distribution round
	// queued it; the node's stream started sending it.
	Changed time.Time `json:"changed,omitzero"`
	Queued  time.Time `json:"queued,omitzero"`
	Sent    time.Time `json:"sent,omitzero"`
	// The agent's: its stream delivered the update (decoded); the
	// realization started (the rule cache updated, the previous
	// realization done); the bundle started (rules compiled and diffed);
	// the switch's reply confirming the bundle arrived (stamped by the
	// OpenFlow read loop); the realization ended.
	Received    time.Time `json:"received,omitzero"`
	Realizing   time.Time `json:"realizing,omitzero"`
	BundleStart time.Time `json:"bundleStart,omitzero"`
	Committed   time.Time `json:"committed,omitzero"`
	Done        time.Time `json:"done,omitzero"`
	// FlowChanges is how many flow changes the bundle carried.
	FlowChanges int    `json:"flowChanges"`
	Error       string `json:"error,omitempty"`
}

// RuleInfo describes the rule behind a rule ID: what a cookie's or a
// ct_label's rule ID reads back to. The agent's flow compiler
// (pkg/agent/policyflows) fills it as it allocates the IDs.
type RuleInfo struct {
	ID        uint32          `json:"id"`
	Policy    model.PolicyRef `json:"policy"`
	PolicyID  string          `json:"policyID"`
	Tier      model.Tier      `json:"tier"`
	Direction model.Direction `json:"direction"`
	Index     int             `json:"index"`
	Name      string          `json:"name,omitempty"`
	Action    model.Action    `json:"action"`
	// Table is the pipeline table the rule's flows are in (by name), and
	// Priority their OpenFlow priority.
	Table    string `json:"table"`
	Priority uint16 `json:"priority"`
}

// String names the rule as tooling prints it: POLICY ingress[INDEX]
// (NAME), or egress.
func (r RuleInfo) String() string {
	d := "egress"
	if r.Direction == model.DirectionIn {
		d = "ingress"
	}
	s := fmt.Sprintf("%s %s[%d]", r.Policy, d, r.Index)
	if r.Name != "" {
		s += " (" + r.Name + ")"
	}
	return s
}

// Rule is one entry of the cookie → rule map.
type Rule struct {
	RuleInfo
	// Cookie is the cookie of the rule's action flows (role "action");
	// its clause and metric flows carry the same rule ID with another role.
	Cookie string `json:"cookie"`
}

// Rules is /v1/rules.
type Rules struct {
	Round uint8  `json:"round"`
	Rules []Rule `json:"rules"`
}

// Flow is one installed flow with its counters.
type Flow struct {
	Table    string `json:"table"`
	TableID  uint8  `json:"tableID"`
	Priority uint16 `json:"priority"`
	Cookie   string `json:"cookie"`
	// Role is what the flow is for (pipeline, clause, action, metric,
	// isolation, default, sentinel).
	Role   string `json:"role"`
	RuleID uint32 `json:"ruleID,omitempty"`
	// Rule is the rule the cookie names, when it names one.
	Rule *RuleInfo `json:"rule,omitempty"`
	// Text is the flow in ovs-ofctl syntax.
	Text    string `json:"text"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// SharedCounters > 1 means OpenFlow flow statistics cannot tell this
	// flow from SharedCounters-1 others with the same table, priority and
	// cookie: Packets and Bytes are their sum. Action flows (whose counters
	// are a rule's) are always unique.
	SharedCounters int `json:"sharedCounters,omitempty"`
}

// Flows is /v1/flows.
type Flows struct {
	Round uint8  `json:"round"`
	Flows []Flow `json:"flows"`
}

// FlowFilter selects flows; empty fields select everything.
type FlowFilter struct {
	// Policy is a policy ID or its source as KIND/NAME or KIND/NAMESPACE/NAME.
	Policy string
	// Direction (In or Out) and Rule (the rule's index in that direction)
	// narrow Policy to rules; Rule needs Policy and Direction.
	Direction string
	Rule      *int
	// Table is a table name (pkg/agent/pipeline), e.g. IngressAdmin.
	Table string
	// Pod is NAMESPACE/NAME of a local pod: flows matching its port, MAC
	// or one of its addresses exactly.
	Pod string
}

// Pod is one local pod the agent maps to an OpenFlow port.
type Pod struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Interface string       `json:"interface"`
	OFPort    uint32       `json:"ofport"`
	MAC       string       `json:"mac,omitempty"`
	IPs       []netip.Addr `json:"ips,omitempty"`
	// Error says why the pod is not classified (no traffic passes).
	Error string `json:"error,omitempty"`
}

// Pods is /v1/pods.
type Pods struct {
	Uplink uint32 `json:"uplink,omitempty"`
	Pods   []Pod  `json:"pods"`
	// Invalid lists interfaces whose tierflow external_ids do not parse
	// (they get no traffic), with the reason.
	Invalid map[string]string `json:"invalid,omitempty"`
}

// Error is the body of every non-200 answer.
type Error struct {
	Error string `json:"error"`
}

// TraceRequest asks how the bridge treats the first packet of a new
// connection.
type TraceRequest struct {
	// Src is a local pod (NAMESPACE/NAME) or an IP address elsewhere (the
	// packet then arrives from the uplink).
	Src string
	// Dst is the destination IP address.
	Dst string
	// Protocol is TCP (default), UDP or SCTP; Port the destination port.
	Protocol string
	Port     int
}

// Trace is /v1/trace: ovs-vswitchd's ofproto/trace of the packet, with
// conntrack simulated as a new connection at each recirculation.
type Trace struct {
	// Flow is the traced packet in ovs-ofctl syntax.
	Flow string `json:"flow"`
	// Output is ofproto/trace's text.
	Output string `json:"output"`
	// Rules are the rules whose flows the packet went through, in order.
	Rules []Rule `json:"rules"`
	// DatapathActions is the final "Datapath actions" line; Dropped says
	// whether the packet is dropped on this bridge (one that crossed into
	// another bridge, through the uplink's patch port, was not, whatever
	// the later passes of other bridges say).
	DatapathActions string `json:"datapathActions"`
	Dropped         bool   `json:"dropped"`
	// LeftBridge says whether the packet crossed a patch port into another
	// bridge: on a node, that it went out of the uplink to another node or
	// the host.
	LeftBridge bool `json:"leftBridge"`
}

// BridgeFlows is /v1/bridge-flows: the bridge's whole flow table as
// ovs-ofctl dump-flows prints it (--no-names --no-stats), what flows
// --check compares the agent's installed flows with.
type BridgeFlows struct {
	Bridge string `json:"bridge"`
	Dump   string `json:"dump"`
}
