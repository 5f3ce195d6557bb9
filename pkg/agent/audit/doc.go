// Package audit checks one node's realization (tierctl flows --check):
// the controller's policies for the node against the generations its agent
// holds and enforces, each rule against the action flows the bridge holds
// for it, and the flows the agent installed against the bridge's own dump.
//
// It decides, it does not fetch: the caller brings the controller's
// snapshot, the agent's query API answers (pkg/queryapi/agentquery) and
// the bridge's flows (pkg/ovs/ovsctl). Whether a rule needs flows at all
// is the flow compiler's answer (pkg/agent/policyflows, run on the
// controller's groups and the node's attached pods), not a reading of its
// own: a rule that can match nothing on the node has no action flow to
// miss.
package audit
