package pipeline

import "fmt"

// Table is one stage of the pipeline. Its value is the OpenFlow table ID.
type Table uint8

// The tables, in pipeline order. A packet only moves forward (goto_table
// requires a higher table ID), so the order here is the order of evaluation.
const (
	Classifier Table = iota
	SpoofGuard
	Conntrack
	ConntrackState
	ServiceNodePort
	ServiceAffinity
	ServiceLB
	ServiceDNAT
	EgressAdmin
	EgressNetworkPolicy
	EgressIsolation
	EgressBaseline
	EgressMetric
	Forwarding
	IngressAdmin
	IngressNetworkPolicy
	IngressIsolation
	IngressBaseline
	IngressMetric
	ConntrackCommit
	HairpinSNAT
	Output
	numTables
)

// miss is what a table does with a packet none of its flows matches: its
// miss flow (priority 0, matching everything) drops it or passes it on to
// the next table.
type miss bool

const (
	missDrop miss = false
	missNext miss = true
)

// tableDecl declares a table: the name tooling prints, and its miss.
type tableDecl struct {
	name string
	miss miss
}

// tables declares every table once, in pipeline order. A policy table
// passes what no rule matched on (its rules decide; no rule means no
// decision); the others drop what they do not recognize.
var tables = [numTables]tableDecl{
	Classifier:     {"Classifier", missDrop}, // unknown ports, and every port before the first sync
	SpoofGuard:     {"SpoofGuard", missDrop}, // what no port may send
	Conntrack:      {"Conntrack", missDrop},  // neither IPv4 nor IPv6
	ConntrackState: {"ConntrackState", missDrop},
	// ConntrackState resubmits a new connection to ServiceNodePort and
	// ServiceAffinity, which only set registers (their misses do nothing),
	// then to ServiceLB, whose flows and miss go on.
	ServiceNodePort:      {"ServiceNodePort", missDrop}, // not for a node address: nothing marked
	ServiceAffinity:      {"ServiceAffinity", missDrop}, // no affinity learned: nothing loaded
	ServiceLB:            {"ServiceLB", missNext},       // no Service frontend
	ServiceDNAT:          {"ServiceDNAT", missNext},     // no endpoint chosen
	EgressAdmin:          {"EgressAdmin", missNext},
	EgressNetworkPolicy:  {"EgressNetworkPolicy", missNext},
	EgressIsolation:      {"EgressIsolation", missNext},
	EgressBaseline:       {"EgressBaseline", missNext}, // no match: allowed
	EgressMetric:         {"EgressMetric", missNext},
	Forwarding:           {"Forwarding", missDrop}, // nowhere to go (no hairpin)
	IngressAdmin:         {"IngressAdmin", missNext},
	IngressNetworkPolicy: {"IngressNetworkPolicy", missNext},
	IngressIsolation:     {"IngressIsolation", missNext},
	IngressBaseline:      {"IngressBaseline", missNext}, // no match: allowed
	IngressMetric:        {"IngressMetric", missNext},
	ConntrackCommit:      {"ConntrackCommit", missNext}, // allowed, nothing to commit: HairpinSNAT
	HairpinSNAT:          {"HairpinSNAT", missNext},     // no hairpin: Output
	Output:               {"Output", missDrop},          // no port chosen
}

// String is the table's name as tooling prints it.
func (t Table) String() string {
	if t < numTables {
		return tables[t].name
	}
	return fmt.Sprintf("Table%d", uint8(t))
}

// missGoesOn says whether a packet no flow of t matches goes on to the
// next table (otherwise it drops).
func (t Table) missGoesOn() bool { return t < numTables && tables[t].miss == missNext }

// ID is the OpenFlow table number.
func (t Table) ID() uint8 { return uint8(t) }

// Tables lists every table in pipeline order.
func Tables() []Table {
	out := make([]Table, numTables)
	for i := range out {
		out[i] = Table(i)
	}
	return out
}

// TableByName finds a table by its printed name.
func TableByName(name string) (Table, bool) {
	for i, d := range tables {
		if d.name == name {
			return Table(i), true
		}
	}
	return 0, false
}
