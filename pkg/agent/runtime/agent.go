package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/pkg/agent/metrics"
	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/distribution/client"
	"github.com/tierflow/tierflow/pkg/distribution/client/statestore"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// Options configure an Agent.
type Options struct {
	// Config is the validated agent configuration (pkg/config).
	Config *config.Agent
	// Datapath is agentquery.DatapathOVS (default) or agentquery.DatapathNone.
	Datapath string
	// QuerySocket is the unix socket of the query API; empty disables it.
	QuerySocket string
	// CtZone is the conntrack zone of this node's connections. Agents whose
	// bridges share one datapath (tests with several bridges in one
	// ovs-vswitchd) need different zones.
	CtZone uint16
	// VswitchdCtl is ovs-vswitchd's control socket, for traces; empty:
	// found through its pidfile in the OVSDB socket's directory.
	VswitchdCtl string
	// NodeNetNS is the node's network namespace for the noEncap and encap
	// node networks (gateway interface, routes, forwarding, the underlay);
	// empty: the agent's own, as in a DaemonSet with hostNetwork. Tests
	// run several nodes in one process with it.
	NodeNetNS string
	// KeepUnderlay leaves the node's address on the underlay bridge when
	// the agent stops, as an agent that crashed would (tests of the
	// restore at start). A real agent moves it back (RevertUnderlay): it
	// stops with its pod, whose OVS stops too.
	KeepUnderlay bool
	// RetryInterval between attempts after a failed realization (default
	// 2s); CheckInterval between checks that the bridge still holds the
	// flows (default 10s).
	RetryInterval, CheckInterval time.Duration
	Logger                       *slog.Logger
}

// Agent is one running tierflow-agent.
type Agent struct {
	opts Options
	cfg  *config.Agent
	log  *slog.Logger
	m    *agentMetrics

	ovs     *ovsDatapath      // nil with datapath none
	nodenet *nodenet.Manager  // noEncap and encap node networks only
	podMTU  int               // of the pods and the gateway (nodenet.PodMTU)
	none    *nodatapath.Agent // set with datapath none
	client  *client.Client

	kick chan struct{} // asks the loop to realize again (ports changed)

	// servicesReady is closed once the Service proxy realized its first
	// state (at once when it is disabled); servicesWaited: the first
	// policy realization waited for it.
	servicesReady  chan struct{}
	servicesOnce   sync.Once
	servicesWaited bool

	kubeOnce   sync.Once
	kubeClient kubernetes.Interface
	kubeErr    error

	// realizeMu serializes realizations; mu guards the fields below.
	realizeMu sync.Mutex
	mu        sync.Mutex
	state     *wire.NodeState // the distribution client's: read-only
	haveState bool            // a complete state has been received (restored or from the controller)
	ready     bool            // ... and realized
	failing   bool            // the last realization failed
	lastTime  time.Time
	lastErr   string
	warnings  []string
	// metricsAddr is the bound metrics address.
	metricsAddr string
	// realized is, per policy ID, the generation the datapath enforces.
	realized map[string]int64
	errs     map[string]string
	// timings: the last updates' stages (/v1/updates).
	timings updateTimings
}

