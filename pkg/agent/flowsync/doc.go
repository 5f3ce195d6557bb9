// Package flowsync keeps a bridge's flows equal to the agent's desired set:
// it diffs each new desired set against what it installed and applies the
// whole difference (adds, strict modifies, strict deletes) as one atomic
// OpenFlow bundle, so a packet sees either the old policy or the new one,
// never a mix. Flows are identified the way OpenFlow's strict commands
// identify them, by openflow's Flow.Key (table, priority and match): a flow
// whose key is installed with other actions is modified, one with another
// cookie is added again (replacing it). A producer that knows what changed
// (package policyflows) hands only the changes (SyncChanges; for a named
// part, its flows and groups, SyncPartChanges, as the Service proxy does):
// the bundle and the work are then those of the changes, whatever the
// bridge holds. It
// also runs the agent's start-up
// protocol (a new cookie round: install everything, then delete stale
// rounds in the same bundle) and replays everything when the bridge lost
// its flows.
package flowsync
