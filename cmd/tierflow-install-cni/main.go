// Command tierflow-install-cni installs tierflow-cni on the node it runs on:
// the DaemonSet's init container runs it before the agent starts. It reads
// the agent's configuration (same --config file, TIERFLOW_* variables and
// flags as tierflow-agent), waits for the node's pod CIDRs, copies the
// plugin binaries and writes the CNI network configuration list; see
// package github.com/tierflow/tierflow/pkg/config/cniinstall.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/config/cniinstall"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tierflow-install-cni: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		sourceDir string
		wait      time.Duration
	)
	cmd := &cobra.Command{
		Use:           "tierflow-install-cni",
		Short:         "Install tierflow-cni and its network configuration on this node",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	agentConfig := config.BindAgent(cmd)
	cmd.Flags().StringVar(&sourceDir, "source-dir", "/usr/local/lib/tierflow/cni", "directory holding the tierflow-cni, host-local and loopback binaries to install")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "how long to wait for the node's pod CIDRs to be allocated")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		agent, err := agentConfig.Load()
		if err != nil {
			return err
		}
		if wait <= 0 {
			return fmt.Errorf("--wait must be positive, got %s", wait)
		}
		// --kubeconfig is the agent configuration's (kubeconfig key).
		var restConfig *rest.Config
		if agent.Kubeconfig != "" {
			restConfig, err = clientcmd.BuildConfigFromFlags("", agent.Kubeconfig)
		} else {
			restConfig, err = rest.InClusterConfig()
		}
		if err != nil {
			return fmt.Errorf("kubernetes client configuration: %w", err)
		}
		restConfig.UserAgent = "tierflow-install-cni"
		client, err := kubernetes.NewForConfig(restConfig)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		cidrs, err := cniinstall.NodePodCIDRs(ctx, client, agent.NodeName, 2*time.Second)
		if err != nil {
			return err
		}
		// In encap mode the pods' MTU leaves room for the tunnel: derived
		// from the interface holding the node's InternalIP (this init
		// container shares the node's network namespace), or checked
		// against it; the agent derives the same for the gateway.
		if agent.NodeNetwork.Mode == config.NodeNetworkEncap {
			node, err := waitInternalIP(ctx, client, agent.NodeName, 2*time.Second)
			if err != nil {
				return err
			}
			if agent.CNI.MTU, err = nodenet.PodMTU(agent, node, ""); err != nil {
				return err
			}
		}
		if err := cniinstall.Install(agent, cidrs, sourceDir); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "installed %s in %s and %s in %s for pod CIDRs %s (pod MTU %d)\n",
			cniinstall.PluginName, agent.CNI.BinDir, cniinstall.ConflistName, agent.CNI.ConfDir, strings.Join(cidrs, ","), agent.CNI.MTU)
		return nil
	}
	return cmd
}

// waitInternalIP reads the node, polling every interval until it has an
// InternalIP (the kubelet reports it) or ctx ends: in encap mode the pod
// MTU is derived from the interface holding it.
func waitInternalIP(ctx context.Context, client kubernetes.Interface, name string, interval time.Duration) (nodenet.Node, error) {
	for {
		node, err := nodenet.GetNode(ctx, client, name)
		if err == nil {
			if _, err = nodenet.TunnelEndpoint(node); err == nil {
				return node, nil
			}
		}
		select {
		case <-ctx.Done():
			return nodenet.Node{}, fmt.Errorf("%w (gave up waiting after --wait)", err)
		case <-time.After(interval):
		}
	}
}
