// Package uninstall removes from a node everything tierflow put there,
// once tierflow's DaemonSet is gone: `tierflow-agent cleanup`, which the
// cleanup DaemonSet of manifests/tierflow-cleanup.yaml runs on every node
// after the release manifest was deleted (manifests/README.md,
// "Uninstall").
//
// Why a separate step: a stopping agent cannot tell an uninstall from a
// rolling update or a restart, and in those the node must keep its
// gateway, routes and CNI configuration (pods keep their network while
// the agent is away). So the agent and its OVS container leave everything
// in place when they stop, and uninstalling is an explicit step.
//
// What it removes, in order:
//
//   - in encap mode with the userspace datapath, the node's addresses and
//     routes on the underlay bridge's device (tierflow-phy0): moved back
//     to the network interface they came from, as the bridge's record in
//     OVS's database file says (pkg/agent/nodenet.RevertUnderlayHost). A
//     stopping agent does that itself; one that crashed or was killed
//     leaves them there, on a device OVS no longer serves;
//   - the routes of protocol 0x54 and the nat chain TIERFLOW-POSTROUTING
//     with its jump, IPv4 and IPv6 (pkg/agent/nodenet.Cleanup);
//   - the ports tierflow's OVS created on the host: the bridge's own
//     interface, the gateway and every other internal port its database
//     lists, and the userspace datapath's ovs-netdev device (ovs-vswitchd
//     exits without --cleanup, so their tap devices outlive it); with the
//     kernel datapath, the ports of the openvswitch module's datapath
//     (the whole datapath when every port in it is one of tierflow's);
//   - the netdev nftables table tierflow-cni of the pods' host guards
//     (pkg/cni/hostguard);
//   - the CNI configuration list, tierflow-cni, and the host-local and
//     loopback plugins if they are tierflow's copies
//     (pkg/config/cniinstall.Uninstall);
//   - the directories it is given (the manifest's state, log and OVS run
//     directories).
//
// It refuses to run while tierflow's OVS still answers on its OVSDB
// socket (ErrOVSRunning): the agent would put everything back. Every step
// is idempotent, and every failure is reported after the other steps ran.
//
// Pods that still run on the node keep their addresses but lose their
// network; once tierflow-cni is gone the runtime cannot tear down their
// sandboxes through it. Delete them, or install the next network plugin,
// whose configuration the runtime then uses.
package uninstall
