// Command tierflow-controller watches Kubernetes policy objects, computes
// tierflow's internal policy model and reports findings as status
// conditions and Events. Replicas elect a leader through a Lease; only the
// leader works.
package main

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/tierflow/tierflow/pkg/controller"
)

type options struct {
	kubeconfig      string
	leaderElect     bool
	leaseNamespace  string
	leaseName       string
	identity        string
	metricsAddress  string
	crdPollInterval time.Duration
	workers         int
}

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tierflow-controller:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	host, _ := os.Hostname()
	o := options{
		leaderElect:     true,
		leaseNamespace:  envOr("POD_NAMESPACE", "kube-system"),
		leaseName:       "tierflow-controller",
		identity:        envOr("POD_NAME", host),
		metricsAddress:  ":9464",
		crdPollInterval: 10 * time.Second,
		workers:         2,
	}
	cmd := &cobra.Command{
		Use:           "tierflow-controller",
		Short:         "Compute tierflow's policy model from Kubernetes policy objects and report status",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "kubeconfig file; empty means in-cluster configuration")
	f.BoolVar(&o.leaderElect, "leader-elect", o.leaderElect, "elect a leader through a Lease so several replicas are safe")
	f.StringVar(&o.leaseNamespace, "leader-elect-namespace", o.leaseNamespace, "namespace of the leader-election Lease")
	f.StringVar(&o.leaseName, "leader-elect-name", o.leaseName, "name of the leader-election Lease")
	f.StringVar(&o.identity, "id", o.identity, "this replica's identity (Lease holder, status field manager)")
	f.StringVar(&o.metricsAddress, "metrics-address", o.metricsAddress, "address serving Prometheus metrics on /metrics; empty disables")
	f.DurationVar(&o.crdPollInterval, "crd-poll-interval", o.crdPollInterval, "how often to look for network-policy-api CRDs installed after start")
	f.IntVar(&o.workers, "workers", o.workers, "concurrent status writers")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, o options) error {
	if o.identity == "" {
		return errors.New("--id is empty and the hostname is unknown")
	}
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "tierflow-controller/" + o.identity
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
			Kube: kube, Policy: policy, Identity: o.identity,
			CRDPollInterval: o.crdPollInterval, Workers: o.workers,
		})
	}
	c, err := newController()
	if err != nil {
		return err
	}
	if o.metricsAddress != "" {
		ln, err := net.Listen("tcp", o.metricsAddress)
		if err != nil {
			return fmt.Errorf("metrics address: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", c.MetricsHandler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "metrics server stopped")
			}
		}()
		defer srv.Close()
	}
	if !o.leaderElect {
		return c.Run(ctx)
	}
	var runErr error
	err = controller.RunWithLeaderElection(ctx, kube, controller.LeaderElection{
		Namespace: o.leaseNamespace, Name: o.leaseName, Identity: o.identity,
	}, func(ctx context.Context) { runErr = c.Run(ctx) })
	if err != nil {
		// The term is over; exit so the replica restarts with fresh state.
		return err
	}
	return runErr
}
