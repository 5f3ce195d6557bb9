// Package cni implements tierflow-cni, the CNI plugin that attaches a pod's
// network namespace to the node's Open vSwitch bridge.
//
// ADD creates a veth pair (container end named by CNI_IFNAME, host end named
// deterministically from the container ID and interface name, so that DEL
// finds it even when the namespace is already gone), turns TX checksum
// offload off on both ends (the userspace datapath's conntrack would
// otherwise see TCP segments with partial checksums and mark them invalid),
// asks the IPAM delegate named in the config (normally host-local) for the
// addresses, configures them with a default route per address family via
// the IPAM gateway (or on-link ones, see NetConf.DefaultRoute), with IPv6
// duplicate address detection off (the IPAM plugin guarantees uniqueness,
// and DAD would leave addresses unusable for a second or more after ADD),
// on a userspace-datapath bridge (datapath_type "netdev") keeps the host's
// own stack from receiving the pod's frames on the host end (package
// hostguard: otherwise the host answers the pod's ARP for node addresses on
// the veth and takes its packets around OVS and every policy),
// and adds the host end to the bridge as an OVS port whose
// Interface external_ids tell the agent which pod it belongs to (namespace,
// name and UID). It then waits until the agent admits the pod (the agent
// writes tierflow.io/admission=admitted once the policies that apply to the
// pod are installed with it; pkg/agent/pipeline/DESIGN.md, "Admission"), at
// most admissionTimeout; past it ADD fails with ErrNotAdmitted and the
// agent's reason, so the kubelet reports it and retries. Any failure after
// the first side effect rolls everything back, so a pod is never left half
// attached.
//
// DEL undoes ADD and is idempotent: a missing namespace, veth, port, guard
// or allocation is not an error. CHECK verifies the veth pair, the addresses
// and routes of the previous result, the OVS port with its external_ids and,
// on a userspace-datapath bridge, the host guard.
// STATUS reports whether the bridge is reachable.
//
// Network configuration:
//
//	{
//	  "cniVersion": "1.0.0",
//	  "name": "tierflow",
//	  "type": "tierflow-cni",
//	  "bridge": "br-int",                      // required, must exist
//	  "ovsdbSocket": "/run/openvswitch/db.sock", // default; "unix:" prefix optional
//	  "mtu": 1450,                             // optional, 68..65535
//	  "defaultRoute": "via-gateway",           // or "on-link" (see NetConf)
//	  "admissionTimeout": "30s",               // default; "0s": do not wait (no agent)
//	  "ipam": {"type": "host-local", ...}       // required
//	}
//
// The pod's namespace, name and UID come from the Kubernetes CNI_ARGS
// (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID, which containerd and
// CRI-O pass); a pod named without its UID is refused. When no pod is
// named the external_ids carry no pod keys, the agent treats the port as
// not belonging to a pod, and ADD does not wait.
//
// Errors are CNI errors: 4 for missing/invalid CNI_ARGS, 6 for JSON that
// cannot be decoded, 7 for an invalid configuration, 8 for a missing or
// invalid network namespace, 11 when the bridge does not exist (yet: the
// agent creates it), and the plugin-specific codes ErrIPAM (100), ErrOVS
// (101) and ErrNotAdmitted (102); see errors.go.
package cni
