// Command tierflow-controller is tierflow's control plane: it watches
// Kubernetes policy objects, computes tierflow's internal policy model,
// streams each agent its node's share of it, and reports findings and
// realization as status conditions and Events. Replicas elect a leader
// through a Lease; only the leader computes, serves agents and writes.
// The others stand by and take over when the leader goes; a leader that
// loses the Lease exits, to restart with fresh state as a candidate.
//
// Configuration comes from pkg/config (flags, TIERFLOW_* variables and the
// --config file). Endpoints:
//
//   - agentListenAddress: the distribution service (gRPC over TLS), for
//     agents authenticated by their service account tokens. Only the
//     leader accepts agents (followers answer Unavailable). Agents find
//     the leader through the Service named by leaderService, which has no
//     selector: the leader writes its EndpointSlices, pointing at its own
//     advertiseAddresses (the pod's status.podIPs: it runs on the host
//     network) as soon as it leads, and rewrites them when they drift
//     (pkg/controller/leaderendpoints). A selector would make every Ready
//     replica an endpoint, and followers are Ready.
//   - metricsAddress: /metrics (Prometheus), /healthz (the process is up),
//     /readyz: the leader is ready once its caches are synced and the
//     Service points at it; a follower once it stands by, that is it read
//     the Lease within the last lease duration (so its API server
//     connection works and it would take over an expiring lease; its
//     listeners are open, or it would have exited). Both replicas are
//     therefore Ready when healthy, so `kubectl rollout status` completes
//     and a rolling update (maxSurge 0, maxUnavailable 1: host ports)
//     proceeds: a new pod becomes Ready as a follower while the other old
//     one still leads.
//   - queryAddress: the query API for tierctl (pkg/queryapi): HTTPS with
//     the agents' serving certificate, every request authenticated by its
//     Kubernetes bearer token (TokenReview) and authorized by a
//     SubjectAccessReview (get on tierflow.io/queries). A follower
//     forwards every request, token included, to the leader's query API
//     (the Lease holder's endpoint in the Service's EndpointSlices, port
//     "query"), verifying the leader's certificate against tlsCAFile by
//     the serving certificate's DNS name, and passes its answer back, so
//     tierctl in either pod gets the leader's answer; the leader alone
//     authenticates and authorizes. The manifests therefore listen on
//     every address (the other replica must reach it) rather than on
//     loopback. Forwarding was preferred over answering from a follower's
//     own state (a follower computes nothing) and over making tierctl
//     find the leader (it would need the Lease and EndpointSlice RBAC).
package main

