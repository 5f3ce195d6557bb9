// Package policyflows compiles the agent's policies (pkg/model Policies,
// AppliedToGroups, AddressGroups) and its node's local pods into the
// OpenFlow flows of the per-tier policy tables declared by package pipeline:
// one conjunctive flow per rule (applied-to pods × peer addresses × ports),
// with priorities allocated dynamically from the policies' evaluation order.
//
// A Compiler keeps rule IDs, conjunction IDs and priorities stable across
// compilations, so an update only changes the flows it has to. It also
// keeps each rule's compiled flows (reused while the rule's fingerprint,
// everything its flows depend on, is unchanged) and its merged output, so
// that CompileChanges reports, and costs, only the flows of the rules whose
// input changed: one policy's change on a bridge of 100,000 flows touches
// that policy's flows, not the bridge's. Package flowsync turns the changes
// into an atomic bundle (SyncChanges), or diffs a whole compilation
// (Compile) against what is installed.
package policyflows
