// Package leaderendpoints makes the controller's Service lead to the
// leading replica, and lets the other replicas find the leader through it.
//
// The Service (manifests/parts/30-controller.yaml) has no selector, so
// Kubernetes' EndpointSlice controller leaves it alone: with a selector it
// would list every Ready replica, and since followers are Ready too (they
// stand by), agents would land on followers half of the time. Instead the
// leader's Publisher writes the Service's EndpointSlices itself, one per
// address family of its own addresses (the pod's status.podIPs; the pod is
// on the host network, so they are its node's), named SERVICE-ipv4 and
// SERVICE-ipv6, labelled kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by=tierflow-controller.tierflow.io,
// owned by the Service (deleting it deletes them), with one endpoint whose
// targetRef names the leader's pod (its Lease holder identity) and the
// ports the leader listens on (agents, query).
//
// Only the leader writes, and only while it leads: a replica that loses
// the Lease exits. A leader that dies leaves its slices behind; agents
// retry against the dead address until the next leader overwrites them,
// which it does as soon as it leads. The Publisher watches the slices of
// its Service and writes again whenever they differ from what it wants
// (someone edited or deleted them, the Service was recreated), so a steady
// state makes no writes; it deletes its slice of a family it has no
// address of (the previous leader was dual-stack, this one is not).
//
// RBAC: get, list, watch and create endpointslices in the Service's
// namespace; update and delete only the two names SliceNames returns; get
// of the Service itself (its UID for the owner reference).
//
// Find is the followers' side: the address of a port of the leader, read
// from the slices and accepted only from the endpoint whose targetRef is
// the current Lease holder, so a slice a dead leader left behind is never
// taken for the new leader's.
package leaderendpoints
