// Command tierflow-controller is tierflow's control plane: it watches
// Kubernetes policy objects, computes tierflow's internal policy model,
// streams each agent its node's share of it, and reports findings and
// realization as status conditions and Events. Replicas elect a leader
// through a Lease; only the leader computes, serves agents and writes.
//
// Configuration comes from pkg/config (flags, TIERFLOW_* variables and the
// --config file). Endpoints:
//
//   - agentListenAddress: the distribution service (gRPC over TLS), for
//     agents authenticated by their service account tokens.
//   - metricsAddress: /metrics (Prometheus), /healthz (the process is up),
//     /readyz (this replica leads and its caches are synced: a Service
//     routes agents to the leader only).
//   - queryAddress: the query API for tierctl (pkg/queryapi): HTTPS with
//     the agents' serving certificate, every request authenticated by its
//     Kubernetes bearer token (TokenReview) and authorized by a
//     SubjectAccessReview (get on tierflow.io/queries).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/statusbridge"
	"github.com/tierflow/tierflow/pkg/queryapi"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tierflow-controller:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "tierflow-controller",
		Short:         "Compute tierflow's policy model, serve it to agents and report status",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cfg := config.BindController(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := cfg.Load()
		if err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.SlogLevel()}))
		slog.SetDefault(log)
		// client-go logs through klog; send it to the same place.
		klog.SetSlogLogger(log)
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, c, log)
	}
	return cmd
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

func run(ctx context.Context, c *config.Controller, log *slog.Logger) error {
	restCfg, err := restConfig(c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	restCfg.UserAgent = "tierflow-controller/" + c.Identity
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	policy, err := npclient.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	agentTLS, err := server.TLSFromFiles(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("agent TLS certificate: %w", err)
	}
	authn, err := server.NewTokenReviewAuthenticator(kube, server.TokenReviewConfig{
		Audiences:       []string{c.AgentTokenAudience},
		ServiceAccounts: []string{c.AgentServiceAccount},
	})
	if err != nil {
		return fmt.Errorf("agent authentication: %w", err)
	}

	// leading is set while this replica holds the Lease; the distribution
	// server refuses agents (and /readyz fails) otherwise, so agents are
	// never served a follower's empty model.
	var leading atomic.Bool
	var ctl *controller.Controller
	ready := func() bool { return leading.Load() && ctl != nil && ctl.HasSynced() }
	registry := prometheus.NewRegistry()
	engine := compute.New()
	// The controller reads realization from the server and the server
	// notifies the controller of changes: the notifier ties the two.
	notifier := &statusbridge.Notifier{}
	srv := server.New(engine, authn, server.Options{
		OnSummary:  notifier.Sink,
		Ready:      ready,
		Registerer: registry,
		Logger:     log.With("component", "distribution"),
	})
	ctl, err = controller.New(controller.Config{
		Kube: kube, Policy: policy, Engine: engine, Identity: c.Identity,
		CRDPollInterval: c.CRDPollInterval, Workers: c.Workers,
		Realization: statusbridge.Source{Server: srv}, Registry: registry,
	})
	if err != nil {
		return err
	}
	notifier.Set(ctl)

	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	if c.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", ctl.MetricsHandler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready() {
				http.Error(w, "not leading or caches not synced", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		s, err := serveHTTP(c.MetricsAddress, mux, log)
		if err != nil {
			return fmt.Errorf("metricsAddress: %w", err)
		}
		servers = append(servers, s)
	}
	if c.QueryAddress != "" {
		// The query API (pkg/queryapi) shares the agents' serving
		// certificate and checks every request's Kubernetes token with a
		// TokenReview and a SubjectAccessReview: it exposes every pod
		// address and policy of the cluster.
		h := queryapi.NewHandler(queryapi.Source{
			Snapshot: engine.Snapshot,
			Realization: func(id string) (queryapi.Realization, bool) {
				s, ok := srv.Summary(id)
				if !ok {
					return queryapi.Realization{}, false
				}
				return queryapi.Realization{SpanNodes: s.SpanNodes, Realized: s.Realized, Failed: s.Failed}, true
			},
			Pods:           ctl.Pods,
			Ready:          ready,
			AgentQuery:     srv.AgentQuery,
			ConnectedNodes: srv.ConnectedNodes,
		}, queryapi.NewAuthorizer(kube, 10*time.Second), log.With("component", "query"))
		ln, err := net.Listen("tcp", c.QueryAddress)
		if err != nil {
			return fmt.Errorf("queryAddress: %w", err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: agentTLS.Clone()}
		go func() {
			if err := s.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("query server stopped", "addr", c.QueryAddress, "err", err)
			}
		}()
		servers = append(servers, s)
	}
	agentLis, err := net.Listen("tcp", c.AgentListenAddress)
	if err != nil {
		return fmt.Errorf("agentListenAddress: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ctx, agentLis, agentTLS) }()
	go srv.Run(ctx)

	work := func(ctx context.Context) error {
		leading.Store(true)
		defer leading.Store(false)
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- ctl.Run(runCtx) }()
		select {
		case err := <-done:
			return err
		case err := <-serveErr:
			cancel()
			<-done
			return err
		}
	}
	if !c.LeaderElection.Enabled {
		return work(ctx)
	}
	le := c.LeaderElection
	var workErr error
	err = controller.RunWithLeaderElection(ctx, kube, controller.LeaderElection{
		Namespace: le.LeaseNamespace, Name: le.LeaseName, Identity: c.Identity,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
	}, func(ctx context.Context) { workErr = work(ctx) })
	if err != nil {
		// The term is over; exit so the replica restarts with fresh state.
		return err
	}
	return workErr
}

// serveHTTP listens on addr and serves h until the returned server is
// closed.
func serveHTTP(addr string, h http.Handler, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", addr, "err", err)
		}
	}()
	return s, nil
}
