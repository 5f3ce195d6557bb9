package config

import (
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Controller is tierflow-controller's configuration.
type Controller struct {
	// Kubeconfig is empty in a pod: the in-cluster configuration is used.
	Kubeconfig string `json:"kubeconfig" flag:"kubeconfig" usage:"kubeconfig file; empty uses the in-cluster service account"`

	// Identity names this replica: the Lease holder and the field manager
	// of the status it writes. Unique per replica.
	Identity string `json:"identity" flag:"id" usage:"this replica's identity (Lease holder, status field manager) (default: env POD_NAME, else the hostname)"`

	LeaderElection LeaderElection `json:"leaderElection"`

	// CRDPollInterval: network-policy-api CRDs installed after start are
	// picked up within this interval.
	CRDPollInterval time.Duration `json:"crdPollInterval" flag:"crd-poll-interval" usage:"how often to look for network-policy-api CRDs installed after start"`
	Workers         int           `json:"workers" flag:"workers" usage:"concurrent status writers"`

	// AgentListenAddress is where agents connect (gRPC over TLS).
	AgentListenAddress string `json:"agentListenAddress" flag:"agent-listen-address" usage:"host:port the controller serves agents on (gRPC over TLS)"`
	TLSCertFile        string `json:"tlsCertFile" flag:"tls-cert-file" usage:"PEM certificate the controller presents to agents"`
	TLSKeyFile         string `json:"tlsKeyFile" flag:"tls-key-file" usage:"PEM private key of --tls-cert-file"`
	// AgentTokenAudience is the audience agents' projected service account
	// tokens must be issued for; TokenReview checks it, so a token minted
	// for another purpose cannot authenticate an agent.
	AgentTokenAudience string `json:"agentTokenAudience" flag:"agent-token-audience" usage:"audience agents' service account tokens must carry"`
	// AgentServiceAccount is the only identity accepted from agents: a
	// token of any other service account is refused even when bound to a
	// node.
	AgentServiceAccount string `json:"agentServiceAccount" flag:"agent-service-account" usage:"NAMESPACE/NAME of the agents' service account"`

	MetricsAddress string `json:"metricsAddress" flag:"metrics-address" usage:"host:port serving /metrics, /healthz and /readyz; empty disables"`
	// QueryAddress serves tierctl's queries (computed policies, explain).
	// Loopback by default: the API is unauthenticated, tierctl runs in the
	// controller's pod (kubectl exec) or through a port-forward.
	QueryAddress string `json:"queryAddress" flag:"query-address" usage:"host:port of the API tierctl queries; empty disables"`
	LogLevel     string `json:"logLevel" flag:"log-level" usage:"log level: debug, info, warn or error"`
}

// LeaderElection configures the Lease that makes one controller replica
// the active one.
type LeaderElection struct {
	Enabled        bool          `json:"enabled" flag:"leader-elect" usage:"elect a leader with a Lease so that only one replica is active"`
	LeaseNamespace string        `json:"leaseNamespace" flag:"leader-elect-namespace" usage:"namespace of the leader election Lease"`
	LeaseName      string        `json:"leaseName" flag:"leader-elect-name" usage:"name of the leader election Lease"`
	LeaseDuration  time.Duration `json:"leaseDuration" flag:"leader-elect-lease-duration" usage:"how long non-leaders wait before taking over an unrenewed lease"`
	RenewDeadline  time.Duration `json:"renewDeadline" flag:"leader-elect-renew-deadline" usage:"how long the leader retries renewing before giving up leadership"`
	RetryPeriod    time.Duration `json:"retryPeriod" flag:"leader-elect-retry-period" usage:"how often candidates try to acquire or renew the lease"`
}

// Default ports. The agent's are on the node's network (hostNetwork).
const (
	DefaultAgentPort             = 10349
	DefaultControllerMetricsPort = 10350
	DefaultAgentMetricsPort      = 10351
	DefaultQueryPort             = 10352
)

// DefaultController returns the controller's defaults, which fit the
// manifests in manifests/.
func DefaultController() Controller {
	return Controller{
		Identity: defaultIdentity(),
		LeaderElection: LeaderElection{
			Enabled:        true,
			LeaseNamespace: "kube-system",
			LeaseName:      "tierflow-controller",
			// client-go's recommended values (as kube-controller-manager).
			LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second,
			RetryPeriod:   2 * time.Second,
		},
		CRDPollInterval:     10 * time.Second,
		Workers:             2,
		AgentListenAddress:  ":10349",
		TLSCertFile:         "/etc/tierflow/tls/tls.crt",
		TLSKeyFile:          "/etc/tierflow/tls/tls.key",
		AgentTokenAudience:  "tierflow",
		AgentServiceAccount: "kube-system/tierflow-agent",
		MetricsAddress:      ":10350",
		QueryAddress:        "127.0.0.1:10352",
		LogLevel:            "info",
	}
}

// Validate checks every value; the first problem is returned as a
// *FieldError.
func (c *Controller) Validate() error {
	if c.Identity == "" {
		return &FieldError{Key: "identity", Value: c.Identity, Reason: "is required: set POD_NAME, TIERFLOW_IDENTITY, --id or identity in the file"}
	}
	if c.CRDPollInterval <= 0 {
		return &FieldError{Key: "crdPollInterval", Value: c.CRDPollInterval, Reason: "must be positive"}
	}
	if c.Workers < 1 || c.Workers > 64 {
		return &FieldError{Key: "workers", Value: c.Workers, Reason: "must be in 1..64"}
	}
	le := c.LeaderElection
	if le.Enabled {
		if err := checkDNSSubdomain("leaderElection.leaseNamespace", le.LeaseNamespace, true); err != nil {
			return err
		}
		if err := checkDNSSubdomain("leaderElection.leaseName", le.LeaseName, false); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"leaderElection.leaseDuration", le.LeaseDuration},
		{"leaderElection.renewDeadline", le.RenewDeadline},
		{"leaderElection.retryPeriod", le.RetryPeriod},
	} {
		if d.v <= 0 {
			return &FieldError{Key: d.key, Value: d.v, Reason: "must be positive"}
		}
	}
	if le.Enabled {
		// The constraints client-go's leaderelection.NewLeaderElector
		// enforces (JitterFactor 1.2), checked here so the operator hears
		// about them at start and by key name.
		if le.LeaseDuration <= le.RenewDeadline {
			return &FieldError{Key: "leaderElection.leaseDuration", Value: le.LeaseDuration,
				Reason: "must be longer than leaderElection.renewDeadline (" + le.RenewDeadline.String() + ")"}
		}
		if float64(le.RenewDeadline) <= 1.2*float64(le.RetryPeriod) {
			return &FieldError{Key: "leaderElection.renewDeadline", Value: le.RenewDeadline,
				Reason: "must be longer than 1.2 × leaderElection.retryPeriod (" + le.RetryPeriod.String() + ")"}
		}
	}
	if err := checkListenAddress("agentListenAddress", c.AgentListenAddress, false); err != nil {
		return err
	}
	if err := checkPath("tlsCertFile", c.TLSCertFile, true); err != nil {
		return err
	}
	if err := checkPath("tlsKeyFile", c.TLSKeyFile, true); err != nil {
		return err
	}
	if c.AgentTokenAudience == "" {
		return &FieldError{Key: "agentTokenAudience", Value: c.AgentTokenAudience, Reason: "must not be empty"}
	}
	if ns, name, ok := strings.Cut(c.AgentServiceAccount, "/"); !ok ||
		len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return &FieldError{Key: "agentServiceAccount", Value: c.AgentServiceAccount, Reason: "must be NAMESPACE/NAME of a service account, e.g. kube-system/tierflow-agent"}
	}
	if err := checkListenAddress("metricsAddress", c.MetricsAddress, true); err != nil {
		return err
	}
	if err := checkListenAddress("queryAddress", c.QueryAddress, true); err != nil {
		return err
	}
	if err := checkPath("kubeconfig", c.Kubeconfig, false); err != nil {
		return err
	}
	return checkLogLevel("logLevel", c.LogLevel)
}

// PodNameEnv is the environment variable the controller's identity
// defaults to; the Deployment sets it from metadata.name.
const PodNameEnv = "POD_NAME"

func defaultIdentity() string {
	if v := os.Getenv(PodNameEnv); v != "" {
		return v
	}
	host, _ := os.Hostname()
	return host
}

// SlogLevel is the log/slog level of LogLevel (valid after Validate).
func (c *Controller) SlogLevel() slog.Level { return mustLevel(c.LogLevel) }
