// Package compute is tierflow's policy computation engine: it turns
// Kubernetes objects (Namespaces, Pods, Nodes, NetworkPolicies,
// AdminNetworkPolicies, BaselineAdminNetworkPolicies and
// ClusterNetworkPolicies) into the internal model of package model, and
// keeps that model up to date incrementally as the objects change.
//
// # Use
//
//	e := compute.New()
//	e.Subscribe(func(cs []compute.Change) { ... })   // deltas for distribution
//	e.UpsertNamespace(ns); e.UpsertPod(pod); e.UpsertNode(node)
//	e.UpsertNetworkPolicy(np); e.UpsertAdminNetworkPolicy(anp) ...
//	snap := e.Snapshot()                              // everything, consistent
//	p, ok := e.Policy(id); g, ok := e.AppliedToGroup(id); a, ok := e.AddressGroup(id)
//	conds := e.PolicyConditions(ref)                  // for status and events
//
// Upsert methods take the whole current object (level-triggered, as an
// informer delivers it) and are idempotent: upserting an unchanged object
// changes nothing and notifies nobody. Nil or garbled objects never panic;
// what cannot be enforced as written fails closed and is reported as a
// model.Condition (see PolicyConditions).
//
// # Changes
//
// Subscribe delivers, per engine call, one batch of Change values: which
// Policy, AppliedToGroup and AddressGroup was Added, Updated or Deleted, with
// its new generation. Each object appears at most once per batch. Batches
// arrive in call order, one at a time; subscribers may read the engine
// while handling one. A distribution layer reads the changed objects with
// Policy, AppliedToGroup and AddressGroup and sends them to the nodes in
// their spans (and a Deleted, or an object whose span lost a node, to the
// nodes that had it).
//
// # Identity and sharing
//
// A policy's ID is its UID (KIND/[NAMESPACE/]NAME when the UID is empty).
// A group's ID derives from its normalized selector ("atg-" or "ag-" and a
// 64-bit hash of the selector text shown in the group's Selector field), so
// every policy whose subject or peer normalizes to the same selector shares
// one group: 10,000 identical policies give one applied-to group and one
// address group. Generations come from one engine-wide clock and change
// only when an object's content (members, rules, conditions) changes. A
// change of span alone (a pod of an applied-to group landing on a node that
// group had no pod on) is reported as Updated with the generation kept:
// nothing an agent already holding the object installs has changed, so
// agents' rule caches and their realization reports stay valid; only the
// nodes that receive it differ.
//
// # Batches
//
// Batch applies many object changes as one call, with one batch of Changes
// in which each object appears once. The controller feeds informer events
// through it, so the initial list of 10,000 pods joining a group that
// 10,000 identical policies use does not report those policies once per
// new node. A run of prepared pod upserts in a batch (the controller puts
// a batch's pods last) is applied together: the groups each new pod joins
// are found for the whole run on every core first (that only reads the
// engine), then the pods are applied in order on one.
//
// # Node pods
//
// NodePods (Change kind KindNodePods, ID a node's name) lists a node's pods
// with their UID, addresses and the generation at which each entry took
// its value: what the node's agent admits pod ports by (nodepods.go). An
// entry changes with the pod's UID, node, addresses or an address
// conflict with another pod, in the same call as the group changes that
// go with it. SetReportedPods takes what a node's agent found attached:
// those addresses are the pod's until its status has them.
//
// # Spans
//
// An applied-to group spans its members' nodes; a policy spans its
// applied-to group's nodes; an address group spans the union of the spans
// of the policies using it. Spans are kept with per-node counters, so a pod
// moving between nodes updates only the objects whose span changes.
//
// # Incremental membership
//
// Groups are found through indexes instead of scans: for a pod event, the
// groups of the pod's namespace and the namespace-selector groups are
// looked up by one equality requirement of their selectors (key=value or
// key in (...)); selectors without one are always checked. A new group
// finds its candidate pods, namespaces or nodes through label indexes the
// same way. Model objects are built lazily, on read, and cached until they
// change.
//
// # Memory
//
// The engine holds hundreds of thousands of small sets (a pod's groups, a
// group's pods, policies and users, per-node counts): they are slices
// until they grow past a few elements, maps beyond (index.go). Pods with
// equal labels share one immutable label map (labels.go). Snapshot builds
// the model objects not built yet on every core.
//
// How every API field is read, and how bad input fails closed, is written
// down in SEMANTICS.md in this directory.
//
// # Layers
//
// Translation reads one API object at a time and knows nothing of the
// engine: translate.go (the compiledPolicy it produces, conditions, ports,
// CIDRs), networkpolicy.go and admin.go (one function per API kind) and
// selector.go (parsed selectors and the groupSpecs, normalized selectors,
// that name groups). The engine (engine.go, objects.go, policies.go,
// groups.go, members.go, index.go) stores what translation produced,
// finds the members of every groupSpec, keeps spans and generations, and
// builds the model objects.
package compute