// New checks opts; Run starts the agent.
func New(opts Options) (*Agent, error) {
	if opts.Config == nil {
		return nil, errors.New("agent: no configuration")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	switch opts.Datapath {
	case "":
		opts.Datapath = agentquery.DatapathOVS
	case agentquery.DatapathOVS, agentquery.DatapathNone:
	default:
		return nil, fmt.Errorf("agent: datapath %q: want %s or %s", opts.Datapath, agentquery.DatapathOVS, agentquery.DatapathNone)
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 2 * time.Second
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &Agent{
		opts:  opts,
		cfg:   opts.Config,
		log:   opts.Logger.With("node", opts.Config.NodeName),
		kick:  make(chan struct{}, 1),
		state: wire.NewNodeState(opts.Config.NodeName),

		servicesReady: make(chan struct{}),
		realized:      map[string]int64{},
		errs:          map[string]string{},
	}
	a.m = newAgentMetrics(a)
	if !opts.Config.ServiceProxy.Enabled || opts.Datapath != agentquery.DatapathOVS {
		a.servicesOnce.Do(func() { close(a.servicesReady) })
	}
	return a, nil
}

// Run starts everything, enforces the saved state, follows the controller
// and serves metrics and queries until ctx ends. It returns an error only
// when the agent cannot start; a missing controller is not one.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	tlsConfig, err := a.controllerTLS()
	if err != nil {
		return err
	}
	store, err := statestore.Open(a.cfg.StateDir)
	if err != nil {
		return err
	}

	a.client, err = client.New(client.Config{
		Address:  a.cfg.ControllerAddress,
		TLS:      tlsConfig,
		Token:    client.TokenFile(a.cfg.TokenFile),
		Node:     a.cfg.NodeName,
		Receiver: receiver{a},
		Query:    a.queryHandler(), // tierctl's remote flows and trace
		Store:    store,
		Logger:   a.log,
	})
	if err != nil {
		return err
	}
	if a.opts.Datapath == agentquery.DatapathNone {
		a.none = nodatapath.New(a.cfg.NodeName)
	}
	// Serve health and queries at once: OVS may still be starting (its
	// container starts with the agent's), and the liveness probe must not
	// kill the agent for waiting.
	servers, err := a.serve()
	if err != nil {
		return err
	}
	defer servers.close()
	if a.opts.Datapath == agentquery.DatapathOVS {
		d, err := a.openOVSRetrying(ctx)
		if err != nil || d == nil {
			return err
		}
		defer d.close()
		if underlay := a.underlayBridge(); underlay != "" && !a.opts.KeepUnderlay {
			// Deferred after d.close, so it runs before it, and after the
			// node network stopped: a stopping agent is a stopping pod,
			// whose OVS stops too, and the node must keep its network
			// (the next agent moves it again; see RevertUnderlay). Briefly:
			// the DaemonSet's next pod, and the node's next OVS, wait
			// until this one stopped, and OVSDB, stopping with this pod,
			// often cannot remove the bridge anyway (the next start or
			// the uninstall does).
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				err := nodenet.RevertUnderlay(ctx, d.db, underlay, a.opts.NodeNetNS, a.log)
				switch {
				case err == nil:
				case stoppedWithOVS(err):
					a.log.Warn("stopping: the underlay bridge stays, OVSDB (stopping with this pod) did not remove it; "+
						"the node's interface has its addresses back, the next agent takes the bridge over, the uninstall's cleanup removes it",
						"bridge", underlay, "err", err)
				default:
					a.log.Error("moving the node's interface back from the underlay bridge", "err", err)
				}
			}()
		}
		a.mu.Lock()
		a.ovs = d
		a.mu.Unlock()
		a.m.reg.MustRegister(metrics.NewCollector(realizerSource{d}))
		if a.underlayBridge() == "" {
			// A previous configuration's underlay (encap on the userspace
			// datapath) is moved back: this one has none.
			if err := nodenet.RevertUnderlay(ctx, d.db, a.cfg.NodeNetwork.UnderlayBridge, a.opts.NodeNetNS, a.log); err != nil {
				a.log.Error("moving the node's interface back from the underlay bridge", "err", err)
			}
		}
		if a.cfg.NodeNetwork.Mode != config.NodeNetworkUplink {
			kube, err := a.kube()
			if err != nil {
				return fmt.Errorf("node network %s: %w", a.cfg.NodeNetwork.Mode, err)
			}
			if underlay := a.underlayBridge(); underlay != "" {
				// Before anything that needs the API server: on a node
				// whose ovs-vswitchd restarted the node's address is gone
				// with the underlay bridge's interface, and with it the
				// way to the API server.
				if err := nodenet.RestoreUnderlay(ctx, d.db, underlay, a.opts.NodeNetNS, a.log); err != nil {
					a.log.Warn("restoring the underlay; the node network retries", "err", err)
				}
			}
			// Before the node network creates anything: an encap node
			// whose pod MTU cannot work does not start (its bridge holds
			// the pipeline of no pod until then).
			if a.podMTU, err = a.startMTU(ctx, kube); err != nil || ctx.Err() != nil {
				return err
			}
			nm, err := a.nodeNetwork(d, kube)
			if err != nil {
				return err
			}
			d.setOnFlowsLost(nm.Trigger)
			a.mu.Lock()
			a.nodenet = nm
			a.mu.Unlock()
			nmDone := make(chan struct{})
			go func() {
				defer close(nmDone)
				if err := nm.Run(ctx); err != nil {
					a.log.Error("node network stopped", "err", err)
				}
			}()
			defer func() { cancel(); <-nmDone }()
		}
		// After the node network's start: with an underlay bridge the way
		// to the API server is back only once RestoreUnderlay ran.
		if a.cfg.ServiceProxy.Enabled {
			if err := a.runServiceProxy(ctx, d); err != nil {
				return err
			}
		}
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.loop(ctx)
	}()
	a.log.Info("agent started", "datapath", a.opts.Datapath, "bridge", a.cfg.BridgeName, "controller", a.cfg.ControllerAddress)
	// Run restores the saved state (enforced at once, through Apply) and
	// then keeps the stream to the controller open until ctx ends.
	err = a.client.Run(ctx)
	cancel()
	wg.Wait()
	a.log.Info("agent stopped; flows stay installed")
	return err
}

