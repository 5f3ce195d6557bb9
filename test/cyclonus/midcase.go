package cyclonus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// MidCaseTags are the tags of the cases whose steps create pods: "Create/
// delete namespace" (pods y-2/a and y-2/b in a new namespace y-2) and
// "Create/delete pod" (x/d).
var MidCaseTags = []string{"create-namespace", "create-pod"}

// MidCasePodsDenied are AdminNetworkPolicies, unknown to cyclonus's model,
// that deny every ingress to the pods cyclonus creates mid-case (x/d and
// namespace y-2's), and to no other pod. With them the MidCaseTags cases
// must fail: their probes of the new pods, which the model allows, are
// dropped — if and only if the probes reach those pods (through their own
// Service's address with service-ip and service-name).
func MidCasePodsDenied() []*anpv1alpha1.AdminNetworkPolicy {
	denyAll := []anpv1alpha1.AdminNetworkPolicyIngressRule{{
		Name: "deny-all", Action: anpv1alpha1.AdminNetworkPolicyRuleActionDeny,
		From: []anpv1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
	}}
	name := func(ns string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	}
	y2 := name("y-2")
	return []*anpv1alpha1.AdminNetworkPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "cyclonus-mid-case-x-d"},
		Spec: anpv1alpha1.AdminNetworkPolicySpec{
			Priority: 1,
			Subject: anpv1alpha1.AdminNetworkPolicySubject{Pods: &anpv1alpha1.NamespacedPod{
				NamespaceSelector: name("x"),
				PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"pod": "d"}},
			}},
			Ingress: denyAll,
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "cyclonus-mid-case-y-2"},
		Spec: anpv1alpha1.AdminNetworkPolicySpec{
			Priority: 2,
			Subject:  anpv1alpha1.AdminNetworkPolicySubject{Namespaces: &y2},
			Ingress:  denyAll,
		},
	}}
}
