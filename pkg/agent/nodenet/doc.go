// Package nodenet is the agent's node networking for real clusters
// (config nodeNetwork.mode noEncap or encap): how a node's pods reach
// everything that is not a pod of the same node, and how the rest of the
// cluster reaches them, without encapsulation (noEncap) or through a
// Geneve or VXLAN tunnel between the nodes' InternalIPs (encap, see
// "Encap" below).
//
// # What it sets up
//
//   - Gateway: an OVS internal port (nodeNetwork.gatewayName, default
//     tierflow-gw0) on the agent's bridge. Its Linux interface owns the
//     first address of each of the node's pod CIDRs with the CIDR's length
//     (10.244.1.1/24, and fd00:10:244:1::1/64 on a dual-stack node; IPv6
//     without duplicate address detection), has the pods' MTU (cni.mtu;
//     0 leaves the default) and is up. The host therefore has a connected
//     route to its own pods through the gateway. tierflow-install-cni's
//     configuration gives pods host-local addresses from the same CIDRs
//     and a default route via that same first address, so a pod sends
//     everything off its own subnet to the gateway.
//   - Routes: for every other Node, a kernel route "podCIDR via
//     InternalIP" per address family (main table, protocol RouteProtocol
//     0x54, so `ip route show proto 0x54` lists exactly the agent's routes).
//     Routes of Nodes that went away or changed are removed; routes of any
//     other protocol are never touched.
//   - IP forwarding on for the families of the node's pod CIDRs (already on
//     on Kubernetes nodes; where it is off and /proc/sys is read-only, as
//     in an unprivileged container, the sync fails with a clear error).
//
// The agent's OpenFlow pipeline (pkg/agent/pipeline, see its DESIGN.md)
// gets the gateway's OpenFlow port and addresses through Options.OnGateway
// and rebuilds itself: the gateway is classified as a trusted source,
// everything from a local pod that is not for a local pod goes to it, and
// it reaches local pods like any other source. Path of a packet between
// pods of two nodes: pod → OVS (egress policy of the source pod) →
// gateway → host kernel → route via the other node's InternalIP → that
// node's kernel → its gateway → OVS (ingress policy of the destination
// pod) → pod. The host kernel resolves MAC addresses on both sides (ARP
// and neighbour discovery pass through the bridge). Replies of connections
// that came in through the gateway go back through it (MAC rewritten to
// the gateway's), so the host can undo a Service DNAT to a pod of its own
// node.
//
// # Where it works
//
// noEncap needs every node's InternalIP to be directly reachable from
// every other node (L2-adjacent nodes, as kind's nodes on one docker
// network), or an underlay that itself routes the pod CIDRs to the right
// nodes. A route whose next hop is not on a connected network is refused
// by the kernel; the error is logged and retried, and that node's pods are
// unreachable (nothing else is affected).
//
// # Sources of truth and bad input
//
// Everything comes from Node objects, watched with the agent's own
// credentials (RBAC: get, list, watch on nodes; nothing else). Each sync
// is level-triggered from the informer's complete view, on every Node
// event and every Options.Resync (30s) so routes or addresses changed
// behind the agent's back are repaired. Failures are retried every
// Options.RetryInterval. Bad input never opens a path:
//
//   - The local Node missing, without spec.podCIDRs, or with a malformed,
//     host-bits-set, too small (no room for gateway and a pod) or
//     duplicate-family CIDR: the sync fails with that error and changes
//     nothing — no gateway is created, so the pipeline has none and pods
//     reach only pods of their own node.
//   - Another Node with such CIDRs, or without an InternalIP of a family,
//     gets no route (of that family); a Node whose pod CIDR overlaps this
//     node's (it would divert local pods' traffic) or another Node's (two
//     nodes claiming one address: neither is routed, never a guess) gets
//     none either. Each is logged as "node not routed".
//   - The gateway port cannot be created (e.g. a device with its name
//     exists): ovs-vswitchd reports the error, the port is removed again
//     so the next attempt can succeed, and the pipeline has no gateway
//     until then.
//
// # Restarts
//
// Everything is idempotent: a restarted agent adopts the existing port
// (same OpenFlow port), addresses and routes, and changes only what
// differs. Stopping the agent leaves gateway and routes in place, as it
// leaves flows in place, so a rolling update does not cut the node off.
// The agent's pipeline does not wait for the first sync either:
// AdoptGateway reads the gateway the previous run left (its port from
// OVSDB, its addresses and MAC from the kernel) before the agent applies
// anything, so its first realization (the saved state, while the
// controller or the API server may be unreachable) keeps the gateway's
// flows; the first sync then corrects what changed.
//
// # Encap
//
// With Options.Encap the gateway and the masquerade chain are as above,
// and instead of routes via InternalIPs:
//
//   - Tunnel: an OVS port (EncapOptions.TunnelName, default
//     tierflow-tun0) of type geneve or vxlan with options:remote_ip=flow:
//     the pipeline sets each packet's outer destination (tun_dst) from its
//     destination's pod CIDR, and accepts a packet from the tunnel only
//     from a known node's endpoint for that node's pod CIDRs (see the
//     pipeline's DESIGN.md, "Encap mode"), or from its InternalIPs (the
//     connections its host forwards after the nat chain SNATed them to
//     its InternalIP; the replies go back through the tunnel). The peers
//     (Node name, InternalIP, pod CIDRs, InternalIPs claimed by no other
//     node) go to the pipeline through
//     EncapOptions.OnTunnel on every change: a node joining is reachable,
//     and a node leaving forgotten, without restarting any agent.
//   - Endpoint: each node tunnels from its IPv4 InternalIP, else its IPv6
//     one (TunnelEndpoint); a peer without an InternalIP of that family,
//     or sharing its InternalIP with another node, gets no tunnel (logged
//     as "node not routed").
//   - Host routes: for every peer's pod CIDR "CIDR via GW dev
//     tierflow-gw0 onlink" (GW: that CIDR's first address, the peer's
//     gateway) and a permanent neighbour entry GW → RemoteGatewayMAC on
//     the gateway, so the node itself (kubelet, hostNetwork pods, kube-proxy
//     forwarding a Service to another node's pod) reaches other nodes'
//     pods through the tunnel; its packets carry the gateway's address as
//     source, and policy on the destination node sees that address.
//   - MTU: PodMTU, used by the agent for the gateway and by
//     tierflow-install-cni for the pods: cni.mtu, or by default the MTU of
//     the interface holding the node's InternalIP minus EncapOverhead (50
//     bytes over IPv4, 70 over IPv6, Geneve and VXLAN alike). A configured
//     value that does not fit, or a result below the pods' families'
//     minimum, stops both at start with the reason, before anything is
//     created. Encapsulated packets carry DF (OVS's default), so the pod
//     MTU is what keeps them whole.
//
// With the kernel datapath the host's stack routes the encapsulated
// packets. OVS's userspace datapath (datapathType netdev) tunnels only
// through an OVS bridge whose own interface holds the node's address
// (it routes with its copy of the kernel's routes, `ovs-appctl
// ovs/route/show`, resolves next hops itself, `tnl/neigh/show`, and takes
// tunnel packets in when a bridge delivers them to its own interface).
// EncapOptions.UnderlayBridge (config nodeNetwork.underlayBridge, default
// tierflow-phy0) is that bridge: if the InternalIP is not already on a
// netdev bridge's own interface, the agent creates the bridge (standalone,
// a learning switch, with the interface's MAC address and MTU), gives its
// interface the addresses and routes of the interface holding the
// InternalIP, removes them there, guards that interface against the host's
// stack (package pkg/cni/hostguard: ovs-vswitchd reads it with a packet
// socket) and makes it a port of the bridge. What was moved is recorded
// in the bridge's external_ids (UnderlayKey), from which every sync
// restores it, and so does the agent when it starts (RestoreUnderlay),
// before it needs the API server: the bridge's interface (a tap device
// of ovs-vswitchd) keeps its addresses across a plain restart of
// ovs-vswitchd, but not when it is re-created (ovs-vswitchd stopped with
// `exit --cleanup`, the bridge deleted). A stopping agent moves everything
// back to the interface and deletes the bridge (RevertUnderlay): it stops
// with its pod, whose OVS stops too, and the node keeps its network while
// OVS is away (a rolling update, or for good: an uninstall); the next
// agent moves it again. The node's traffic is dropped for a few
// milliseconds each time the addresses move, and pods' traffic while OVS
// is down. Taking an address off an interface makes the kernel drop the
// conntrack entries MASQUERADE made with it there, which would reset the
// node's connections through Services (kube-proxy masquerades the host's
// traffic to ClusterIPs: host-network pods', such as the controller's to
// the API server) and its pods' masqueraded ones: before each move the
// agent re-creates the established TCP ones as plain NAT entries with the
// same translation, which the kernel keeps (conntrack.go). A DHCP client or
// network manager that owns the interface must be told to manage the
// bridge's interface instead. Frames reaching the interface must carry
// full checksums and be no larger than its MTU: the userspace datapath
// neither completes checksums a sender left to offload nor segments
// oversized TCP frames, which a veth (a container as a node: kind, Docker)
// passes on as the sending stack made them. There no sender may
// offload: TX checksum offload (and with it segmentation offload) off on
// the network's bridge (for what the host sends) and on every node's
// interface (for what nodes whose agent has not moved it yet send);
// test/cluster does both for its Docker network.
//
// # Not done here
//
// Uninstalling is not the running agent's job: Cleanup removes the routes
// and the agent's chains (nat MasqueradeChain, raw SpoofChain) for
// pkg/agent/uninstall (`tierflow-agent cleanup`), which also removes the
// gateway and tunnel ports' devices with the bridge's. The underlay bridge
// is gone by then: the stopping agent moved the node's address back (see
// "Encap"); after an agent that did not stop cleanly the uninstall moves
// it back from the record in OVS's database file (RevertUnderlayHost). An agent whose configuration has no underlay (another
// nodeNetwork.mode, or the kernel datapath) also moves back what a record
// says was moved (an agent that did not stop cleanly).
//
// # NAT and spoofed sources
//
// The nat chain MasqueradeChain, jumped to first from POSTROUTING (the
// jump is moved back to the top at every sync), first SNATs to the node's
// InternalIP the connections the host forwards into the gateway that
// kube-proxy marked for masquerading (Options.KubeProxyMasqueradeBit):
// kube-proxy's own MASQUERADE would give them the gateway's address, which
// the pipeline trusts as the node itself (pkg/agent/pipeline/DESIGN.md,
// "Host traffic"). With Options.Masquerade (config
// nodeNetwork.masquerade, on by default) it then lets traffic to any
// Node's pod CIDRs keep its pod source address and masquerades what local
// pods send elsewhere out of the node (not back through the gateway): the
// internet and the nodes' upstream DNS server have no route to pod CIDRs.
//
// The raw chain SpoofChain, jumped to first from PREROUTING, drops
// packets with a source of this node's pod CIDRs that do not come out of
// the gateway, and packets with a source of another node's pod CIDR that
// do not arrive on the interface of the route to that node: the host
// would forward them into the gateway as if a pod had sent them. That a
// packet from another node's pod CIDR arriving on the node network was
// sent by that node cannot be checked: noEncap trusts the node network.
//
// Chains are rewritten only when their rules differ. They use the
// iptables command (the agent image's is nft).
//
// Options.NetNS lets one process manage several simulated nodes' network
// namespaces (tests): netlink operations use a handle in that namespace,
// and /proc/sys is written from a thread moved into it.
package nodenet
