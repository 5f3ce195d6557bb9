// Package model holds tierflow's internal policy model: the span-limited
// objects the controller computes from Kubernetes policy APIs and the agent
// turns into OpenFlow flows.
//
// Every policy API (NetworkPolicy, AdminNetworkPolicy,
// BaselineAdminNetworkPolicy, ClusterNetworkPolicy) is reduced to the same
// three kinds of object:
//
//   - Policy: a tier, a priority and ordered rules (direction, action, peers,
//     ports), applied to one or more AppliedToGroups.
//   - AppliedToGroup: the pods a policy applies to, grouped by node, so that
//     each agent receives only the members on its own node.
//   - AddressGroup: the addresses (pod IPs, node IPs) a rule's peers resolve
//     to, with each pod's named container ports.
//
// Besides, NodePods lists each node's pods (UID, addresses) as the
// controller computed them: a node's agent lets a pod's port on its bridge
// send and receive only when the pod is listed there.
//
// Every object carries a stable ID, a generation that increases when its
// content changes, and a span: the set of nodes that need it.
package model
