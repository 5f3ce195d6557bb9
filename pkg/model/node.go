package model

import "net/netip"

// NodeGatewayAddress is the address of a node's gateway in a pod CIDR of
// the node: its first address. In routed node networking (the agent's
// noEncap gateway, pkg/agent/nodenet) the node's host stack holds it, so
// pods reach their node by it and the node's own traffic to its pods
// comes from it; IPAM never gives it to a pod. Node peers (the
// AdminNetworkPolicy and ClusterNetworkPolicy "nodes" peer) therefore
// include it. The zero Addr when the CIDR has no room for a gateway and
// a pod (or is not valid).
func NodeGatewayAddress(podCIDR netip.Prefix) netip.Addr {
	if !podCIDR.IsValid() || podCIDR.Bits() > podCIDR.Addr().BitLen()-2 {
		return netip.Addr{}
	}
	return podCIDR.Masked().Addr().Next()
}
