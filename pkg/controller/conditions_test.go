package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/model"
)

func TestMergeConditionsKeepsForeignTypesAndTransitionTimes(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	current := []metav1.Condition{
		{Type: "SomeoneElse", Status: metav1.ConditionTrue, Reason: "X", LastTransitionTime: t0},
		{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", Message: "old", ObservedGeneration: 1, LastTransitionTime: t0},
		{Type: ConditionWarning, Status: metav1.ConditionTrue, Reason: "SamePriority", ObservedGeneration: 1, LastTransitionTime: t0},
	}
	desired := desiredConditions(true, []model.Condition{{Reason: "InvalidCIDR", Severity: model.SeverityError, Message: "bad"}}, 2, nil)
	merged, changed := mergeConditions(current, desired, t1)
	if !changed {
		t.Fatal("no change reported")
	}
	if c := meta.FindStatusCondition(merged, "SomeoneElse"); c == nil {
		t.Error("foreign condition removed")
	}
	if c := meta.FindStatusCondition(merged, ConditionWarning); c != nil {
		t.Error("warning kept after it went away")
	}
	acc := meta.FindStatusCondition(merged, ConditionAccepted)
	if acc == nil || !acc.LastTransitionTime.Equal(&t0) || acc.ObservedGeneration != 2 {
		t.Errorf("Accepted %+v: want transition time kept and generation 2", acc)
	}
	valid := meta.FindStatusCondition(merged, ConditionValid)
	if valid == nil || valid.Status != metav1.ConditionFalse || valid.Reason != "InvalidCIDR" || !valid.LastTransitionTime.Equal(&t1) || !strings.Contains(valid.Message, "bad") {
		t.Errorf("Valid %+v", valid)
	}
	if _, again := mergeConditions(merged, desired, t1); again {
		t.Error("merging the same desired conditions twice reports a change")
	}
	// The input is not modified.
	if current[1].ObservedGeneration != 1 {
		t.Error("mergeConditions modified its input")
	}
}

func TestDesiredConditions(t *testing.T) {
	ignored := desiredConditions(false, []model.Condition{{Reason: "NotDefaultBaseline", Severity: model.SeverityError, Message: "named other"}}, 3, nil)
	if len(ignored) != 1 || ignored[0].Type != ConditionAccepted || ignored[0].Status != metav1.ConditionFalse || ignored[0].Reason != "NotDefaultBaseline" {
		t.Errorf("ignored object: %+v", ignored)
	}
	bad := desiredConditions(true, []model.Condition{{Reason: "not a reason!", Severity: "Fatal", Message: "m"}}, 1, nil)
	v := meta.FindStatusCondition(bad, ConditionValid)
	if v == nil || v.Status != metav1.ConditionFalse || v.Reason != "Invalid" {
		t.Errorf("unknown severity must count as an error with a valid reason: %+v", v)
	}
	realized := desiredConditions(true, nil, 4, &RealizationSummary{Generation: 4, Realized: 2, Total: 3})
	r := meta.FindStatusCondition(realized, ConditionRealized)
	if r == nil || r.Status != metav1.ConditionFalse || r.Reason != "InProgress" || r.Message != "2/3 nodes realized" {
		t.Errorf("realization: %+v", r)
	}
	long := strings.Repeat("x", maxConditionMessage)
	huge := desiredConditions(true, []model.Condition{{Reason: "A", Severity: model.SeverityWarning, Message: long}}, 1, nil)
	if w := meta.FindStatusCondition(huge, ConditionWarning); w == nil || len(w.Message) > maxConditionMessage {
		t.Errorf("message not truncated to %d", maxConditionMessage)
	}
}
