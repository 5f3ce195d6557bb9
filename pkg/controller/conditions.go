package controller

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/model"
)

// Condition types tierflow writes on AdminNetworkPolicy,
// BaselineAdminNetworkPolicy and ClusterNetworkPolicy status. See
// docs/status.md.
const (
	// ConditionAccepted is True when tierflow computed a policy from the
	// object, False when it ignores the object (a BaselineAdminNetworkPolicy
	// not named "default").
	ConditionAccepted = "Accepted"
	// ConditionValid is True when every part of the policy is enforced as
	// written, False when some part is not (it then fails closed); the
	// reason is the first error's and the message lists every error.
	ConditionValid = "Valid"
	// ConditionWarning is present (True) while there are findings that do
	// not change enforcement, e.g. another policy of the same priority in
	// the same tier; it is removed when the last warning goes away.
	ConditionWarning = "Warning"
)

// managedConditions are the types this controller owns on an object; other
// types (written by someone else) are left alone.
var managedConditions = []string{ConditionAccepted, ConditionValid, ConditionWarning, ConditionRealized}

// maxConditionMessage is metav1.Condition's message limit.
const maxConditionMessage = 32768

var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// desiredConditions computes the managed conditions of an object at
// generation gen. accepted says whether the engine computed a policy from
// it; findings are the engine's; realization is merged when known.
func desiredConditions(accepted bool, findings []model.Condition, gen int64, realization *RealizationSummary) []metav1.Condition {
	var errs, warns []model.Condition
	for _, f := range findings {
		if f.Severity == model.SeverityWarning {
			warns = append(warns, f)
		} else {
			// Unknown severities count as errors: never under-report.
			errs = append(errs, f)
		}
	}
	var out []metav1.Condition
	if !accepted {
		c := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, ObservedGeneration: gen, Reason: "Ignored", Message: "tierflow ignores this object"}
		if len(errs) > 0 {
			c.Reason, c.Message = summarize(errs)
		}
		out = append(out, c)
		if len(warns) > 0 {
			c := metav1.Condition{Type: ConditionWarning, Status: metav1.ConditionTrue, ObservedGeneration: gen}
			c.Reason, c.Message = summarize(warns)
			out = append(out, c)
		}
		return out
	}
	out = append(out, metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: gen, Reason: "Accepted", Message: "tierflow computed a policy from this object"})
	valid := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, ObservedGeneration: gen, Reason: "Valid", Message: "every rule is enforced as written"}
	if len(errs) > 0 {
		valid.Status = metav1.ConditionFalse
		valid.Reason, valid.Message = summarize(errs)
	}
	out = append(out, valid)
	if len(warns) > 0 {
		c := metav1.Condition{Type: ConditionWarning, Status: metav1.ConditionTrue, ObservedGeneration: gen}
		c.Reason, c.Message = summarize(warns)
		out = append(out, c)
	}
	if realization != nil {
		out = append(out, realizedCondition(*realization, gen))
	}
	return out
}

// summarize gives the reason of the first finding (findings come in the
// engine's order: the object's own order) and a message listing all.
func summarize(findings []model.Condition) (reason, message string) {
	reason = findings[0].Reason
	if !reasonPattern.MatchString(reason) {
		reason = "Invalid"
	}
	parts := make([]string, len(findings))
	for i, f := range findings {
		parts[i] = f.Reason + ": " + f.Message
	}
	message = strings.Join(parts, "; ")
	if len(message) > maxConditionMessage {
		message = message[:maxConditionMessage-3] + "..."
	}
	return reason, message
}

// mergeConditions returns current with the managed types replaced by
// desired (keeping lastTransitionTime when a status did not change) and
// managed types not in desired removed, and whether anything changed.
func mergeConditions(current, desired []metav1.Condition, now metav1.Time) ([]metav1.Condition, bool) {
	out := make([]metav1.Condition, len(current))
	for i := range current {
		out[i] = *current[i].DeepCopy()
	}
	changed := false
	want := map[string]bool{}
	for _, d := range desired {
		want[d.Type] = true
		old := meta.FindStatusCondition(out, d.Type)
		if old != nil && old.Status == d.Status && old.Reason == d.Reason && old.Message == d.Message && old.ObservedGeneration == d.ObservedGeneration {
			continue
		}
		if old == nil || old.Status != d.Status {
			d.LastTransitionTime = now
		}
		changed = true
		meta.SetStatusCondition(&out, d)
	}
	for _, t := range managedConditions {
		if !want[t] && meta.RemoveStatusCondition(&out, t) {
			changed = true
		}
	}
	return out, changed
}

func joinFailures(failed map[string]string) string {
	nodes := make([]string, 0, len(failed))
	for n := range failed {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (%s)", n, failed[n])
	}
	return strings.Join(parts, ", ")
}
