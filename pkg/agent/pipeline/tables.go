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
	Output
	numTables
)

var tableNames = [numTables]string{
	"Classifier", "SpoofGuard", "Conntrack", "ConntrackState",
	"EgressAdmin", "EgressNetworkPolicy", "EgressIsolation", "EgressBaseline", "EgressMetric",
	"Forwarding",
	"IngressAdmin", "IngressNetworkPolicy", "IngressIsolation", "IngressBaseline", "IngressMetric",
	"ConntrackCommit", "Output",
}

// String is the table's name as tooling prints it.
func (t Table) String() string {
	if t < numTables {
		return tableNames[t]
	}
	return fmt.Sprintf("Table%d", uint8(t))
}

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
	for i, n := range tableNames {
		if n == name {
			return Table(i), true
		}
	}
	return 0, false
}
