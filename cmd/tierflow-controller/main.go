// Command tierflow-controller watches Kubernetes policy objects, computes
// tierflow's internal policy model and reports findings as status
// conditions and Events. Replicas elect a leader through a Lease; only the
// leader works.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/controller"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tierflow-controller:", err)
		os.Exit(1)
	}
}

// newCommand binds the command line to pkg/config: flags, TIERFLOW_*
// variables and the --config file (see pkg/config/docs/configuration.md).
func newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "tierflow-controller",
		Short:         "Compute tierflow's policy model from Kubernetes policy objects and report status",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cfg := config.BindController(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o, err := cfg.Load()
		if err != nil {
			return err
		}
		setupLogging(o.SlogLevel())
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, o)
	}
	return cmd
}

// setupLogging sends klog's output through log/slog at the configured
// level; debug also opens klog's verbosity up to 4.
func setupLogging(level slog.Level) {
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	if level <= slog.LevelDebug {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", "4")
	}
}

func run(ctx context.Context, o *config.Controller) error {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "tierflow-controller/" + o.Identity
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	policy, err := npclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	newController := func() (*controller.Controller, error) {
		return controller.New(controller.Config{
			Kube: kube, Policy: policy, Identity: o.Identity,
			CRDPollInterval: o.CRDPollInterval, Workers: o.Workers,
		})
	}
	c, err := newController()
	if err != nil {
		return err
	}
	if o.MetricsAddress != "" {
		ln, err := net.Listen("tcp", o.MetricsAddress)
		if err != nil {
			return fmt.Errorf("metrics address: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", c.MetricsHandler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		// Ready once this replica's informers have synced: only the
		// leader runs them, so the Service sends agents to the leader.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !c.HasSynced() {
				http.Error(w, "not synced (not the leader, or starting)", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "metrics server stopped")
			}
		}()
		defer srv.Close()
	}
	if !o.LeaderElection.Enabled {
		return c.Run(ctx)
	}
	var runErr error
	err = controller.RunWithLeaderElection(ctx, kube, controller.LeaderElection{
		Namespace: o.LeaderElection.LeaseNamespace, Name: o.LeaderElection.LeaseName, Identity: o.Identity,
		LeaseDuration: o.LeaderElection.LeaseDuration, RenewDeadline: o.LeaderElection.RenewDeadline, RetryPeriod: o.LeaderElection.RetryPeriod,
	}, func(ctx context.Context) { runErr = c.Run(ctx) })
	if err != nil {
		// The term is over; exit so the replica restarts with fresh state.
		return err
	}
	return runErr
}
