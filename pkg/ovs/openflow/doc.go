// Package openflow is tierflow's OpenFlow 1.3 layer over
// github.com/contiv/libOpenflow: the Flow type the agent's pipeline
// produces, its encoding to flow-mods (OXM and Nicira NXM fields,
// conjunction, ct, register load/move, resubmit, goto_table), its one
// rendering in ovs-ofctl syntax (string.go: Flow.String, the text
// `ovs-ofctl --bundle add-flows` accepts; Flow.Key, the table, priority and
// match that identify a flow for strict modify/delete, which the agent
// computes for every desired flow on every update, hence append-based), and
// a Client that installs flows on an Open vSwitch bridge.
//
// Besides flows it handles what the agent's Service proxy needs: select
// groups (group.go; changed in the same atomic bundle as flows, groups
// added before and deleted after the flow changes), conntrack NAT in CT,
// learn (learn.go), set_field and move of the fields an ARP or neighbour
// responder rewrites (fields.go), packet-ins and packet-outs, and
// conntrack flushes by partial tuple (packet.go, OpenFlow NXT_CT_FLUSH of
// OVS 3.1).
//
// Client:
//
//   - connects to a bridge's management socket (unix:RUNDIR/BRIDGE.mgmt) or
//     tcp:HOST:PORT, negotiates OpenFlow 1.3 only, answers and sends echo
//     keep-alives, and reconnects with exponential backoff;
//   - runs Options.OnConnect after every handshake, before other callers may
//     use the new connection, so the owner can replay its flows first;
//     ConnectEvent.FlowsLost says whether the switch lost the flows
//     (ovs-vswitchd restarted): the client keeps a "sentinel" flow (cookie
//     SentinelCookie, priority 0, drop) in Options.SentinelTable (default
//     253, never jumped to) and checks it after each handshake;
//   - applies several changes atomically with an OpenFlow bundle (open, add
//     each flow-mod, barrier, commit — or discard if the switch rejected an
//     add; the adds follow the open without waiting for its reply, checked
//     after the barrier's: two round trips per bundle, since Open vSwitch
//     drops a rejected add yet keeps the bundle open, so a commit sent
//     behind the adds would install the others); a single change is
//     a flow-mod plus barrier. A bundle's adds are
//     encoded while it is sent and written in chunks of many messages, so
//     the switch parses the first while the rest are encoded; they carry
//     consecutive xids, and every error the switch sends is matched by xid
//     to the change that caused it and returned as a *FlowError naming that
//     flow (a *GroupError for a group-mod of ApplyChanges, which streams
//     group and flow changes through the same bundle);
//   - reads flow counters with multipart flow-stats requests filtered by
//     table and cookie/mask, and lists groups;
//   - with Options.OnPacketIn, asks the switch for packet-ins on every
//     connection (a management-socket connection gets none by default)
//     and hands them to one goroutine through a bounded queue, dropping
//     what overflows (the read loop never waits).
//
// Monitor (monitor.go) is an observer on a connection of its own: a flow
// monitor (the ONF extension Open vSwitch serves for OpenFlow 1.3) that
// reports a bridge's flows, then each committed add, delete and modify as
// the switch commits it, with the time it was read and, on a tcp:
// target, the kernel's receive stamp of its arrival (pkg/netstamp).
//
// One goroutine reads the socket and hands each message to the request
// waiting for its xid; libOpenflow's MessageStream is not used because it
// parses on many goroutines and reorders replies.
//
// Fail-closed choices: Flow.Validate (run by every install) rejects flows
// whose fields lack their prerequisites (an IP field without EthType, an L4
// port without IPProto, ...), since OVS would reject them or — worse — an
// ovs-ofctl shorthand would silently widen them; GotoTable must be the last
// action and jump forward; Conjunction cannot be mixed with other actions.
// Empty Actions is an explicit drop.
package openflow
