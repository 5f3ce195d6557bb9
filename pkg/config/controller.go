package config

import (
	"log/slog"
	"net"
	"net/netip"
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
	// AgentReauthInterval bounds how long an agent's open stream goes
	// without its token being reviewed again: a stream ends within it
	// once its agent pod is deleted (the token is bound to the pod), and
	// at the token's expiry in any case.
	// AgentMaxConcurrentFullSyncs bounds the agents' full updates built
	// and sent at once (each holds a node's whole encoded state in
	// memory), e.g. after a controller restart, when every agent needs
	// one; the others wait their turn connected.
	AgentMaxConcurrentFullSyncs int           `json:"agentMaxConcurrentFullSyncs" flag:"agent-max-concurrent-full-syncs" usage:"how many agents' full state updates are built and sent at once; the others wait their turn"`
	AgentReauthInterval         time.Duration `json:"agentReauthInterval" flag:"agent-reauth-interval" usage:"how long an agent's open stream may go before its token is reviewed again (it ends when the token is no longer accepted, e.g. its pod was deleted; also at the token's expiry)"`

	MetricsAddress string `json:"metricsAddress" flag:"metrics-address" usage:"host:port serving /metrics, /healthz and /readyz; empty disables"`
	// QueryAddress serves tierctl's queries (pkg/queryapi: HTTPS, every
	// request authenticated and authorized). Loopback by default; the
	// manifests listen on every address, so that the other replica can
	// forward its queries to the leader.
	QueryAddress string `json:"queryAddress" flag:"query-address" usage:"host:port of the API tierctl queries; empty disables"`

	// LeaderService is the selector-less Service the leader points at
	// itself by writing its EndpointSlices
	// (pkg/controller/leaderendpoints): agents reach the leader through
	// it, and followers find the leader's query API in it.
	LeaderService string `json:"leaderService" flag:"leader-service" usage:"NAMESPACE/NAME of the selector-less Service whose EndpointSlices the leader points at itself; empty: none"`
	// AdvertiseAddresses are the addresses the leader publishes, at most
	// one per IP family: in a pod, status.podIPs (the Deployment sets
	// POD_IPS from it).
	AdvertiseAddresses string `json:"advertiseAddresses" flag:"advertise-addresses" usage:"this replica's IP addresses, comma-separated, at most one per family, published in leaderService's EndpointSlices when it leads (default: env POD_IPS)"`
	// TLSCAFile verifies the leader's query API when a follower forwards
	// tierctl's queries to it (the leader presents tlsCertFile too).
	TLSCAFile string `json:"tlsCAFile" flag:"tls-ca-file" usage:"PEM CA that signed tlsCertFile: a follower verifies the leader's query API with it when it forwards tierctl's queries"`

	LogLevel string `json:"logLevel" flag:"log-level" usage:"log level: debug, info, warn or error"`
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
		Identity:           defaultIdentity(),
		AdvertiseAddresses: os.Getenv(PodIPsEnv),
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
		AgentReauthInterval: time.Minute,
		// Each full update holds a node's encoded state (tens of MB when
		// a policy's peers are most of 100k pods): 8 bounds that memory
		// and still keeps two cores busy encoding.
		AgentMaxConcurrentFullSyncs: 8,
		MetricsAddress:              ":10350",
		QueryAddress:                "127.0.0.1:10352",
		LogLevel:                    "info",
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
	if c.AgentMaxConcurrentFullSyncs < 1 || c.AgentMaxConcurrentFullSyncs > 1024 {
		return &FieldError{Key: "agentMaxConcurrentFullSyncs", Value: c.AgentMaxConcurrentFullSyncs, Reason: "must be in 1..1024"}
	}
	if c.AgentReauthInterval < time.Second {
		return &FieldError{Key: "agentReauthInterval", Value: c.AgentReauthInterval, Reason: "must be at least 1s"}
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
	if err := c.validateLeaderService(); err != nil {
		return err
	}
	return checkLogLevel("logLevel", c.LogLevel)
}

// validateLeaderService checks leaderService and what it needs: addresses
// to publish, listeners on them, and the CA a follower verifies the leader
// with.
func (c *Controller) validateLeaderService() error {
	addrs, err := parseAdvertiseAddresses(c.AdvertiseAddresses)
	if err != nil {
		return err
	}
	if c.LeaderService == "" {
		return checkPath("tlsCAFile", c.TLSCAFile, false)
	}
	if ns, name, ok := strings.Cut(c.LeaderService, "/"); !ok ||
		len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
		return &FieldError{Key: "leaderService", Value: c.LeaderService, Reason: "must be NAMESPACE/NAME of a Service, e.g. kube-system/tierflow-controller"}
	}
	if len(addrs) == 0 {
		return &FieldError{Key: "advertiseAddresses", Value: c.AdvertiseAddresses,
			Reason: "is required with leaderService (the addresses the leader publishes): set POD_IPS from status.podIPs, TIERFLOW_ADVERTISE_ADDRESSES or --advertise-addresses"}
	}
	// The published ports must be reachable at the published addresses.
	for _, l := range []struct{ key, addr string }{{"agentListenAddress", c.AgentListenAddress}, {"queryAddress", c.QueryAddress}} {
		if l.addr != "" && !listensOn(l.addr, addrs) {
			return &FieldError{Key: l.key, Value: l.addr,
				Reason: "must listen on advertiseAddresses (" + c.AdvertiseAddresses + ") with leaderService set: leave the host empty, e.g. :10352"}
		}
	}
	if c.QueryAddress != "" {
		return checkPath("tlsCAFile", c.TLSCAFile, true)
	}
	return checkPath("tlsCAFile", c.TLSCAFile, false)
}