import (
	"context"
	"crypto/tls"
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
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/controller/leaderendpoints"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/statusbridge"
	"github.com/tierflow/tierflow/pkg/kubeauth"
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

	// leading is set while this replica holds the Lease. Agents are
	// served, and the query API answers, only once the leader's caches are
	// synced (serving), so agents are never served a follower's or a
	// half-built empty model.
	var leading atomic.Bool
	var ctl *controller.Controller
	serving := func() bool { return leading.Load() && ctl != nil && ctl.HasSynced() }
	var elector *controller.Elector
	if le := c.LeaderElection; le.Enabled {
		elector, err = controller.NewElector(kube, controller.LeaderElection{
			Namespace: le.LeaseNamespace, Name: le.LeaseName, Identity: c.Identity,
			LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		})
		if err != nil {
			return err
		}
	}
	// publisher points leaderService at this replica during its term.
	var publisher atomic.Pointer[leaderendpoints.Publisher]
	// readiness is /readyz (see the package comment).
	readiness := func() (bool, string) {
		if leading.Load() {
			if !ctl.HasSynced() {
				return false, "leading, caches not synced yet"
			}
			if p := publisher.Load(); p != nil && !p.Published() {
				return false, "leading, the Service does not point here yet"
			}
			return true, "leading"
		}
		if elector == nil {
			return false, "starting"
		}
		if !elector.StandingBy() {
			return false, "following, but the Lease was not read within a lease duration: could not take over"
		}
		return true, fmt.Sprintf("standing by (leader %q)", elector.Holder())
	}
	registry := prometheus.NewRegistry()
	engine := compute.New()
	// The controller reads realization from the server and the server
	// notifies the controller of changes: the notifier ties the two.
	notifier := &statusbridge.Notifier{}
	srv := server.New(engine, authn, server.Options{
		OnSummary: notifier.Sink,
		// What agents find attached gives new pods their addresses before
		// the kubelet reports them (the CNI ADD waits for the pod's
		// admission, which needs them).
		OnNodePods:             engine.SetReportedPods,
		Ready:                  serving,
		ReauthInterval:         c.AgentReauthInterval,
		MaxConcurrentFullSyncs: c.AgentMaxConcurrentFullSyncs,
		Registerer:             registry,
		Logger:                 log.With("component", "distribution"),
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
			ok, why := readiness()
			if !ok {
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok: " + why + "\n"))
		})
		s, err := serveHTTP(c.MetricsAddress, mux, log)
		if err != nil {
			return fmt.Errorf("metricsAddress: %w", err)
		}
		servers = append(servers, s)
	}
	var queryPort int32
	if c.QueryAddress != "" {
		// The query API (pkg/queryapi) shares the agents' serving
		// certificate and checks every request's Kubernetes token with a
		// TokenReview and a SubjectAccessReview: it exposes every pod
		// address and policy of the cluster.
		var h http.Handler = queryapi.NewHandler(queryapi.Source{
			Snapshot: engine.Snapshot,
			Realization: func(id string) (queryapi.Realization, bool) {
				s, ok := srv.Summary(id)
				if !ok {
					return queryapi.Realization{}, false
				}
				return queryapi.Realization{SpanNodes: s.SpanNodes, Realized: s.Realized, Failed: s.Failed}, true
			},
			Pods:           ctl.Pods,
			Ready:          serving,
			AgentQuery:     srv.AgentQuery,
			ConnectedNodes: srv.ConnectedNodes,
		}, kubeauth.New(kube, 10*time.Second), log.With("component", "query"))
		if elector != nil {
			if h, err = withForwarding(h, c, kube, elector, &leading, log); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", c.QueryAddress)
		if err != nil {
			return fmt.Errorf("queryAddress: %w", err)
		}
		queryPort = int32(ln.Addr().(*net.TCPAddr).Port)
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
	agentPort := int32(agentLis.Addr().(*net.TCPAddr).Port)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ctx, agentLis, agentTLS) }()
	go srv.Run(ctx)

	work := func(ctx context.Context) error {
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		pubDone := make(chan error, 1)
		if c.LeaderService != "" {
			ns, name := c.LeaderServiceName()
			ports := map[string]int32{leaderendpoints.PortAgents: agentPort}
			if queryPort != 0 {
				ports[leaderendpoints.PortQuery] = queryPort
			}
			p, err := leaderendpoints.NewPublisher(leaderendpoints.Config{
				Kube: kube, Namespace: ns, Service: name, Identity: c.Identity,
				Addresses: c.Advertised(), Ports: ports, Log: log.With("component", "endpoints"),
			})
			if err != nil {
				return err
			}
			// Before leading is set: /readyz waits for the slices.
			publisher.Store(p)
			go func() { pubDone <- p.Run(runCtx) }()
		} else {
			pubDone <- nil
		}
		leading.Store(true)
		defer leading.Store(false)
		done := make(chan error, 1)
		go func() { done <- ctl.Run(runCtx) }()
		select {
		case err := <-done:
			cancel()
			<-pubDone
			return err
		case err := <-serveErr:
			cancel()
			<-done
			<-pubDone
			return err
		}
	}
	if elector == nil {
		return work(ctx)
	}
	var workErr error
	err = elector.Run(ctx, func(ctx context.Context) { workErr = work(ctx) })
	if err != nil {
		// The term is over; exit so the replica restarts with fresh state.
		return err
	}
	return workErr
}

// withForwarding makes a follower's query API forward to the leader's
// (pkg/queryapi.WithForwarding): the leader is the Lease holder, its
// address the holder's endpoint in leaderService's EndpointSlices, tried
// in this replica's own address family first.
func withForwarding(h http.Handler, c *config.Controller, kube kubernetes.Interface, elector *controller.Elector, leading *atomic.Bool, log *slog.Logger) (http.Handler, error) {
	var leaderTLS *tls.Config
	if c.LeaderService != "" {
		var err error
		if leaderTLS, err = queryapi.LeaderTLS(c.TLSCAFile, c.TLSCertFile); err != nil {
			return nil, fmt.Errorf("tlsCAFile: %w", err)
		}
	}
	prefer := discoveryv1.AddressTypeIPv4
	if addrs := c.Advertised(); len(addrs) > 0 {
		prefer = leaderendpoints.Family(addrs[0])
	}
	return queryapi.WithForwarding(h, queryapi.Follower{
		Self:    c.Identity,
		Leading: leading.Load,
		TLS:     leaderTLS,
		Log:     log.With("component", "query"),
		Leader: func(ctx context.Context) (string, string, error) {
			holder := elector.Holder()
			switch {
			case holder == "":
				return "", "", queryapi.ErrNoLeader
			case c.LeaderService == "":
				return holder, "", fmt.Errorf("the leader %s cannot be found: no leaderService is configured", holder)
			}
			ns, name := c.LeaderServiceName()
			addr, err := leaderendpoints.Find(ctx, kube, ns, name, holder, leaderendpoints.PortQuery, prefer)
			return holder, addr, err
		},
	}), nil
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
