// Package cluster brings up a real Kubernetes cluster on this machine, for
// the tests that install tierflow the way a user does (its images, the
// release manifest, the DaemonSet and the CNI installer) and for manual
// work (`make cluster-up`, `make cluster-down`).
//
// Every node is a Docker container of its own (kind's design, without
// kind: kind asks for --privileged, which this machine cannot grant, as
// CAP_SYS_RESOURCE is outside its capability bounding set). A node has its
// own network namespace and address on a Docker bridge network (.1 of the
// subnet is this machine, nodes start at .11), its own root file system
// (so the DaemonSet's hostPath mounts — /run/openvswitch, /etc/cni/net.d,
// /opt/cni/bin, /var/lib/tierflow — never collide between nodes), /var on
// a volume (containerd's overlayfs snapshots cannot sit on the container's
// own overlayfs) and /run on a tmpfs. It runs, under tini and a small
// supervisor that restarts what exits (node/entrypoint.sh):
//
//   - containerd 1.6 and runc 1.1 from Debian, the CRI plugin with cgroupfs
//     and CNI from the node's /etc/cni/net.d and /opt/cni/bin;
//   - the kubelet and kube-proxy (iptables mode) of k8s.io/kubernetes
//     v1.31.4, built from build/kube;
//   - on the first node only, the control plane: Debian's etcd and
//     kube-apiserver, kube-controller-manager (allocating /24 pod CIDRs from
//     10.244.0.0/16) and kube-scheduler of v1.31.4, as processes. That node
//     is tainted node-role.kubernetes.io/control-plane:NoSchedule, as
//     kubeadm and kind taint it.
//
// What a privileged container would have, the node gets one by one: every
// capability but CAP_SYS_RESOURCE, no seccomp or AppArmor profile,
// writable /proc/sys and /sys, every device (/dev/net/tun for OVS's
// userspace datapath, /dev/kmsg for the kubelet), and this machine's cgroup
// v1 hierarchy, of which each kubelet owns the subtree
// /tierflow-cluster/NODE (cgroupRoot). Without CAP_SYS_RESOURCE no process
// may lower an OOM score: containerd runs with restrict_oom_score_adj, and
// the kubelet and containerd log that they cannot lower their own.
//
// No image can be pulled here, so every image is built on this machine
// from Debian packages (mmdebstrap) and Go modules, and reused while its
// inputs are unchanged (a content label): the node image (bookworm with
// containerd, runc, iptables, etcd; the Kubernetes binaries), pause
// (cmd/pause, the containerd sandbox image), agnhost (tagged as the suites
// name it: 2.43, 2.45, 2.53; its /agnhost is cmd/agnhost-wrapper, which
// runs the real one but keeps `agnhost porter` from failing on SCTP ports
// where the kernel has no SCTP, as here), cyclonus's worker image
// (agnhost with test/cyclonus/cmd/cyclonus-worker as /worker, for
// cyclonus's batch prober), CoreDNS (build/coredns) and the offline
// stand-ins for the bases of tierflow's own Dockerfiles (BaseImage,
// GoImage). Up loads pause, agnhost and CoreDNS into every node's
// containerd (LoadImages, as `kind load docker-image` does; the cyclonus
// suite loads the worker when it runs); tierflow's
// images are loaded the same way by `make cluster-load-images`. The
// kubelets never collect images (the disk is shared; nothing could be
// pulled again).
//
// Cluster DNS is CoreDNS at 10.96.0.10 (coredns.yaml). Its pods, like
// every pod but the host-network ones, wait for a network: nodes are
// NotReady until tierflow is installed. Pods reach "outside the cluster"
// at ExternalIP, an address Up puts on this machine's loopback interface
// (through their node's masquerade and the nodes' default route).
//
// Down removes the node containers and their volumes, the network, each
// node's cgroup subtree, the external address if Up added it, and the
// dockerd Up started, if it did and nothing else runs in it (pruning its
// dangling images, superseded builds, first); images stay. A failed Up
// runs Down. Missing says what a machine lacks for Up (tools, binaries,
// root, cgroup v1, /dev/net/tun, overlayfs, disk space); Lock and
// RemoveStale keep two test processes from colliding on one cluster name,
// and InstallTierflow holds Lock("images") from building tierflow's
// images to loading them into the nodes (their tags are the README's, the
// same in every checkout, in this machine's one Docker).
package cluster
