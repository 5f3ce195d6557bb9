// Package runtime is tierflow-agent's top-level wiring: it connects the
// controller stream (pkg/distribution/client, with the on-disk state of
// its statestore) to the dataplane (pkg/agent/realizer on an OVS
// bridge managed through pkg/ovs/ovsdb and pkg/ovs/openflow), and serves
// Prometheus metrics and the local query API (pkg/queryapi/agentquery).
//
// # Start-up order, and why
//
//  0. Serve /healthz, /readyz, /metrics and the query socket, and connect
//     to OVS with backoff: ovs-vswitchd starts with the agent (another
//     container of its pod), and waiting must not look like a dead agent.
//     /readyz succeeds once a complete state is enforced and, in noEncap
//     mode, the pipeline has the gateway.
//  1. Ensure the bridge (create or adopt; fail_mode=secure, so a bridge
//     without flows passes nothing) and start the port watcher, which maps
//     pods to OpenFlow ports from the CNI plugin's interface external_ids.
//  2. Connect OpenFlow and start the realizer: on a bridge holding a previous
//     run's flows those keep enforcing until the first state replaces them
//     atomically; on a fresh bridge a pipeline that classifies no pod is
//     installed (no pod traffic before the first complete state). In
//     noEncap and encap modes the realizer starts with the gateway a
//     previous run left (nodenet.AdoptGateway): the first realization must
//     not drop the gateway's flows while the Node informer syncs, or for as
//     long as the API server is unreachable.
//  3. The noEncap and encap node networks (pkg/agent/nodenet): with the
//     userspace datapath in encap mode, first put back from OVSDB what the
//     agent had moved onto the underlay bridge (the node's address may be
//     its way to the API server); in encap mode read the local Node (retrying
//     until it has pod CIDRs and an InternalIP) and work out the pod MTU,
//     returning an error (the agent stops, NotReady) when it cannot work;
//     then start the node network (gateway, routes or tunnel). Until the
//     Node is read the distribution client does not start: the bridge
//     keeps a previous run's flows, or passes no pod traffic.
//  4. Run the distribution client. It first loads the saved state and
//     applies it as a complete state, before dialling the controller, so an
//     agent (re)starting while the controller is down enforces the last
//     state it received. Then it streams snapshot and deltas; every update
//     is saved to disk before it is applied.
//
// # Realization
//
// The agent holds the node's complete state (policies, applied-to groups,
// address groups) as the distribution client hands it over, and realizes
// all of it at every change — an update from
// the controller, a pod port appearing, changing or leaving, the uplink
// port changing — in one atomic bundle (the realizer diffs against what it
// installed). Nothing is realized before a complete state is known. A failed
// realization leaves the previous flows in place, is reported to the
// controller for every affected policy, and is retried every RetryInterval.
// The realizer's sentinel flow is checked every CheckInterval and after
// OpenFlow reconnections, and everything is replayed when the bridge lost
// its flows (ovs-vswitchd restarted).
//
// Ports are trusted only as far as the CNI plugin vouched for them: a port
// without an OpenFlow number, with an interface error, with identity keys
// that do not parse, or claiming a pod or an address another port claims is
// not classified, so no traffic passes through it (fail closed). Nor is a
// port the state does not admit: the node's pods in the state
// (wire.NodeState.Pods) must list its pod with the port's UID and
// addresses, so a new pod has no connectivity before the policies that
// apply to it, as a subject and as a peer, are computed with it
// (pkg/agent/pipeline/DESIGN.md, "Admission"). Each pod port's admission is
// written to its OVSDB external_ids (tierflow.io/admission), where
// tierflow-cni's ADD waits for it, and the pod ports of the bridge are
// reported to the controller (client.ReportPods), which takes a new pod's
// addresses from them before the kubelet reports them.
//
// Every realization's per-policy outcome is compared with the previous
// one, and the policies whose outcome changed are pushed to the controller
// at once (client.Report): a failure fixed by a retry, or a realization
// broken by a port change, shows in the policy's Realized status without
// waiting for the next update. A failure of the whole realization counts
// for every policy the node holds. A policy left out of a full Admin or
// Baseline table (policyflows: more rules than priorities; its pods are
// isolated instead) is reported failed with why, but that realization
// succeeded and is not retried. The query socket's /v1/realization shows
// the same outcomes.
//
// # Endpoints
//
// /metrics names policies and rules: on a metricsAddress that is not a
// loopback address it answers only Kubernetes tokens allowed to get
// /metrics (pkg/kubeauth: TokenReview and SubjectAccessReview), and the
// agent refuses to start without the API access to check them. /healthz
// and /readyz are open (the kubelet's probes carry no token). The query
// socket is created with mode 0600 in a private directory and renamed into
// place, so it never exists with a wider mode.
//
// # Shutdown
//
// Cancelling Run's context closes the connections and servers. Flows are
// never deleted: the next agent adopts them without a gap.
//
// # Datapath "none"
//
// With Datapath "none" there is no OVS at all: pkg/agent/nodatapath holds
// the state and reports every policy realized as it arrives. It exists to
// run many agents for fan-out tests.
package runtime
