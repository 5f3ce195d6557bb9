// Package node holds what a node of the real test cluster (test/cluster)
// is made of besides Debian packages and Kubernetes binaries: the node
// container's init script, containerd's configuration, and the templates
// of the kubelet's and kube-proxy's configuration files, which
// test/cluster renders per node into the node's /etc/kubernetes.
package node

import (
	"bytes"
	_ "embed"
	"text/template"
)

// Entrypoint is the node container's init: it prepares the container as a
// node, then runs containerd, the kubelet, kube-proxy and, on the
// control-plane node, etcd and the control plane, restarting any that
// exits.
//
//go:embed entrypoint.sh
var Entrypoint []byte

// ContainerdConfig is /etc/containerd/config.toml of every node.
//
//go:embed containerd.toml
var ContainerdConfig []byte

//go:embed kubelet-config.yaml
var kubeletConfig string

//go:embed kube-proxy-config.yaml
var kubeProxyConfig string

// Settings are what the per-node configuration files depend on.
type Settings struct {
	CgroupRoot  string // the kubelet's cgroup subtree on the shared hierarchy
	ClusterDNS  string // the kube-dns Service's ClusterIP
	ClusterCIDR string // every node's pod CIDRs together
	// ControlPlane taints the node node-role.kubernetes.io/control-plane
	// NoSchedule at registration, as kubeadm does.
	ControlPlane bool
}

// KubeletConfig renders /etc/kubernetes/kubelet-config.yaml.
func KubeletConfig(s Settings) ([]byte, error) { return render(kubeletConfig, s) }

// KubeProxyConfig renders /etc/kubernetes/kube-proxy-config.yaml.
func KubeProxyConfig(s Settings) ([]byte, error) { return render(kubeProxyConfig, s) }

func render(text string, s Settings) ([]byte, error) {
	t, err := template.New("").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = t.Execute(&b, s)
	return b.Bytes(), err
}
