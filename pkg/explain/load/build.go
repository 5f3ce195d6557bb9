package load

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/services"
)

// Built is what explain evaluates: the model pkg/compute computes from the
// objects, the pods that can be ends of a connection, and the findings to
// show the user.
type Built struct {
	Snapshot  *model.Snapshot
	Inventory *explain.Inventory
	// Conditions are the validation findings of every policy, as
	// "KIND/NAME: Severity Reason: message".
	Conditions []string
	// Excluded maps a pod that cannot be an end of a connection to the
	// reason (see Excluded).
	Excluded map[model.PodRef]string
	// ServicePorts are the Services' ports with their endpoints
	// (pkg/services), NodeAddrs the Nodes' InternalIP and ExternalIP
	// addresses (where NodePorts answer); ServiceWarnings what the
	// Services' reading left out.
	ServicePorts    []services.Port
	NodeAddrs       []netip.Addr
	ServiceWarnings []string
}

// Build runs the objects through the same engine the controller uses, so
// explain evaluates exactly what the controller would compute.
func Build(objs *Objects) (*Built, error) {
	e := compute.New()
	for _, ns := range objs.Namespaces {
		e.UpsertNamespace(ns)
	}
	for _, n := range objs.Nodes {
		e.UpsertNode(n)
	}
	b := &Built{Excluded: map[model.PodRef]string{}}
	for _, p := range objs.Pods {
		e.UpsertPod(p)
		if why := Excluded(p); why != "" {
			b.Excluded[model.PodRef{Namespace: p.Namespace, Name: p.Name}] = why
		}
	}
	for _, np := range objs.NetworkPolicies {
		e.UpsertNetworkPolicy(np)
	}
	for _, anp := range objs.AdminNetworkPolicies {
		e.UpsertAdminNetworkPolicy(anp)
	}
	for _, banp := range objs.BaselineAdminNetworkPolicies {
		e.UpsertBaselineAdminNetworkPolicy(banp)
	}
	for _, cnp := range objs.ClusterNetworkPolicies {
		e.UpsertClusterNetworkPolicy(cnp)
	}
	b.Snapshot = e.Snapshot()
	// Ask per API object rather than per computed policy: an object that
	// produces no policy (a BaselineAdminNetworkPolicy not named "default")
	// has conditions too.
	var refs []model.PolicyRef
	for _, x := range objs.NetworkPolicies {
		refs = append(refs, model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: x.Namespace, Name: x.Name})
	}
	for _, x := range objs.AdminNetworkPolicies {
		refs = append(refs, model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: x.Name})
	}
	for _, x := range objs.BaselineAdminNetworkPolicies {
		refs = append(refs, model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: x.Name})
	}
	for _, x := range objs.ClusterNetworkPolicies {
		refs = append(refs, model.PolicyRef{Kind: model.KindClusterNetworkPolicy, Name: x.Name})
	}
	for _, ref := range refs {
		for _, c := range e.PolicyConditions(ref) {
			b.Conditions = append(b.Conditions, fmt.Sprintf("%s: %s %s: %s", ref, c.Severity, c.Reason, c.Message))
		}
	}
	inv, err := Inventory(objs)
	if err != nil {
		return nil, err
	}
	b.Inventory = inv
	b.ServicePorts, b.NodeAddrs, b.ServiceWarnings = servicePorts(objs)
	return b, nil
}

// servicePorts reads the Services with their EndpointSlices as the agent's
// proxy does, and the nodes' addresses.
func servicePorts(objs *Objects) ([]services.Port, []netip.Addr, []string) {
	var ports []services.Port
	var warnings []string
	for _, svc := range objs.Services {
		p, w := services.Translate(svc, objs.EndpointSlices)
		ports = append(ports, p...)
		warnings = append(warnings, w...)
	}
	var addrs []netip.Addr
	for _, n := range objs.Nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	return ports, addrs, warnings
}
