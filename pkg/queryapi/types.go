package queryapi

import "github.com/tierflow/tierflow/pkg/model"

// Realization is a policy's realization across its span, as agents
// reported it for the policy's current generation.
type Realization struct {
	// SpanNodes is how many nodes need the policy, Realized how many of
	// them enforce its current generation.
	SpanNodes int `json:"spanNodes"`
	Realized  int `json:"realized"`
	// Failed maps a span node to the error it reported.
	Failed map[string]string `json:"failed,omitempty"`
}

// Pending is the number of span nodes that have reported nothing for the
// current generation yet.
func (r Realization) Pending() int { return r.SpanNodes - r.Realized - len(r.Failed) }

// PolicyStatus is one computed policy with its realization.
type PolicyStatus struct {
	*model.Policy
	Realization Realization `json:"realization"`
}

// Policies is /v1/policies.
type Policies struct {
	Policies []PolicyStatus `json:"policies"`
}

// Error is the body of every non-200 answer.
type Error struct {
	Error string `json:"error"`
}
