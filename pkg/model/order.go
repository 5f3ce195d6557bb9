package model

import "strings"

// kindRank breaks priority ties between kinds sharing a tier: in the Admin
// tier an AdminNetworkPolicy is evaluated before a ClusterNetworkPolicy of
// the same priority; in the Baseline tier ClusterNetworkPolicies come before
// the BaselineAdminNetworkPolicy (which has no priority and is evaluated
// last, see ComparePolicies).
func kindRank(k PolicyKind) int {
	switch k {
	case KindAdminNetworkPolicy:
		return 0
	case KindClusterNetworkPolicy:
		return 1
	case KindNetworkPolicy:
		return 2
	case KindBaselineAdminNetworkPolicy:
		return 3
	}
	return 4
}

// ComparePolicies is the evaluation order of policies: by tier, then
// priority (lower first), then kind (see kindRank), namespace and name. The
// order is total and deterministic, so two policies with the same priority
// in one tier are always evaluated in the same order (alphabetical by name),
// and the controller warns on both. The BaselineAdminNetworkPolicy has no
// priority; it is evaluated after every Baseline-tier ClusterNetworkPolicy.
func ComparePolicies(a, b *Policy) int {
	if a.Tier != b.Tier {
		return int(a.Tier) - int(b.Tier)
	}
	ab := a.Source.Kind == KindBaselineAdminNetworkPolicy
	bb := b.Source.Kind == KindBaselineAdminNetworkPolicy
	if ab != bb {
		if ab {
			return 1
		}
		return -1
	}
	if a.Priority != b.Priority {
		if a.Priority < b.Priority {
			return -1
		}
		return 1
	}
	if ra, rb := kindRank(a.Source.Kind), kindRank(b.Source.Kind); ra != rb {
		return ra - rb
	}
	if c := strings.Compare(a.Source.Namespace, b.Source.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Source.Name, b.Source.Name)
}
