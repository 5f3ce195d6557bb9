// Package explain says which policy rule decides a connection between two
// pods (or a pod and an address), by evaluating tierflow's internal model
// (model.Snapshot) the way the API texts describe. It is pure: no cluster,
// no OVS. tierctl explain prints its results, and the datapath tests compare
// the flows' behaviour against it.
//
// # Evaluation
//
// Egress is evaluated for the source pod, ingress for the destination pod;
// an end that is a bare address (one no known pod has) has no policies of
// its own. For dual-stack pods the destination's first address for which
// the source has an address of the same family is used, with that source
// address. The verdict is Allow iff both directions allow.
//
// Each direction runs through the tiers:
//
//  1. Admin: policies in model.ComparePolicies order, rules in order. The
//     first matching rule decides: Allow is final (the NetworkPolicy and
//     Baseline tiers are skipped), Deny is final, Pass leaves the Admin tier
//     for the NetworkPolicy tier and is recorded in PassedThrough.
//  2. NetworkPolicy: if some NetworkPolicy-tier policy applying to the pod
//     isolates it in this direction, the connection is allowed iff some rule
//     of such a policy matches (the first one in policy order is reported),
//     otherwise it is dropped by isolation. A pod not isolated goes on.
//  3. Baseline: rules in order; Allow and Deny are final; Pass, or no
//     matching rule, is the default allow.
//
// A rule matches when its policy applies to the pod (the pod is a member of
// one of the policy's AppliedToGroups), the peer address (the source for In
// rules, the destination for Out rules) is in one of its AddressGroups or
// in one of its IPBlocks and in none of that block's excepts, and the
// destination port is in its Ports: empty Ports is every protocol and port;
// a Port with a protocol only is every port of it; Port..EndPort is a
// range; a named port resolves on the destination pod (the applied-to
// member for In rules; for Out rules the address-group member with the
// destination address, or, when the peer matched through an ipBlock, the
// member with that address of the rule's NamedPortGroups — the same data
// the agent resolves from; no such member resolves no name), an empty
// protocol on a named port meaning the
// named port's own protocol. A name the destination pod does not have
// matches nothing.
//
// # Values when no rule decides
//
// These are stable and are part of tierctl's output contract:
//
//	situation           tier                               policy  rule  action      reason
//	a rule decided      Admin, NetworkPolicy or Baseline   set     set   Allow/Deny  Rule
//	isolation drop      NetworkPolicy                      null    null  Deny        Isolation
//	default allow       Baseline                           null    null  Allow       DefaultAllow
//	end is not a pod    None                               null    null  Allow       NotAPod
//	pod to itself       None                               null    null  Allow       Loopback
//
// The isolation drop lists the isolating NetworkPolicies in isolatedBy. The
// default allow is also the outcome of a Baseline-tier Pass (listed in
// passedThrough). "Not a pod" is a bare address that no pod of the
// inventory has; an address that exactly one pod has is that pod.
// "Pod to itself" is a connection whose source and destination are the
// same pod (by name or address): it is carried by the pod's own loopback
// and never reaches the datapath, so it is allowed in both directions.
//
// Not modelled: traffic a node's own host stack sends to its local pods
// from the node's gateway address (kubelet probes; "the traffic source is
// the pod's local node" in the NetworkPolicy text). The datapath lets it
// through before every ingress policy table (pkg/agent/pipeline/DESIGN.md,
// Host traffic); explain has no node inventory and evaluates such an
// address like any other non-pod source. The gateway addresses are in the
// nodes peers explain evaluates (pkg/compute), as the datapath has them.
//
// passedThrough is always present (an empty list when no Pass was taken).
// isolatedBy is present whenever the pod is isolated in that direction, also
// when a NetworkPolicy rule then allowed the connection.
//
// NewEvaluator refuses a snapshot it cannot read unambiguously (a group
// referenced but missing, a NetworkPolicy-tier rule that is not an Allow, a
// numeric port without protocol): a guess there could call allowed what the
// datapath drops, or the reverse.
package explain
