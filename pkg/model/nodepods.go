package model

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/types"
)

// NodePods is the pods of one node as the controller has computed them:
// what the node's agent admits to its bridge. An agent classifies a pod's
// port (lets it send and receive) only when the port's pod, by UID, is
// listed here with the port's addresses: then the applied-to groups the
// agent holds include the pod, and the address groups every node holds
// carry its addresses (see pkg/agent/pipeline/DESIGN.md, "Admission").
type NodePods struct {
	// ID is the node's name.
	Meta
	// Pods are sorted by namespace and name.
	Pods []NodePod `json:"pods,omitempty"`
}

// NodePod is one pod of a node.
type NodePod struct {
	Pod PodRef    `json:"pod"`
	UID types.UID `json:"uid"`
	// IPs are the addresses the pod's group memberships carry (its
	// status, or what its node's agent reported before the kubelet did).
	// Empty while they are not known, or while another pod claims one of
	// them (a reused address whose previous pod is not gone yet): the
	// pod is not admitted then.
	IPs []netip.Addr `json:"ips,omitempty"`
	// Generation is the engine generation at which the pod's identity,
	// addresses and group memberships reached what this entry describes.
	Generation int64 `json:"generation"`
}
