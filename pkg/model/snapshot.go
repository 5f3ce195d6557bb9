package model

// Snapshot is a consistent view of every computed object: what explain
// evaluates, and what the distribution layer filters by span.
type Snapshot struct {
	Policies        []*Policy                  `json:"policies"`
	AppliedToGroups map[string]*AppliedToGroup `json:"appliedToGroups"`
	AddressGroups   map[string]*AddressGroup   `json:"addressGroups"`
	// NodePods, by node name: nodes without pods have none.
	NodePods map[string]*NodePods `json:"nodePods,omitempty"`
}
