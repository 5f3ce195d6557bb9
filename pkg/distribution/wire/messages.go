package wire

import (
	"github.com/tierflow/tierflow/pkg/model"
)

// ClientMessage is what an agent sends on the Sync stream: one Hello first,
// then Reports.
type ClientMessage struct {
	Hello  *Hello  `json:"hello,omitempty"`
	Report *Report `json:"report,omitempty"`
	// Answer answers an AgentQuery the controller sent on this stream.
	Answer *AgentAnswer `json:"answer,omitempty"`
	// Pods lists the pods attached to the agent's bridge, whole, at the
	// start of each stream and whenever it changes.
	Pods *PodsReport `json:"pods,omitempty"`
}

// PodsReport is every pod port on the agent's bridge with the identity
// and addresses its CNI plugin recorded (model.NodePod without
// generation). The controller takes the addresses of the pods bound to
// the node whose UID matches as theirs until the kubelet reports them
// (pkg/compute, SetReportedPods): the pod's CNI ADD waits for its
// admission, which needs its addresses in every node's groups.
type PodsReport struct {
	Pods []model.NodePod `json:"pods,omitempty"`
}

// Hello opens a stream. Epoch and Version name the state the agent already
// holds (from this connection's predecessor or from its state file); both
// empty/zero mean "nothing, send everything".
type Hello struct {
	Epoch   string `json:"epoch,omitempty"`
	Version uint64 `json:"version,omitempty"`
	// Chunks: the agent reassembles Updates sent as Chunks. An agent
	// that does not say so gets every Update in one message, however
	// large (agents older than chunking).
	Chunks bool `json:"chunks,omitempty"`
}

// Report tells the controller what the agent realized.
type Report struct {
	// AppliedVersion is the stream version the agent has applied; the
	// controller derives the agent's lag from it.
	AppliedVersion uint64 `json:"appliedVersion"`
	// Complete says Results cover every policy the agent holds: the
	// controller forgets earlier results of this node for policies not
	// listed (sent after a Full update).
	Complete bool           `json:"complete,omitempty"`
	Results  []PolicyResult `json:"results,omitempty"`
}

// PolicyResult is one policy's realization on the reporting node.
type PolicyResult struct {
	PolicyID string `json:"policyID"`
	// Generation is the policy's model generation (model.Meta.Generation)
	// the result is about.
	Generation int64 `json:"generation"`
	// Error is empty when the generation is realized.
	Error string `json:"error,omitempty"`
}

// ServerMessage is what the controller sends on the Sync stream.
type ServerMessage struct {
	Update *Update `json:"update,omitempty"`
	// Chunk is a piece of an Update too large for one message.
	Chunk *Chunk `json:"chunk,omitempty"`
	// Query forwards a tierctl query to the agent (see AgentQuery). Agents
	// that do not know the field ignore the message; the controller's
	// wait then times out.
	Query *AgentQuery `json:"query,omitempty"`

	// encoded, when set, is the message's encoding, in parts
	// (EncodeUpdateMessages).
	encoded [][]byte
}

// updatePrefix starts the encoding of a ServerMessage holding an Update
// only.
const updatePrefix = `{"update":`

// AgentQuery is a request of the agent's local query API
// (pkg/queryapi/agentquery) forwarded by the controller, so that tierctl
// can ask a node's agent without reaching the node: the agent serves it
// with the same handler as its unix socket and answers with an
// AgentAnswer carrying the same ID.
type AgentQuery struct {
	ID uint64 `json:"id"`
	// Path is the query API's path (e.g. /v1/flows), RawQuery its
	// URL-encoded parameters.
	Path     string `json:"path"`
	RawQuery string `json:"rawQuery,omitempty"`
	// TimeoutMillis is how long the controller waits for the answer; the
	// agent gives up on the request after it too.
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
}

// AgentAnswer is the agent's answer to the AgentQuery with the same ID:
// the HTTP status and JSON body its query API returned.
type AgentAnswer struct {
	ID     uint64 `json:"id"`
	Status int    `json:"status"`
	Body   []byte `json:"body,omitempty"`
}

// Update moves a node's state from version Version-1 to Version (or, when
// Full, replaces it). Within one Update, the order of application is:
// groups (upserts, patches), policies (upserts, deletes), then group
// deletes — so a receiver never sees a policy referencing a group that was
// sent in the same update but not yet applied.
type Update struct {
	Epoch   string `json:"epoch"`
	Version uint64 `json:"version"`
	// Full means: the node's whole state is exactly this update's upserts;
	// drop everything else. Full updates carry no deletes or patches.
	Full bool `json:"full,omitempty"`

	Policies        []*model.Policy `json:"policies,omitempty"`
	DeletedPolicies []string        `json:"deletedPolicies,omitempty"`

	// AppliedToGroups carry only the node's own members.
	AppliedToGroups        []*model.AppliedToGroup `json:"appliedToGroups,omitempty"`
	DeletedAppliedToGroups []string                `json:"deletedAppliedToGroups,omitempty"`

	// AddressGroups are sent whole; AddressGroupPatches change the members
	// of a group the node already holds.
	AddressGroups        AddressGroups       `json:"addressGroups,omitempty"`
	AddressGroupPatches  []AddressGroupPatch `json:"addressGroupPatches,omitempty"`
	DeletedAddressGroups []string            `json:"deletedAddressGroups,omitempty"`

	// NodePods, when set, replaces the node's pods (model.NodePods, ID
	// the node's name; an empty list: none). It comes with every change
	// of the groups up to its entries' generations (see
	// pkg/distribution/server).
	NodePods *model.NodePods `json:"nodePods,omitempty"`

	// Trace times the update's way through the controller, for measuring
	// realization latency stage by stage (the agent keeps it with its own
	// times, see agentquery.UpdateTiming). Optional; it changes nothing.
	Trace *Trace `json:"trace,omitempty"`
}

// Trace is when an update passed the controller's stages, in Unix
// nanoseconds of the controller's clock (0: not known).
type Trace struct {
	// Changed: the engine reported the first change this update carries
	// to the distribution server (the informer event was applied and
	// computed).
	Changed int64 `json:"changed,omitempty"`
	// Queued: the distribution round queued the update for the node.
	Queued int64 `json:"queued,omitempty"`
	// Sent: the node's stream started sending it.
	Sent int64 `json:"sent,omitempty"`
}

// Empty reports whether the update changes nothing.
func (u *Update) Empty() bool {
	return !u.Full && u.NodePods == nil && len(u.Policies) == 0 && len(u.DeletedPolicies) == 0 &&
		len(u.AppliedToGroups) == 0 && len(u.DeletedAppliedToGroups) == 0 &&
		len(u.AddressGroups) == 0 && len(u.AddressGroupPatches) == 0 && len(u.DeletedAddressGroups) == 0
}

// AddressGroupPatch changes the members of an AddressGroup: Upserted
// members replace the member with the same MemberKey (or are added),
// Removed lists MemberKeys to drop.
type AddressGroupPatch struct {
	ID       string              `json:"id"`
	Selector string              `json:"selector,omitempty"`
	Upserted []model.GroupMember `json:"upserted,omitempty"`
	Removed  []string            `json:"removed,omitempty"`
}

// MemberKey identifies a group member across updates: its pod for pod
// members, its node for node members.
func MemberKey(m *model.GroupMember) string {
	if m.Pod != nil {
		return "pod/" + m.Pod.Namespace + "/" + m.Pod.Name
	}
	return "node/" + m.Node
}