// startMTU works out the pods' MTU (nodenet.PodMTU) from the local Node,
// waiting (and retrying) until the Node has pod CIDRs and an InternalIP.
// A configuration that cannot work (the MTU does not fit the underlay or
// is below the pods' families' minimum) is an error: the agent stops
// before creating anything, and tierflow-install-cni refuses the same.
// Outside encap mode it is cni.mtu as configured.
func (a *Agent) startMTU(ctx context.Context, kube kubernetes.Interface) (int, error) {
	if a.cfg.NodeNetwork.Mode != config.NodeNetworkEncap {
		return a.cfg.CNI.MTU, nil
	}
	backoff := a.opts.RetryInterval
	for {
		local, err := nodenet.GetNode(ctx, kube, a.cfg.NodeName)
		if err == nil {
			// The kubelet reports the addresses: wait for them too.
			_, err = nodenet.TunnelEndpoint(local)
		}
		if err == nil {
			mtu, err := nodenet.PodMTU(a.cfg, local, a.opts.NodeNetNS)
			if err != nil {
				return 0, err
			}
			a.log.Info("pod MTU", "mtu", mtu, "tunnelType", a.cfg.NodeNetwork.TunnelType)
			return mtu, nil
		}
		a.log.Warn("waiting for the local Node's pod CIDRs and InternalIP", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// nodeNetwork sets up the noEncap or encap node network: pkg/agent/nodenet
// keeps the gateway port, the routes to other nodes and (encap) the tunnel
// and its peers, and hands gateway and tunnel to the datapath, which
// rebuilds its pipeline with them.
func (a *Agent) nodeNetwork(d *ovsDatapath, kube kubernetes.Interface) (*nodenet.Manager, error) {
	o := nodenet.Options{
		Kube: kube, NodeName: a.cfg.NodeName, OVSDB: d.db, Bridge: a.cfg.BridgeName,
		GatewayName: a.cfg.NodeNetwork.GatewayName, MTU: a.podMTU, NetNS: a.opts.NodeNetNS,
		Masquerade:             a.cfg.NodeNetwork.Masquerade,
		KubeProxyMasqueradeBit: a.cfg.NodeNetwork.KubeProxyMasqueradeBit,
		// The gateway openOVS adopted: the pipeline already has it.
		Adopted:       d.wantGatewayNow(),
		RetryInterval: a.opts.RetryInterval, Logger: a.log,
		OnGateway: func(gw pipeline.Gateway) {
			d.setGateway(gw)
			a.requestRealize()
		},
	}
	if a.cfg.NodeNetwork.Mode == config.NodeNetworkEncap {
		o.Encap = &nodenet.EncapOptions{TunnelType: a.cfg.NodeNetwork.TunnelType,
			OnTunnel: func(t pipeline.Tunnel) {
				d.setTunnel(t)
				a.requestRealize()
			}}
		o.Encap.UnderlayBridge = a.underlayBridge()
	}
	return nodenet.New(o)
}

// underlayBridge is the encap node network's underlay bridge: only OVS's
// userspace datapath tunnels through one ("": none).
func (a *Agent) underlayBridge() string {
	if a.cfg.NodeNetwork.Mode == config.NodeNetworkEncap && a.cfg.DatapathType == config.DatapathNetdev {
		return a.cfg.NodeNetwork.UnderlayBridge
	}
	return ""
}

// kube returns the agent's Kubernetes client (built once): the kubeconfig
// of the configuration, else the in-cluster service account. Only the
// noEncap and encap node networks (Nodes), the Service proxy (Services,
// EndpointSlices, Nodes) and the metrics port's authorization
// (TokenReview, SubjectAccessReview) use it.
func (a *Agent) kube() (kubernetes.Interface, error) {
	a.kubeOnce.Do(func() {
		var rc *rest.Config
		if a.cfg.Kubeconfig != "" {
			rc, a.kubeErr = clientcmd.BuildConfigFromFlags("", a.cfg.Kubeconfig)
		} else {
			rc, a.kubeErr = rest.InClusterConfig()
		}
		if a.kubeErr != nil {
			a.kubeErr = fmt.Errorf("Kubernetes client configuration: %w", a.kubeErr)
			return
		}
		rc.UserAgent = "tierflow-agent"
		a.kubeClient, a.kubeErr = kubernetes.NewForConfig(rc)
	})
	return a.kubeClient, a.kubeErr
}

// openOVS connects to OVS, retrying with backoff until it succeeds or ctx
// ends (nil, nil): ovs-vswitchd may be starting or restarting.
func (a *Agent) openOVSRetrying(ctx context.Context) (*ovsDatapath, error) {
	backoff := 500 * time.Millisecond
	for {
		d, err := openOVS(ctx, &a.opts, a.log, a.m, a.requestRealize)
		if err == nil {
			return d, nil
		}
		a.log.Warn("OVS not ready; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// datapath is the OVS datapath once connected (nil before, and with
// datapath none).
func (a *Agent) datapath() *ovsDatapath {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ovs
}

// controllerTLS verifies the controller with the configured CA bundle and
// server name.
func (a *Agent) controllerTLS() (*tls.Config, error) {
	pem, err := os.ReadFile(a.cfg.ControllerCAFile)
	if err != nil {
		return nil, fmt.Errorf("controller CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("controller CA: no PEM certificate in %s", a.cfg.ControllerCAFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: a.cfg.ControllerServerName, MinVersion: tls.VersionTLS12}, nil
}

// receiver is the distribution client's Receiver.
type receiver struct{ a *Agent }

// Apply takes the node's state after an update and realizes all of it. An
// error means nothing of the update is enforced yet; the client reports it
// for every affected policy, and the loop retries.
func (r receiver) Apply(d *wire.Delta, st *wire.NodeState) error {
	a := r.a
	a.mu.Lock()
	a.state = st
	if d.Full {
		a.haveState = true
		a.m.stateUpdates.WithLabelValues("full").Inc()
	} else {
		a.m.stateUpdates.WithLabelValues("delta").Inc()
	}
	a.mu.Unlock()
	if a.none != nil {
		err := a.none.Apply(d, st)
		a.record(st, nil, nil, err)
		return err
	}
	// Bounded, so a wedged switch cannot stall the stream forever (the
	// controller would resync this agent anyway); the loop retries.
	ctx, cancel := context.WithTimeout(context.Background(), realizeTimeout)
	defer cancel()
	ut := a.timings.start(d)
	err := a.realize(ctx, "update", ut)
	a.timings.finish(ut, err)
	return err
}

// realizeTimeout bounds one realization: compiling and one bundle, even
// for a large state on a busy node, take far less.
const realizeTimeout = 2 * time.Minute

// reportPods tells the controller which pods are attached to the bridge
// (their addresses admit them before the kubelet reports them).
func (a *Agent) reportPods(ctx context.Context) {
	if d := a.datapath(); d != nil && a.client != nil {
		a.client.ReportPods(d.attachedPods(ctx))
	}
}

// requestRealize asks the loop to realize again (a port changed).
func (a *Agent) requestRealize() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// loop realizes again when ports change, retries failed realizations and
// checks that the bridge still holds the flows.
func (a *Agent) loop(ctx context.Context) {
	retry := time.NewTicker(a.opts.RetryInterval)
	defer retry.Stop()
	check := time.NewTicker(a.opts.CheckInterval)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
			a.reportPods(ctx)
			a.realizeBounded(ctx, "ports")
		case <-retry.C:
			a.mu.Lock()
			failing := a.failing
			a.mu.Unlock()
			if failing {
				a.realizeBounded(ctx, "retry")
			}
		case <-check.C:
			if d := a.datapath(); d != nil && a.realizedOnce() {
				d.check(ctx)
			}
		}
	}
}

func (a *Agent) realizeBounded(ctx context.Context, trigger string) {
	ctx, cancel := context.WithTimeout(ctx, realizeTimeout)
	defer cancel()
	_ = a.realize(ctx, trigger, nil)
}

// current is the state to realize: the client hands a new one at every
// update and never changes one it handed, so it is read without a copy.
func (a *Agent) current() *wire.NodeState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// realize makes the datapath enforce the current state. Before a complete
// state is known nothing is realized: the pipeline passes no pod traffic.
// ut, when not nil, gets the realization's and its bundles' times.
func (a *Agent) realize(ctx context.Context, trigger string, ut *agentquery.UpdateTiming) error {
	d := a.datapath()
	if d == nil {
		return nil
	}
	a.realizeMu.Lock()
	defer a.realizeMu.Unlock()
	a.mu.Lock()
	have := a.haveState
	a.mu.Unlock()
	if !have {
		d.pendAll(ctx, "not admitted: the agent holds no complete policy state yet")
		return nil
	}
	if !a.servicesWaited {
		// The first realization: see firstServicesWait.
		a.servicesWaited = true
		select {
		case <-a.servicesReady:
		case <-time.After(firstServicesWait):
			a.log.Warn("service proxy not ready; realizing policy without Services", "waited", firstServicesWait)
		case <-ctx.Done():
		}
	}
	st := a.current()
	start := time.Now()
	warnings, leftOut, bt, err := d.realize(ctx, st)
	if ut != nil {
		ut.Realizing, ut.BundleStart, ut.Committed, ut.FlowChanges = start, bt.start, bt.committed, bt.changes
	}
	a.m.realizeTime.WithLabelValues(trigger).Observe(time.Since(start).Seconds())
	if err != nil {
		a.m.realizeErrs.WithLabelValues(trigger).Inc()
		a.log.Error("realization failed; previous flows stay installed", "trigger", trigger, "err", err)
	} else {
		a.log.Debug("realized", "trigger", trigger, "policies", len(st.Policies), "took", time.Since(start))
	}
	a.record(st, warnings, leftOut, err)
	if err == nil && len(leftOut) > 0 {
		// Realized as intended, degraded: the update's report carries
		// these policies' errors (nothing to retry).
		errs := client.PolicyErrors{}
		for id, why := range leftOut {
			errs[id] = errors.New(why)
		}
		return errs
	}
	return err
}

// record notes the outcome of realizing st and pushes the policies whose
// outcome changed to the controller (client.Report): a retry or a port
// change can fix or break a realization between two updates, and the
// policy's status must not wait for the next update to show it.
// Realizations are serialized (realizeMu), so the pushed outcomes arrive
// in the order they happened.
//
// leftOut are the policies a successful realization left out of a full
// table (their pods isolated instead): they are reported failed with why,
// but the realization is not retried — it is what the agent intends.
func (a *Agent) record(st *wire.NodeState, warnings []string, leftOut map[string]string, err error) {
	changed := a.recordLocked(st, warnings, leftOut, err)
	if len(changed) > 0 && a.client != nil {
		a.client.Report(changed)
	}
}

func (a *Agent) recordLocked(st *wire.NodeState, warnings []string, leftOut map[string]string, err error) []wire.PolicyResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	before := a.resultsLocked(st)
	var perPolicy client.PolicyErrors
	errors.As(err, &perPolicy)
	a.failing = err != nil
	if err != nil {
		a.lastErr = err.Error()
	} else {
		a.lastErr = ""
		a.ready = true
		a.lastTime = time.Now()
		if !equalStrings(a.warnings, warnings) {
			for _, w := range warnings {
				a.log.Warn("rule compiled differently from its text", "warning", w)
			}
		}
		a.warnings = warnings
		for id, why := range leftOut {
			if a.errs[id] != why {
				a.log.Warn("policy left out of a full table; its pods are isolated instead", "policy", st.Policies[id].Source.String(), "why", why)
			}
		}
	}
	for id := range a.realized {
		if st.Policies[id] == nil {
			delete(a.realized, id)
			delete(a.errs, id)
		}
	}
	for id, p := range st.Policies {
		switch {
		case perPolicy != nil && perPolicy[id] != nil:
			a.errs[id] = perPolicy[id].Error()
		case perPolicy == nil && err != nil:
			a.errs[id] = err.Error()
		case leftOut[id] != "":
			a.errs[id] = leftOut[id]
		default:
			delete(a.errs, id)
			a.realized[id] = p.Generation
		}
	}
	if a.none != nil && (err == nil || perPolicy != nil) {
		a.ready = true
	}
	var changed []wire.PolicyResult
	for id, r := range a.resultsLocked(st) {
		if before[id] != r {
			changed = append(changed, r)
		}
	}
	return changed
}

// resultsLocked is the recorded outcome of every policy of st at its
// generation in st: realized, or the error of its last attempt. A
// policy whose generation was never attempted has no result. Called with
// a.mu held.
func (a *Agent) resultsLocked(st *wire.NodeState) map[string]wire.PolicyResult {
	out := make(map[string]wire.PolicyResult, len(st.Policies))
	for id, p := range st.Policies {
		switch {
		case a.errs[id] != "":
			out[id] = wire.PolicyResult{PolicyID: id, Generation: p.Generation, Error: a.errs[id]}
		case a.realized[id] == p.Generation:
			out[id] = wire.PolicyResult{PolicyID: id, Generation: p.Generation}
		}
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Ready reports whether the agent does its job: the datapath enforces a
// complete state and, in noEncap mode, the pipeline has the gateway
// (without it pods reach nothing beyond their node). /readyz, the
// agent_ready metric and the query API's status say this.
func (a *Agent) Ready() bool {
	ok, _ := a.readiness()
	return ok
}

// readiness is Ready with the reason when not.
func (a *Agent) readiness() (bool, string) {
	a.mu.Lock()
	ready := a.ready
	a.mu.Unlock()
	if !ready {
		return false, "no complete policy state enforced yet"
	}
	if d := a.datapath(); d != nil && !d.hasGateway() {
		return false, "no gateway yet: pods reach nothing beyond the node (see the node network status)"
	}
	return true, ""
}

// realizedOnce reports whether a complete state has been realized.
func (a *Agent) realizedOnce() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready
}

func (a *Agent) controllerConnected() bool {
	return a.client != nil && a.client.Connected()
}

func (a *Agent) policyCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.state.Policies)
}

// stoppedWithOVS reports whether err, met by a stopping agent, is the
// stop's own doing rather than a fault: the bound the stop gave the call
// ran out or was cancelled, or OVS (which stops with the agent's pod) was
// gone: its OVSDB connection lost.
func stoppedWithOVS(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || ovsdb.ConnectionLost(err)
}
