// Command tierflow-agent enforces tierflow's policies on one node: it
// follows the controller's stream of the node's policy state, installs it
// as OpenFlow flows on the node's OVS bridge, reports realization back,
// and serves Prometheus metrics and a local query socket for tierctl. See
// pkg/agent/runtime for what it does in which order.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/agent/uninstall"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tierflow-agent:", err)
		os.Exit(1)
	}
}

// DefaultCtZone is the conntrack zone of the agent's connections.
const DefaultCtZone = 65520

func newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "tierflow-agent",
		Short:         "Enforce tierflow's policies on this node's OVS bridge",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Configuration through pkg/config: flags, TIERFLOW_* variables and
	// the --config file (see pkg/config/docs/configuration.md). The flags
	// below are the agent process's own knobs, not part of the node's
	// configuration file.
	cfg := config.BindAgent(cmd)
	datapath := cmd.Flags().String("datapath", agentquery.DatapathOVS,
		"ovs: program the OVS bridge; none: no datapath, keep the rule cache and report policies realized (fan-out tests)")
	querySocket := cmd.Flags().String("query-socket", agentquery.DefaultSocket, "unix socket of the local query API (tierctl flows/trace); empty disables")
	// Not zone 0: with the kernel datapath OVS's conntrack is the host's
	// netfilter conntrack, and a connection OVS committed in zone 0 before
	// the packet reaches the host through the gateway would be found
	// there already confirmed, so kube-proxy's Service DNAT (applied to
	// new connections only) would never happen. 65520 is also Antrea's.
	ctZone := cmd.Flags().Uint16("ct-zone", DefaultCtZone, "conntrack zone of this node's connections, apart from the host's zone 0 (agents whose bridges share one datapath need different zones)")
	vswitchdCtl := cmd.Flags().String("vswitchd-ctl", "", "ovs-vswitchd's control socket, for traces; empty: found through its pidfile in the OVSDB socket's directory")
	// Simulated clusters run every node's agent on one host, each node's
	// host stack a network namespace of its own.
	nodeNetns := cmd.Flags().String("node-netns", "", "network namespace (a path such as /run/netns/NAME) of the node's host stack, where the noEncap and encap node networks configure the gateway, routes and underlay; empty: the agent's own")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *datapath != agentquery.DatapathOVS && *datapath != agentquery.DatapathNone {
			return fmt.Errorf("invalid --datapath %q: want %s or %s", *datapath, agentquery.DatapathOVS, agentquery.DatapathNone)
		}
		c, err := cfg.Load()
		if err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.SlogLevel()}))
		slog.SetDefault(log)
		a, err := runtime.New(runtime.Options{Config: c, Datapath: *datapath, QuerySocket: *querySocket, CtZone: *ctZone, VswitchdCtl: *vswitchdCtl, NodeNetNS: *nodeNetns, Logger: log})
		if err != nil {
			return err
		}
		// SIGTERM (the kubelet) and SIGINT stop the agent; flows stay.
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return a.Run(ctx)
	}
	cmd.AddCommand(newCleanupCommand())
	return cmd
}

// newCleanupCommand is `tierflow-agent cleanup`: tierflow's uninstall on
// one node (pkg/agent/uninstall), run by manifests/tierflow-cleanup.yaml's
// DaemonSet once the release manifest is deleted.
func newCleanupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove everything tierflow put on this node (after its DaemonSet is gone)",
		Long: `Remove everything tierflow put on this node: the routes of protocol 0x54,
the nat chain TIERFLOW-POSTROUTING, the devices of tierflow's OVS (bridge,
gateway, ovs-netdev; kernel datapath ports), the host guards' nftables
table, the CNI configuration and plugins, and the --remove directories.
It waits (--wait) for tierflow's OVS to stop answering on its OVSDB
socket, and fails if it does not: run it after deleting the release
manifest. It reads the agent's configuration (same --config).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cfg := config.BindAgent(cmd)
	flags := uninstall.BindFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := cfg.Load()
		if err != nil {
			return err
		}
		o := flags.Options(c)
		deadline := time.Now().Add(flags.Wait)
		for {
			removed, err := uninstall.Run(cmd.Context(), o)
			if errors.Is(err, uninstall.ErrOVSRunning) && time.Now().Before(deadline) {
				time.Sleep(2 * time.Second)
				continue
			}
			for _, r := range removed {
				fmt.Fprintln(cmd.OutOrStdout(), "removed", r)
			}
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "node %s: nothing of tierflow's is left\n", c.NodeName)
			}
			return err
		}
	}
	return cmd
}
