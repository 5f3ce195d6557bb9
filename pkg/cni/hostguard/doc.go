// Package hostguard keeps a node's own network stack from receiving the
// frames a pod sends on the host end of its veth, when that end is a port
// of an Open vSwitch bridge on the userspace datapath (datapath_type
// "netdev").
//
// Why: the userspace datapath reads a port through a packet socket, which
// gets a copy of each frame but does not take it, so the host's stack
// receives the frame too. With the default arp_ignore=0 the host answers a
// pod's ARP for any of its addresses on that veth, and then takes the
// pod's packets for node addresses (and hostNetwork pods) straight off the
// veth: around the OpenFlow pipeline and every policy in it. A UDP request
// denied by policy still reaches a hostNetwork server, and its reply, sent
// through the bridge, is tracked as a new connection from the host. The
// kernel datapath's receive handler consumes the frame instead, so there
// the stack never sees it.
//
// How: a netdev-family nftables base chain on the ingress hook of the host
// end, policy drop, no rules (table "tierflow-cni", chain "guard-<dev>").
// The ingress hook runs after packet sockets took their copy, so
// ovs-vswitchd still receives every frame, and before ARP and IP. Never
// install it on a kernel-datapath port: that datapath's receive handler
// runs after the ingress hook and would lose every frame.
package hostguard
