package cyclonus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// MidCaseTags are the tags of the cases whose steps create or relabel
// pods, one case each: "Create/delete namespace" (pods y-2/a and y-2/b in
// a new namespace y-2), "Create/delete pod" (x/d) and "Update pod so that
// policy applies, then again so it no longer applies" (y/b labeled
// new-label=abc, then not).
var MidCaseTags = []string{"create-namespace", "create-pod", "set-pod-labels"}

// MidCasePodsDenied are AdminNetworkPolicies, unknown to cyclonus's model,
// that deny every ingress to the pods cyclonus creates mid-case (x/d and
// namespace y-2's) and to y/b while it is labeled new-label=abc, and to no
// other pod. With them the MidCaseTags cases must fail: their probes of
// those pods, which the model allows, are dropped — if and only if the
// probes reach those pods (through their own Service's address with
// service-ip and service-name).
func MidCasePodsDenied() []*anpv1alpha1.AdminNetworkPolicy {
	name := func(ns string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	}
	deny := func(policy string, priority int32, subject anpv1alpha1.AdminNetworkPolicySubject) *anpv1alpha1.AdminNetworkPolicy {
		return &anpv1alpha1.AdminNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: policy},
			Spec: anpv1alpha1.AdminNetworkPolicySpec{Priority: priority, Subject: subject,
				Ingress: []anpv1alpha1.AdminNetworkPolicyIngressRule{{
					Name: "deny-all", Action: anpv1alpha1.AdminNetworkPolicyRuleActionDeny,
					From: []anpv1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
				}}},
		}
	}
	pods := func(ns, label, value string) anpv1alpha1.AdminNetworkPolicySubject {
		return anpv1alpha1.AdminNetworkPolicySubject{Pods: &anpv1alpha1.NamespacedPod{
			NamespaceSelector: name(ns),
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{label: value}},
		}}
	}
	y2 := name("y-2")
	return []*anpv1alpha1.AdminNetworkPolicy{
		deny("cyclonus-mid-case-x-d", 1, pods("x", "pod", "d")),
		deny("cyclonus-mid-case-relabeled", 3, pods("y", "new-label", "abc")),
		deny("cyclonus-mid-case-y-2", 2, anpv1alpha1.AdminNetworkPolicySubject{Namespaces: &y2}),
	}
}
