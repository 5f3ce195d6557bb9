// Package policyflows compiles the agent's policies (pkg/model Policies,
// AppliedToGroups, AddressGroups) and its node's local pods into the
// OpenFlow flows of the per-tier policy tables declared by package pipeline:
// one conjunctive flow per rule (applied-to pods × peer addresses × ports),
// with priorities allocated dynamically from the policies' evaluation order.
//
// A Compiler keeps rule IDs, conjunction IDs and priorities stable across
// compilations, so an update only changes the flows it has to; package
// flowsync diffs successive compilations into atomic bundles.
package policyflows
