// Package cniinstall installs tierflow-cni on a node: it copies the plugin
// binaries into the node's CNI binary directory and writes the network
// configuration list that makes the container runtime use tierflow-cni.
// The DaemonSet's init container runs it (cmd/tierflow-install-cni).
//
// The configuration comes from the agent's (pkg/config.Agent: bridge,
// OVSDB socket, CNI directories, MTU; in encap mode tierflow-install-cni
// puts the MTU pkg/agent/nodenet.PodMTU derives or checks there first)
// plus the node's pod CIDRs, read from
// the Node object's spec.podCIDRs (kube-controller-manager allocates them
// with --allocate-node-cidrs, as kubeadm and kind do). The pod addresses
// are allocated by the host-local IPAM plugin from those CIDRs; its
// default gateway, the first address of each range, is the node's gateway
// on the bridge.
//
// Files are written atomically (temporary file, then rename) so that the
// runtime never reads half a binary or half a configuration. tierflow-cni
// is always replaced (a new image brings a new plugin); host-local and
// loopback are installed only when the node lacks them, because other
// networks on the node may rely on the node's own versions.
package cniinstall
