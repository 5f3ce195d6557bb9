// Package noderuntime is the test bed's stand-in for a kubelet and container
// runtime on one kwok node. kwok keeps the Node objects alive and serves
// `kubectl exec`; this runtime gives every pod bound to its node a real
// network:
//
//  1. a network namespace named NetnsName(pod UID) ("tfpod-" + UID), with lo
//     up;
//  2. tierflow-cni ADD (the real plugin binary, CNI protocol) attaching it
//     to the node's OVS bridge, with the pod's namespace and name in
//     CNI_ARGS so the OVS port carries the pod's identity;
//  3. the pod's servers, run by `tierflow-podrunner serve` inside the
//     namespace (see PodEndpoints: agnhost serve-hostname/porter/netexec
//     and every declared containerPort);
//  4. a kwok Exec object (kwok.x-k8s.io/v1alpha1, owned by the pod) whose
//     environment names the namespace (TIERFLOW_NETNS), so that `kubectl
//     exec POD -- /agnhost ...` runs inside it (see test/testbed/cmd/tierflow-podrunner);
//  5. the pod's status: Running and Ready, podIP/podIPs exactly the
//     addresses tierflow-cni assigned, hostIP the node's address.
//
// kwok runs no pod stages in the test bed: this runtime alone writes pod
// status, so nothing overwrites the IPs, and a pod is Ready only once its
// namespace is attached and its servers listen. Deletion mirrors a kubelet:
// when a pod gets a deletionTimestamp the runtime stops its servers, runs
// CNI DEL, deletes the namespace and the Exec object, and then deletes the
// pod with grace period 0. When the runtime stops (SIGTERM), it tears down
// every pod it attached (API objects are left alone), so a stopped test bed
// leaves no namespace, veth or process behind.
//
// hostNetwork pods get the node's address as pod IP and no namespace; their
// servers run in the host's namespace, which all nodes of the test bed
// share, bound to the node's addresses only. A pod whose attachment fails
// is retried with backoff; the error is logged and recorded as a Warning
// event on the pod.
package noderuntime
