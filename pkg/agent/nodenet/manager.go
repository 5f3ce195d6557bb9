package nodenet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// Options configure a Manager.
type Options struct {
	// Kube is the agent's own client; it needs get, list and watch on
	// Nodes, nothing else.
	Kube     kubernetes.Interface
	NodeName string
	// OVSDB and Bridge: where the gateway port is created.
	OVSDB  *ovsdb.Client
	Bridge string
	// GatewayName is the OVS internal port and Linux interface of the
	// gateway (config nodeNetwork.gatewayName).
	GatewayName string
	// MTU of the gateway interface; 0 leaves the kernel's default.
	MTU int
	// Masquerade: local pods' traffic to destinations outside every
	// Node's pod CIDRs, leaving the node other than through the gateway,
	// gets the node's address as source (iptables nat chain
	// MasqueradeChain). false removes the rules.
	Masquerade bool
	// NetNS is the node's network namespace (a path such as
	// /run/netns/NAME); empty: the agent's own. Tests run several nodes
	// on one machine this way.
	NetNS string
	// Encap selects the encap node network (nil: noEncap).
	Encap *EncapOptions
	// OnGateway is called whenever the gateway's OpenFlow port or
	// addresses change (pipeline.Gateway{} never: once up, a gateway stays
	// until a new one is ready). The agent rebuilds its pipeline with it.
	OnGateway func(pipeline.Gateway)
	// KubeProxyMasqueradeBit is kube-proxy's --iptables-masquerade-bit
	// (config nodeNetwork.kubeProxyMasqueradeBit): connections kube-proxy
	// marks with it that the host forwards into the gateway get the
	// node's InternalIP as source, not the gateway's address (see
	// natRules).
	KubeProxyMasqueradeBit int
	// Adopted is the gateway the pipeline started with (AdoptGateway):
	// Status reports it until the first sync, and OnGateway is called
	// only when a sync finds a different one.
	Adopted pipeline.Gateway
	// Resync is how often everything is re-applied even without a Node
	// event, repairing routes or addresses changed behind the agent's back
	// (default 30s); RetryInterval after a failure (default 2s).
	Resync, RetryInterval time.Duration
	Logger                *slog.Logger
}

// Status is the outcome of the last sync.
type Status struct {
	// Gateway is the gateway the pipeline uses (zero before it is ready).
	Gateway pipeline.Gateway
	// Routes are the routes to other nodes' pods the agent installed.
	Routes []Route
	// Tunnel is the tunnel port and its peers the pipeline uses (encap;
	// zero before it is ready); Endpoint the node's own tunnel address.
	Tunnel   pipeline.Tunnel
	Endpoint netip.Addr
	// Error is why the last sync failed (empty: it succeeded); NodeErrors
	// are nodes that could not be routed.
	Error      string
	NodeErrors map[string]string
}

// Manager keeps the node's gateway and routes in line with the Node
// objects. Every sync is level-triggered: it computes everything from the
// informer's current Nodes.
type Manager struct {
	o    Options
	log  *slog.Logger
	host *host
	kick chan struct{}

	mu     sync.Mutex
	status Status
}

// New checks the options and opens the node's network stack.
func New(o Options) (*Manager, error) {
	switch {
	case o.Kube == nil:
		return nil, errors.New("nodenet: no Kubernetes client")
	case o.OVSDB == nil:
		return nil, errors.New("nodenet: no OVSDB client")
	case o.NodeName == "" || o.Bridge == "" || o.GatewayName == "":
		return nil, errors.New("nodenet: node name, bridge and gateway name are required")
	case o.GatewayName == o.Bridge:
		return nil, fmt.Errorf("nodenet: gateway %q cannot be the bridge's own interface", o.GatewayName)
	}
	if o.Resync <= 0 {
		o.Resync = 30 * time.Second
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnGateway == nil {
		o.OnGateway = func(pipeline.Gateway) {}
	}
	if o.Encap != nil {
		enc := *o.Encap
		switch {
		case enc.TunnelName == "":
			enc.TunnelName = TunnelPortName
		case enc.TunnelName == o.Bridge || enc.TunnelName == o.GatewayName:
			return nil, fmt.Errorf("nodenet: tunnel port %q must differ from the bridge and the gateway", enc.TunnelName)
		}
		if enc.UnderlayBridge != "" && (enc.UnderlayBridge == o.Bridge || enc.UnderlayBridge == o.GatewayName) {
			return nil, fmt.Errorf("nodenet: underlay bridge %q must differ from the bridge and the gateway", enc.UnderlayBridge)
		}
		if enc.OnTunnel == nil {
			enc.OnTunnel = func(pipeline.Tunnel) {}
		}
		o.Encap = &enc
	}
	h, err := openHost(o.NetNS)
	if err != nil {
		return nil, err
	}
	log := o.Logger.With("component", "nodenet")
	h.log = log
	return &Manager{o: o, log: log, host: h, kick: make(chan struct{}, 1),
		status: Status{Gateway: o.Adopted}}, nil
}

// Status returns the outcome of the last sync.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.status
	st.Routes = slices.Clone(st.Routes)
	st.Tunnel.Peers = slices.Clone(st.Tunnel.Peers)
	return st
}

