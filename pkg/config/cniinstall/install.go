package cniinstall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/pkg/config"
)

// Names of what is installed.
const (
	// ConflistName sorts before the names other CNI installers commonly
	// use (the runtime takes the first file in name order).
	ConflistName = "10-tierflow.conflist"
	NetworkName  = "tierflow"
	PluginName   = "tierflow-cni"
	CNIVersion   = "1.0.0"
)

// helperPlugins are the plugins installed only when the node has none.
// host-local allocates the pods' addresses; loopback brings up "lo" in
// every pod (container runtimes call it themselves).
var helperPlugins = []string{"host-local", "loopback"}

// conflist is the network configuration list written to the node.
type conflist struct {
	CNIVersion string       `json:"cniVersion"`
	Name       string       `json:"name"`
	Plugins    []pluginConf `json:"plugins"`
}

type pluginConf struct {
	Type        string   `json:"type"`
	Bridge      string   `json:"bridge"`
	OVSDBSocket string   `json:"ovsdbSocket"`
	MTU         int      `json:"mtu,omitempty"`
	IPAM        ipamConf `json:"ipam"`
}

type ipamConf struct {
	Type   string        `json:"type"`
	Ranges [][]rangeConf `json:"ranges"`
}

type rangeConf struct {
	Subnet string `json:"subnet"`
}

// Conflist renders the network configuration list for a node with the
// given pod CIDRs (one per address family at most, as Kubernetes
// allocates them).
func Conflist(agent *config.Agent, podCIDRs []string) ([]byte, error) {
	if len(podCIDRs) == 0 {
		return nil, errors.New("no pod CIDRs")
	}
	ranges := make([][]rangeConf, 0, len(podCIDRs))
	families := map[bool]bool{}
	for _, c := range podCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Masked() != p {
			return nil, fmt.Errorf("pod CIDR %q is not a network address with a prefix length", c)
		}
		// host-local needs a network address, a gateway and at least one
		// pod address besides them.
		if p.Bits() > p.Addr().BitLen()-2 {
			return nil, fmt.Errorf("pod CIDR %q is too small for a gateway and pods", c)
		}
		if families[p.Addr().Is4()] {
			return nil, fmt.Errorf("pod CIDRs %v: more than one per address family", podCIDRs)
		}
		families[p.Addr().Is4()] = true
		ranges = append(ranges, []rangeConf{{Subnet: p.String()}})
	}
	list := conflist{
		CNIVersion: CNIVersion,
		Name:       NetworkName,
		Plugins: []pluginConf{{
			Type:        PluginName,
			Bridge:      agent.BridgeName,
			OVSDBSocket: agent.OVSDBSocketPath(),
			MTU:         agent.CNI.MTU,
			IPAM:        ipamConf{Type: "host-local", Ranges: ranges},
		}},
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// PluginConf is the network configuration a container runtime passes to
// tierflow-cni for the conflist Conflist renders (the single plugin with
// the list's cniVersion and name), with host-local's state in
// ipamDataDir: what a simulated node's runtime hands the plugin.
func PluginConf(agent *config.Agent, podCIDRs []string, ipamDataDir string) ([]byte, error) {
	raw, err := Conflist(agent, podCIDRs)
	if err != nil {
		return nil, err
	}
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Plugins) != 1 {
		return nil, fmt.Errorf("conflist %s: %v", raw, err)
	}
	p := list.Plugins[0]
	p["cniVersion"], p["name"] = list.CNIVersion, list.Name
	if ipam, ok := p["ipam"].(map[string]any); ok && ipamDataDir != "" {
		ipam["dataDir"] = ipamDataDir
	}
	return json.Marshal(p)
}

// Install copies the plugins from sourceDir into agent.CNI.BinDir and
// writes the configuration list into agent.CNI.ConfDir. sourceDir must
// hold tierflow-cni; the helper plugins are copied from it when the node
// lacks them.
func Install(agent *config.Agent, podCIDRs []string, sourceDir string) error {
	conf, err := Conflist(agent, podCIDRs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(agent.CNI.BinDir, 0o755); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(sourceDir, PluginName), filepath.Join(agent.CNI.BinDir, PluginName), 0o755); err != nil {
		return err
	}
	for _, name := range helperPlugins {
		dst := filepath.Join(agent.CNI.BinDir, name)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		if err := copyFile(filepath.Join(sourceDir, name), dst, 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(agent.CNI.ConfDir, 0o755); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(agent.CNI.ConfDir, ConflistName), conf, 0o644)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("installing %s: %w", filepath.Base(dst), err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("installing %s: %w", filepath.Base(dst), err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// rename replaces even a binary the runtime is executing right now:
	// the running process keeps the old inode.
	return os.Rename(tmp.Name(), dst)
}

func writeAtomic(dst string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// NodePodCIDRs reads the node's pod CIDRs, waiting (polling every
// interval) until they are allocated or ctx ends.
func NodePodCIDRs(ctx context.Context, client kubernetes.Interface, nodeName string, interval time.Duration) ([]string, error) {
	var lastErr error
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		switch {
		case err == nil:
			cidrs := node.Spec.PodCIDRs
			if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
				cidrs = []string{node.Spec.PodCIDR}
			}
			if len(cidrs) > 0 {
				return cidrs, nil
			}
			lastErr = fmt.Errorf("node %s has no spec.podCIDRs yet (kube-controller-manager allocates them with --allocate-node-cidrs and --cluster-cidr)", nodeName)
		case apierrors.IsNotFound(err):
			lastErr = fmt.Errorf("node %s does not exist", nodeName)
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			// RBAC will not fix itself while we wait.
			return nil, fmt.Errorf("reading node %s: %w", nodeName, err)
		default:
			lastErr = fmt.Errorf("reading node %s: %w", nodeName, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up: %v)", lastErr, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}
