// Package realizer is the agent's policy dataplane: it owns one bridge's
// whole pipeline (static flows of package pipeline plus the rule flows of
// package policyflows) and keeps it equal to the agent's latest full state
// through package flowsync — atomically per update, across agent restarts
// (a new cookie round adopts the previous run's flows without a gap) and
// across ovs-vswitchd restarts (a missing sentinel flow triggers a replay).
//
// An update is given the agent's whole state but installs, and costs, only
// what changed: the compiler's changes (the flows of the rules whose input
// changed, policyflows.Compiler.CompileChanges) and, when the pods or the
// configuration changed, the static flows' (a few per pod), as one bundle
// (flowsync.Syncer.SyncChanges). After an
// update the bridge refused, whose changes the compiler already made its
// own, the next update syncs every flow against what is installed.
package realizer
