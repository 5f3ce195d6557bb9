package controller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/model"
)

// RealizationSummary says how far one policy is realized on the nodes that
// need it, as agents report it.
type RealizationSummary struct {
	// Generation is the policy's source generation (metadata.generation of
	// the API object) the counts below refer to.
	Generation int64
	// Realized is the number of nodes that report the policy installed at
	// Generation; Total is the number of nodes in its span.
	Realized, Total int
	// Failed names nodes that reported an error realizing it, with the
	// error, for the message.
	Failed map[string]string
}

// RealizationSource is implemented by the distribution layer, which hears
// from agents. The controller merges its summary into the policy's
// conditions as the Realized condition; when a summary changes the source
// calls Controller.RealizationChanged so the status is rewritten.
type RealizationSource interface {
	// Realization returns the summary for a policy, and false when nothing
	// is known (yet) about it.
	Realization(ref model.PolicyRef) (RealizationSummary, bool)
}

// ConditionRealized is the condition type carrying a RealizationSummary.
const ConditionRealized = "Realized"

// realizedCondition turns a summary into the Realized condition for an
// object at generation gen.
func realizedCondition(s RealizationSummary, gen int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionRealized, ObservedGeneration: gen}
	switch {
	case s.Generation != gen:
		c.Status, c.Reason = metav1.ConditionFalse, "Pending"
		c.Message = fmt.Sprintf("nodes report generation %d, waiting for generation %d", s.Generation, gen)
	case len(s.Failed) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, "Failed"
		c.Message = fmt.Sprintf("%d/%d nodes realized; failed: %s", s.Realized, s.Total, joinFailures(s.Failed))
	case s.Realized < s.Total:
		c.Status, c.Reason = metav1.ConditionFalse, "InProgress"
		c.Message = fmt.Sprintf("%d/%d nodes realized", s.Realized, s.Total)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, "Realized"
		c.Message = fmt.Sprintf("%d/%d nodes realized", s.Realized, s.Total)
	}
	return c
}
