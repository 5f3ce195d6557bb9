// Package realizer is the agent's policy dataplane: it owns one bridge's
// whole pipeline (static flows of package pipeline plus the rule flows of
// package policyflows) and keeps it equal to the agent's latest full state
// through package flowsync — atomically per update, across agent restarts
// (a new cookie round adopts the previous run's flows without a gap) and
// across ovs-vswitchd restarts (a missing sentinel flow triggers a replay).
package realizer
