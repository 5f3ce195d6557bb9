// Package ovsdb manages tierflow's Open vSwitch bridge through ovsdb-server
// (github.com/ovn-org/libovsdb): it creates or adopts the bridge
// (datapath_type system or netdev, fail_mode=secure, OpenFlow 1.3+), adds and
// removes ports (system/veth, internal, patch), sets interface external_ids,
// and watches the Interface table to map pods to OpenFlow port numbers.
//
// Every change waits, like ovs-vsctl, until ovs-vswitchd has applied it
// (next_cfg/cur_cfg), unless Options.NoWait is set.
//
// Every call that takes a context returns when that context ends, with its
// error, even while the client reconnects to an ovsdb-server that is gone
// or hangs (libovsdb v0.7.0 alone can block past it: see Client.bounded);
// Close ends the calls still running with ErrClosed. Reads (Bridge,
// Interface, PortBridge, BridgeInterfaces, the ports a new Watcher
// starts with) answer from the monitored cache as it is, at once, also
// while the client reconnects: the rows ovsdb-server last sent.
//
// # Interface external_ids (contract with the CNI plugin)
//
// The CNI plugin sets these on the OVS Interface of each pod it attaches;
// the agent reads them through a Watcher:
//
//	tierflow.io/pod-namespace  the pod's namespace (required with pod-name)
//	tierflow.io/pod-name       the pod's name
//	tierflow.io/pod-ips        comma-separated addresses, no prefix length: "10.0.0.5,fd00::5"
//	tierflow.io/pod-mac        MAC of the pod's interface: "0a:58:0a:00:00:05"
//	tierflow.io/pod-uid        the pod's metadata.uid (the agent admits the port for that pod only)
//	tierflow.io/role           "uplink" on the uplink/underlay port (and no pod keys)
//
// and the agent answers on the same row:
//
//	tierflow.io/admission      "admitted" once the pod is policed, else "pending: <why>"
//
// An interface with neither pod-name nor role is ignored. Keys that do not
// parse (bad address or MAC, pod-name without pod-namespace, unknown role)
// make the watcher drop the interface and list it in Watcher.Invalid: the
// agent then has no port for that pod, so no flow can allow traffic to or
// from addresses nobody vouched for (fail closed).
//
// A pod's ofport is 0 until ovs-vswitchd assigns one; the watcher reports
// the assignment as a PortUpdated event (Event.OFPortAssigned).
//
// After a reconnection to an ovsdb-server that did not know the client's
// last transaction (it restarted), libovsdb refills its cache without
// delete events; the watcher then resyncs with the cache, so ports deleted
// meanwhile are reported as PortRemoved (and changed ones as PortUpdated).
package ovsdb
