package runtime

import (
	"sort"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// sortedPolicies lists st's policies by ID, for deterministic compilation
// input and answers.
func sortedPolicies(st *wire.NodeState) []*model.Policy {
	out := make([]*model.Policy, 0, len(st.Policies))
	for _, p := range st.Policies {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// namedPorts collects each pod's named container ports from the groups
// that list it: the pod's own ports come from the controller (the CNI
// plugin's external_ids carry none).
func namedPorts(st *wire.NodeState) map[model.PodRef][]model.NamedPort {
	out := map[model.PodRef][]model.NamedPort{}
	add := func(m model.GroupMember) {
		if m.Pod == nil || len(m.Ports) == 0 {
			return
		}
		if _, ok := out[*m.Pod]; !ok {
			out[*m.Pod] = m.Ports
		}
	}
	for _, g := range st.AppliedToGroups {
		for _, m := range g.MembersByNode.Get(st.Node) {
			add(m)
		}
	}
	for _, g := range st.AddressGroups {
		for _, m := range g.Members {
			add(m)
		}
	}
	return out
}
