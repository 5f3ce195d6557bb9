// Package controller is tierflow-controller's core: it watches the API
// objects policy depends on (Pods, Namespaces, Nodes, NetworkPolicies, and,
// when their CRDs are installed, AdminNetworkPolicies,
// BaselineAdminNetworkPolicies and ClusterNetworkPolicies), feeds every
// change into the incremental engine of package compute, and reports the
// engine's validation findings back to users.
//
// Informer handlers only queue events; one goroutine applies whatever has
// queued up as one compute.Engine.Batch (events of one object coalesce to
// its latest state). A lone event is applied at once; a burst, such as
// the initial lists, is applied in batches, so an object every event
// touches (10,000 policies whose span grows with each pod landing on a new
// node) is computed and reported once per batch, not once per event.
// Within a batch (each event of another object) the pods go last, as one
// run the engine matches to groups on every core.
// HasSynced is true once the initial lists are in the engine, not merely
// queued.
//
// The pods of the initial list reach the engine while they stream in
// (earlyPods, early.go): client-go keeps a streamed list (WatchList) from
// the informer until its end, but runs the pod informer's transform on
// each pod as it arrives, and that transform also queues the pod, in runs
// of maxEventBatch, once 20,000 pods have streamed and the namespaces,
// nodes and NetworkPolicies are in the engine (the pods before are queued
// by their handler events as usual). When the informer then delivers the
// same objects, nothing more is queued; a pod applied early but missing from the final list (a
// stream that broke and was streamed again) is deleted before HasSynced
// turns true. Nothing is published before HasSynced, so the partial state
// is never seen.
//
// Findings on the network-policy-api kinds become status conditions (see
// docs/status.md in this directory for the condition types and when they
// are written); findings on NetworkPolicies, which have no status, become
// Events. Status is written by a rate-limited work queue keyed by policy,
// only when the desired conditions differ from what the object already
// carries, so a steady state makes no writes.
//
// A policy CRD that is missing when the controller starts is looked for in
// discovery every Config.CRDPollInterval; its informer starts once the API
// server serves the kind (which it does only when the CRD is Established).
//
// Only one replica may write: an Elector runs a controller while holding a
// coordination.k8s.io Lease and stops it when the lease is lost. The other
// replicas stand by; the Elector tells them who leads (Holder, where they
// forward tierctl's queries) and whether they could take over
// (StandingBy: they read the Lease within the last lease duration), which
// is what a follower's /readyz reports. The leader points the controller's
// Service at itself (package leaderendpoints).
package controller