// Trigger asks for a sync now, e.g. after ovs-vswitchd restarted (it may
// have re-created internal ports, without their addresses).
func (m *Manager) Trigger() { m.trigger() }

func (m *Manager) trigger() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run watches Nodes and syncs until ctx ends. Routes and the gateway stay
// when it returns: a restarting agent must not cut the node off.
func (m *Manager) Run(ctx context.Context) error {
	defer m.host.close()
	factory := informers.NewSharedInformerFactory(m.o.Kube, 0)
	inf := factory.Core().V1().Nodes()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.trigger() },
		UpdateFunc: func(old, cur any) { m.trigger() },
		DeleteFunc: func(any) { m.trigger() },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	lister := inf.Lister()
	m.trigger()
	timer := time.NewTimer(m.o.Resync)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
		case <-timer.C:
		}
		nodes, err := lister.List(labels.Everything())
		if err == nil {
			err = m.sync(ctx, nodes)
		}
		m.mu.Lock()
		m.status.Error = ""
		if err != nil {
			m.status.Error = err.Error()
		}
		m.mu.Unlock()
		next := m.o.Resync
		if err != nil {
			m.log.Error("node network sync failed; retrying", "err", err, "in", m.o.RetryInterval)
			next = m.o.RetryInterval
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// sync applies the Nodes: the local one gives the gateway, the others the
// routes. Without a valid local Node nothing changes (what is installed
// stays, what is not is not created), so bad input never opens a path.
func (m *Manager) sync(ctx context.Context, nodes []*corev1.Node) error {
	var local *Node
	var others []Node
	bad := map[string]error{}
	for _, n := range nodes {
		parsed, err := ParseNode(n)
		if n.Name == m.o.NodeName {
			if err != nil {
				return err
			}
			local = &parsed
			continue
		}
		if err != nil {
			bad[n.Name] = err
			continue
		}
		others = append(others, parsed)
	}
	if local == nil {
		return fmt.Errorf("node %s: %w", m.o.NodeName, apierrors.NewNotFound(corev1.Resource("nodes"), m.o.NodeName))
	}
	var v4, v6 bool
	for _, p := range local.PodCIDRs {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	var endpoint netip.Addr
	if m.o.Encap != nil {
		var err error
		if endpoint, err = TunnelEndpoint(*local); err != nil {
			return err
		}
		if m.o.Encap.UnderlayBridge != "" {
			u := &underlay{db: m.o.OVSDB, host: m.host, log: m.log, bridge: m.o.Encap.UnderlayBridge}
			if err := u.ensure(ctx, endpoint); err != nil {
				return err
			}
		}
	}
	if err := m.host.ensureForwarding(v4, v6); err != nil {
		return err
	}
	gw, err := m.ensureGateway(ctx, *local)
	if err != nil {
		return err
	}
	m.mu.Lock()
	changed := !m.status.Gateway.Equal(gw)
	m.status.Gateway = gw
	m.mu.Unlock()
	if changed {
		m.log.Info("gateway ready", "interface", m.o.GatewayName, "ofport", gw.Port, "addresses", gw.IPs)
		m.o.OnGateway(gw)
	}

	var routes []Route
	var nodeErrs map[string]error
	var rerr error
	if m.o.Encap != nil {
		routes, nodeErrs, rerr = m.syncEncap(ctx, *local, endpoint, others, bad)
		if nodeErrs == nil {
			return rerr // the tunnel port is not ready: nothing else changes
		}
	} else {
		routes, nodeErrs = DesiredRoutes(*local, others, bad)
	}
	errStrs := map[string]string{}
	for name, e := range nodeErrs {
		errStrs[name] = e.Error()
		m.log.Warn("node not routed", "node", name, "err", e)
	}
	rerr = errors.Join(rerr, m.host.syncRoutes(routes))
	var cluster []netip.Prefix
	for _, n := range others {
		cluster = append(cluster, n.PodCIDRs...)
	}
	for _, v4 := range []bool{true, false} {
		nc := natConfig{local: local.PodCIDRs, cluster: cluster, gateway: m.o.GatewayName,
			kubeProxyMark: 1 << m.o.KubeProxyMasqueradeBit, masquerade: m.o.Masquerade}
		for _, ip := range local.InternalIPs {
			if ip.Is4() == v4 {
				nc.nodeIP = ip
			}
		}
		if !nc.nodeIP.IsValid() && hasFamily(local.PodCIDRs, v4) {
			m.log.Warn("the node has no InternalIP of a family of its pod CIDRs: connections kube-proxy masquerades into the gateway keep the gateway's address and reach pods as the node itself",
				"ipv4", v4)
		}
		if err := m.host.syncNAT(nc, v4); err != nil {
			rerr = errors.Join(rerr, err)
		}
	}
	installed, lerr := m.host.routes()
	var remote []remoteRoute
	for _, r := range installed {
		remote = append(remote, remoteRoute{dst: r.Dst, iface: r.Iface})
	}
	if err := m.host.syncSpoofGuard(local.PodCIDRs, m.o.GatewayName, remote); err != nil {
		rerr = errors.Join(rerr, err)
	}
	byDst := map[netip.Prefix]string{}
	for _, r := range routes {
		byDst[r.Dst] = r.Node
	}
	for i := range installed {
		installed[i].Node = byDst[installed[i].Dst]
	}
	sort.Slice(installed, func(i, j int) bool { return installed[i].Dst.String() < installed[j].Dst.String() })
	m.mu.Lock()
	m.status.Routes = installed
	m.status.NodeErrors = errStrs
	m.mu.Unlock()
	return errors.Join(rerr, lerr)
}

// gatewayKey marks the gateway's OVS port as the agent's (external_ids).
const gatewayKey = "tierflow.io/gateway"

// ensureGateway creates (or adopts) the gateway's internal port, waits for
// its OpenFlow port and configures its addresses.
func (m *Manager) ensureGateway(ctx context.Context, local Node) (pipeline.Gateway, error) {
	name := m.o.GatewayName
	if err := m.o.OVSDB.AddPort(ctx, m.o.Bridge, ovsdb.PortConfig{Name: name, Type: ovsdb.PortInternal,
		// Not a tierflow.io/role key: the port watcher only tracks pods
		// and the uplink, and must not mistake the gateway for either.
		ExternalIDs: map[string]string{"tierflow.io/managed-by": "tierflow-agent", gatewayKey: "true"}}); err != nil {
		return pipeline.Gateway{}, fmt.Errorf("gateway port %s on %s: %w", name, m.o.Bridge, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	port, err := m.o.OVSDB.WaitOFPort(wctx, name)
	if err != nil {
		// ovs-vswitchd does not retry a port it failed to open (e.g. a
		// device of that name already exists): remove it, so the next
		// attempt creates it anew once the cause is gone.
		if derr := m.o.OVSDB.DeletePort(ctx, m.o.Bridge, name); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the failed port: %w", derr))
		}
		return pipeline.Gateway{}, fmt.Errorf("gateway port %s: %w", name, err)
	}
	prefixes := GatewayPrefixes(local.PodCIDRs)
	mac, err := m.host.configureGateway(name, prefixes, m.o.MTU)
	if err != nil {
		return pipeline.Gateway{}, err
	}
	return gatewayOf(port, mac, prefixes), nil
}

// gatewayOf is the pipeline's gateway with its addresses (the prefixes'
// addresses) and pod CIDRs (their networks), each sorted.
func gatewayOf(port uint32, mac net.HardwareAddr, prefixes []netip.Prefix) pipeline.Gateway {
	gw := pipeline.Gateway{Port: port, MAC: mac}
	for _, p := range prefixes {
		gw.IPs = append(gw.IPs, p.Addr())
		gw.PodCIDRs = append(gw.PodCIDRs, p.Masked())
	}
	sort.Slice(gw.IPs, func(i, j int) bool { return gw.IPs[i].Less(gw.IPs[j]) })
	sort.Slice(gw.PodCIDRs, func(i, j int) bool { return gw.PodCIDRs[i].Addr().Less(gw.PodCIDRs[j].Addr()) })
	return gw
}

// String summarizes a status for logs and errors.
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gateway port %d %v; routes:", s.Gateway.Port, s.Gateway.IPs)
	for _, r := range s.Routes {
		b.WriteString(" " + r.String())
	}
	if s.Error != "" {
		b.WriteString("; error: " + s.Error)
	}
	return b.String()
}