// Advertised returns AdvertiseAddresses parsed (valid after Validate).
func (c *Controller) Advertised() []netip.Addr {
	addrs, _ := parseAdvertiseAddresses(c.AdvertiseAddresses)
	return addrs
}

// LeaderServiceName splits LeaderService (valid after Validate).
func (c *Controller) LeaderServiceName() (namespace, name string) {
	namespace, name, _ = strings.Cut(c.LeaderService, "/")
	return namespace, name
}

// parseAdvertiseAddresses parses a comma-separated list of IP addresses
// (status.podIPs as the downward API renders it), at most one per family.
func parseAdvertiseAddresses(v string) ([]netip.Addr, error) {
	var out []netip.Addr
	families := map[bool]bool{}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" || a.IsUnspecified() {
			return nil, &FieldError{Key: "advertiseAddresses", Value: v, Reason: "must be IP addresses separated by commas, e.g. 10.0.0.5,fd00::5"}
		}
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
			// The API server refuses them in EndpointSlices.
			return nil, &FieldError{Key: "advertiseAddresses", Value: v, Reason: "must not hold loopback or link-local addresses (EndpointSlices cannot)"}
		}
		a = a.Unmap()
		if families[a.Is4()] {
			return nil, &FieldError{Key: "advertiseAddresses", Value: v, Reason: "must hold at most one address per IP family"}
		}
		families[a.Is4()] = true
		out = append(out, a)
	}
	return out, nil
}

// listensOn reports whether a listener on host:port accepts connections
// to every address of addrs.
func listensOn(hostPort string, addrs []netip.Addr) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "" || host == "::" {
		return true // Go listens on both families
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	if a.Unmap() == netip.IPv4Unspecified() {
		for _, x := range addrs {
			if !x.Is4() {
				return false
			}
		}
		return true
	}
	return len(addrs) == 1 && a.Unmap() == addrs[0]
}

// PodNameEnv is the environment variable the controller's identity
// defaults to; the Deployment sets it from metadata.name.
const PodNameEnv = "POD_NAME"

// PodIPsEnv is the environment variable advertiseAddresses defaults to;
// the Deployment sets it from status.podIPs.
const PodIPsEnv = "POD_IPS"

func defaultIdentity() string {
	if v := os.Getenv(PodNameEnv); v != "" {
		return v
	}
	host, _ := os.Hostname()
	return host
}

// SlogLevel is the log/slog level of LogLevel (valid after Validate).
func (c *Controller) SlogLevel() slog.Level { return mustLevel(c.LogLevel) }
