// Package testbed assembles a simulated Kubernetes cluster whose pods are
// real network namespaces on real OVS bridges:
//
//   - a real control plane from test/kubeapi (etcd, kube-apiserver,
//     kube-controller-manager, kube-scheduler, the network-policy-api CRDs)
//     plus kwok's Exec CRD;
//   - a private Open vSwitch from test/ovsenv: one bridge per node and a
//     "fabric" bridge (NORMAL switching) joined to every node bridge by a
//     patch port, the node's uplink; pods of all nodes share one flat L2
//     network, and tierflow-cni gives them on-link default routes; the
//     host reaches each node's IPv4 pod CIDR on-link through the fabric
//     bridge's interface, which holds the node addresses, so pods and
//     nodes (hostNetwork pods) talk both ways, and only through OVS: the
//     host's stack never sees what a pod sends on its veth (see
//     pkg/cni/hostguard; the userspace datapath would leave it a copy);
//   - kwok (sigs.k8s.io/kwok v0.8.0, built from its module source into
//     _output/bin with one patch: a TTY exec without stdin, as cyclonus
//     probes, crashed the whole kwok process; see EnsureKwok) keeping N Node objects Ready with the node-fast and
//     heartbeat-with-lease stages of its own kustomize/stage directory, and
//     serving `kubectl exec` (--enable-crds=Exec) over TLS on each node's
//     address (the fabric bridge's interface holds the node addresses);
//   - per node, `tierflow-podrunner node` (test/testbed/cmd/tierflow-podrunner,
//     package noderuntime): the
//     kubelet stand-in that attaches each pod with tierflow-cni, runs its
//     servers in its namespace, creates its Exec object and reports its
//     status with the namespace's real addresses.
//
// kwok runs no pod stages: pod status belongs to the node runtimes alone
// (see noderuntime), so kwok never overwrites podIP(s).
//
// Services: the bed runs no kube-proxy. Pods reach Services through
// tierflow's Service proxy (the agents of test/e2e/framework run with
// serviceProxy.enabled), so Services work on the bed only with tierflow's
// agents on it. Start creates the cluster DNS as kubeadm does: the Service
// kube-system/kube-dns at ClusterDNS in front of a pod kube-system/coredns
// (k8s-app=kube-dns) on the first node, which the node runtime serves with
// the agnhost package's DNS stand-in (NAME.NS.svc.cluster.local from a
// watch of the Services, as CoreDNS; no image can run here); every pod's
// network namespace gets a resolv.conf naming ClusterDNS with the
// cluster's search domains, which
// `ip netns exec` (how pods' servers and exec'd commands run) mounts over
// /etc/resolv.conf.
//
// `kubectl exec POD -- /agnhost connect HOST:PORT --timeout=3s
// --protocol=tcp` works because /agnhost on the host is a symlink to
// tierflow-podrunner (created by Start if absent, removed by its cleanup
// when it created it), which enters the pod's namespace named in the Exec
// object's environment.
//
// Exit status: kwok v0.8.0 wraps a failed command's exit error, so the API
// server reports any non-zero exit as an internal error and kubectl exits
// with status 1 (stdout and stderr still stream through, followed by
// kubectl's "error: Internal error occurred: ..." line). agnhost connect
// only uses 0 and 1, so probes see the real outcome; other exit codes are
// not preserved.
//
// Commands other than /agnhost run on the host, in the node's namespaces,
// with the Exec environment (TIERFLOW_NETNS names the pod's namespace):
// kwok has no per-pod command mapping. Use `/agnhost` for probes.
//
// Without an agent, Options.NormalFlows installs a NORMAL flow in each node
// bridge so pods can talk; with an agent, leave it off and give the agent
// the node bridge, its uplink port (Node.UplinkPort) and the OVSDB socket.
//
// Options.Encap brings the bed up for tierflow's encap node network
// instead (encap.go): no fabric and no uplinks; every node its own network
// namespace with its own OVS and a link into a router namespace, each on
// its own subnet; the router drops every packet with a pod address, so
// pods' packets cross it only encapsulated; kube-apiserver reaches kwok at
// the nodes' ExternalIPs; pods get the gateway as default route;
// hostNetwork pods run in the node's namespace on its InternalIP. No
// host-wide lock is taken (every OVS is in its own namespace).
//
// Start(tb, opts) is for tests (everything stops at cleanup); the command
// test/testbed/cmd/tierflow-testbed (make testbed-up / testbed-down) runs
// the same assembly as a long-lived process for demos. The bed's own
// commands, tierflow-testbed and tierflow-podrunner, live under
// test/testbed/cmd: they ship with no release.
package testbed
