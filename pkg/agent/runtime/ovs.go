package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/agent/proxy"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// ovsDatapath is one OVS bridge: its ports, its OpenFlow connection and
// the realizer keeping its flows equal to the agent's state.
type ovsDatapath struct {
	node   string
	bridge string
	zone   uint16
	log    *slog.Logger
	m      *agentMetrics

	db      *ovsdb.Client
	watcher *ovsdb.Watcher
	of      *openflow.Client
	inst    *recordingInstaller

	// routed: noEncap or encap node network, where the bridge has a
	// gateway (and in encap a tunnel) and no uplink (an interface marked
	// as uplink is ignored).
	routed bool

	mu sync.Mutex
	r  *realizer.Realizer
	// uplink and gateway are the ports r was built for (pipeline.Config
	// is fixed per realizer: a new uplink or gateway means a new realizer,
	// which adopts the old one's flows in one bundle).
	uplink  uint32
	gateway pipeline.Gateway
	// wantGateway is the gateway pkg/agent/nodenet has ready (routed mode).
	wantGateway pipeline.Gateway
	// tunnel and wantTunnel: the tunnel r was built for (its port; peers
	// change without a new realizer) and the one nodenet has ready
	// (encap).
	tunnel, wantTunnel pipeline.Tunnel
	// pods is the port classification of the last realization;
	// admission what was written to each pod port's external_ids.
	pods      []agentquery.Pod
	admission map[string]string
	// onFlowsLost is called when ovs-vswitchd lost the bridge's flows
	// (it restarted): the node network resyncs (re-created internal ports
	// come back without addresses).
	onFlowsLost func()

	// The Service proxy (nil compiler: disabled): its last input, kept
	// for a new realizer, and its last installed output.
	svcComp  *proxy.Compiler
	svcInput func() proxy.Input
	svcOut   *proxy.Output
	// svcLate takes the flushes to repeat once the switch has
	// revalidated its datapath flows (nil until the Service proxy runs).
	svcLate *lateFlushes
}

func (d *ovsDatapath) setOnFlowsLost(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onFlowsLost = f
}

// openOVS ensures the bridge, starts watching its ports (onPorts is called
// on every change) and starts the realizer. In routed mode (noEncap, encap) the
// realizer starts with the gateway a previous run left on the node
// (nodenet.AdoptGateway), so that a restarted agent's first realization
// keeps the node's pods connected; without one it starts without a
// gateway (pods reach only local pods: nothing is opened before the
// gateway is ready).
func openOVS(ctx context.Context, o *Options, log *slog.Logger, m *agentMetrics, onPorts func()) (*ovsDatapath, error) {
	cfg := o.Config
	d := &ovsDatapath{node: cfg.NodeName, bridge: cfg.BridgeName, zone: o.CtZone, log: log, m: m,
		routed: cfg.NodeNetwork.Mode != config.NodeNetworkUplink}
	var ofOpts openflow.Options
	if cfg.ServiceProxy.Enabled {
		d.svcComp = proxy.NewCompiler(cfg.NodeName, o.CtZone)
		// New connections to Services without endpoints come here to be
		// rejected.
		rej := proxy.NewRejecter(func(port uint32, frame []byte) error {
			return d.of.PacketOut(context.Background(), port, frame)
		}, func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...)) })
		ofOpts.OnPacketIn = rej.Handle
	}
	db, err := ovsdb.Connect(ctx, "unix:"+cfg.OVSDBSocketPath(), ovsdb.Options{})
	if err != nil {
		return nil, err
	}
	d.db = db
	created, err := db.EnsureBridge(ctx, ovsdb.BridgeConfig{Name: cfg.BridgeName, DatapathType: cfg.DatapathType,
		ExternalIDs: map[string]string{"tierflow.io/managed-by": "tierflow-agent"}})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("bridge %s: %w", cfg.BridgeName, err)
	}
	log.Info("bridge ready", "bridge", cfg.BridgeName, "created", created, "datapathType", cfg.DatapathType)
	d.watcher, err = db.WatchPorts(ctx, func(ev ovsdb.Event) {
		log.Debug("port event", "type", ev.Type.String(), "interface", ev.Port.Interface, "pod", ev.Port.PodKey(), "ofport", ev.Port.OFPort)
		onPorts()
	})
	if err != nil {
		d.close()
		return nil, err
	}

	target := "unix:" + cfg.OpenFlowSocketPath()
	ofOpts.OnConnect = func(_ context.Context, _ *openflow.Client, ev openflow.ConnectEvent) error {
		m.ofConnects.Inc()
		if ev.Reconnect && ev.FlowsLost {
			log.Warn("bridge lost its flows (ovs-vswitchd restarted?); replaying")
			// Asynchronous: Replay takes the realizer's lock, which an
			// Update blocked on this very connection may hold.
			go d.replay()
			d.mu.Lock()
			lost := d.onFlowsLost
			d.mu.Unlock()
			if lost != nil {
				lost()
			}
		}
		return nil
	}
	ofOpts.Logf = func(format string, args ...any) { log.Info("openflow: " + fmt.Sprintf(format, args...)) }
	of, err := openflow.Dial(ctx, target, ofOpts)
	if err != nil {
		d.close()
		return nil, fmt.Errorf("openflow %s: %w", target, err)
	}
	d.of = of
	d.inst = &recordingInstaller{inner: flowsync.Client{C: of}, m: m, applied: of.LastApplied, flows: map[string]openflow.Flow{}}
	_, uplink, err := d.ports(ctx)
	if err != nil {
		d.close()
		return nil, err
	}
	if d.routed {
		d.wantGateway = adoptGateway(ctx, o, db, log)
	}
	// The tunnel comes from the node network, once it knows the peers.
	if err := d.startRealizer(ctx, uplink, d.wantGateway, pipeline.Tunnel{}); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// adoptGateway is the gateway a previous run left (zero: none usable).
func adoptGateway(ctx context.Context, o *Options, db *ovsdb.Client, log *slog.Logger) pipeline.Gateway {
	gw, ok, err := nodenet.AdoptGateway(ctx, nodenet.Options{OVSDB: db, Bridge: o.Config.BridgeName,
		GatewayName: o.Config.NodeNetwork.GatewayName, NetNS: o.NodeNetNS})
	switch {
	case err != nil:
		log.Warn("cannot read the gateway a previous run left; starting without one", "err", err)
	case ok:
		log.Info("gateway adopted", "interface", o.Config.NodeNetwork.GatewayName, "ofport", gw.Port, "addresses", gw.IPs)
	}
	return gw
}

// startRealizer replaces the realizer by one for uplink port uplink,
// gateway gw and tunnel t. Called with d.mu held or before d is shared.
func (d *ovsDatapath) startRealizer(ctx context.Context, uplink uint32, gw pipeline.Gateway, t pipeline.Tunnel) error {
	pc := pipeline.Config{UplinkPort: uplink, CtZone: d.zone, Gateway: gw, Tunnel: t}
	if err := pc.Validate(); err != nil {
		return err
	}
	r := realizer.New(pc, d.inst)
	if err := r.Start(ctx); err != nil {
		d.m.ofErrors.WithLabelValues("start").Inc()
		return fmt.Errorf("starting the realizer on %s: %w", d.bridge, err)
	}
	d.r, d.uplink, d.gateway, d.tunnel = r, uplink, gw, t
	d.log.Info("realizer started", "round", r.Round(), "uplinkPort", uplink, "gatewayPort", gw.Port, "gatewayIPs", gw.IPs, "tunnelPort", t.Port)
	return nil
}

// setTunnel records the tunnel nodenet made ready; the next realization
// installs it.
func (d *ovsDatapath) setTunnel(t pipeline.Tunnel) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wantTunnel = t
}

// setGateway records the gateway nodenet made ready; the next
// realization rebuilds the pipeline with it.
func (d *ovsDatapath) setGateway(gw pipeline.Gateway) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wantGateway = gw
}

// hasGateway reports whether the pipeline has a gateway, or needs none
// (uplink mode): in routed mode without one, pods reach nothing beyond
// their node.
func (d *ovsDatapath) hasGateway() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.routed || d.gateway.Port != 0
}

func (d *ovsDatapath) current() *realizer.Realizer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.r
}

func (d *ovsDatapath) replay() {
	r := d.current()
	if r == nil {
		return
	}
	if err := r.Replay(context.Background()); err != nil {
		d.m.ofErrors.WithLabelValues("replay").Inc()
		d.log.Error("replaying flows", "err", err)
	}
}

// check replays everything when the sentinel flow is gone.
func (d *ovsDatapath) check(ctx context.Context) {
	r := d.current()
	if r == nil {
		return
	}
	replayed, err := r.Check(ctx)
	if err != nil {
		d.m.ofErrors.WithLabelValues("check").Inc()
		d.log.Warn("checking the bridge's flows", "err", err)
	}
	if replayed {
		d.log.Warn("bridge had lost its flows; replayed them")
	}
}

// realize makes the bridge enforce st with the current ports. It returns
// the compiler's warnings and the policies left out of a full table
// (their pods isolated instead) with why.
// The bundleTiming is of the bundles it sent.
func (d *ovsDatapath) realize(ctx context.Context, st *wire.NodeState) ([]string, map[string]string, bundleTiming, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inst.takeTiming() // bundles not of this realization (Service proxy)
	warnings, leftOut, err := d.realizeLocked(ctx, st)
	return warnings, leftOut, d.inst.takeTiming(), err
}

func (d *ovsDatapath) realizeLocked(ctx context.Context, st *wire.NodeState) ([]string, map[string]string, error) {
	ports, uplink, err := d.ports(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A tunnel needs the gateway: until both are ready the pipeline has
	// neither the tunnel nor its peers.
	tunnel := d.wantTunnel
	if d.wantGateway.Port == 0 {
		tunnel = pipeline.Tunnel{}
	}
	if uplink != d.uplink || !d.gateway.Equal(d.wantGateway) || tunnel.Port != d.tunnel.Port || d.r == nil {
		d.log.Info("uplink, gateway or tunnel port changed; restarting the realizer", "oldUplink", d.uplink, "uplink", uplink,
			"oldGateway", d.gateway.Port, "gateway", d.wantGateway.Port, "oldTunnel", d.tunnel.Port, "tunnel", tunnel.Port)
		if err := d.startRealizer(ctx, uplink, d.wantGateway, tunnel); err != nil {
			return nil, nil, err
		}
		// The Service flows first (the new round's), so the adopting
		// policy bundle replaces a pipeline whose Services work.
		if _, err := d.applyServicesLocked(ctx); err != nil {
			d.log.Error("service proxy: realization on the new realizer failed", "err", err)
		}
	} else if !slices.EqualFunc(d.tunnel.Peers, tunnel.Peers, samePeer) {
		if err := d.r.SetTunnelPeers(tunnel.Peers); err != nil {
			return nil, nil, err
		}
		d.tunnel = tunnel
	}
	local, pods := classifyPorts(ports, namedPorts(st), st.Pods)
	d.pods = pods
	in := policyflows.Input{Node: d.node, Policies: sortedPolicies(st), AppliedToGroups: st.AppliedToGroups,
		AddressGroups: st.AddressGroups, Pods: local}
	_, err = d.r.Update(ctx, in)
	d.writeAdmission(ctx, pods, err == nil)
	if err != nil {
		return nil, nil, err
	}
	return d.r.Warnings(), d.r.LeftOut(), nil
}

// pendAll records every pod port as not admitted, for why: before the
// agent holds a complete state, nothing is.
func (d *ovsDatapath) pendAll(ctx context.Context, why string) {
	ports, _, err := d.ports(ctx)
	if err != nil {
		return
	}
	_, pods := classifyPorts(ports, nil, nil)
	for i := range pods {
		if pods[i].Error == "" {
			pods[i].Error = why
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeAdmission(ctx, pods, false)
}

// writeAdmission records each pod port's admission in its OVSDB
// external_ids (ovsdb.KeyAdmission), where tierflow-cni's ADD waits for
// it: "admitted" once the realization that classifies the port is
// installed (realized), else "pending: " and why. Only changes are
// written. Called with d.mu held.
func (d *ovsDatapath) writeAdmission(ctx context.Context, pods []agentquery.Pod, realized bool) {
	if d.admission == nil {
		d.admission = map[string]string{}
	}
	seen := map[string]bool{}
	for _, p := range pods {
		seen[p.Interface] = true
		want := ovsdb.AdmissionAdmitted
		switch {
		case p.Error != "":
			want = "pending: " + p.Error
		case !realized:
			continue // the previous flows stay, and so does what was written
		}
		if d.admission[p.Interface] == want {
			continue
		}
		if err := d.db.SetInterfaceExternalID(ctx, p.Interface, ovsdb.KeyAdmission, want); err != nil {
			d.log.Warn("cannot record a pod port's admission", "interface", p.Interface, "err", err)
			continue
		}
		d.admission[p.Interface] = want
	}
	for iface := range d.admission {
		if !seen[iface] {
			delete(d.admission, iface)
		}
	}
}

// ports returns the watched ports of this bridge (the watcher sees every
// bridge of the database) and the uplink's OpenFlow port (0: none).
func (d *ovsDatapath) ports(ctx context.Context) ([]ovsdb.PortInfo, uint32, error) {
	mine, err := d.db.BridgeInterfaces(ctx, d.bridge)
	if err != nil {
		return nil, 0, fmt.Errorf("ports of bridge %s: %w", d.bridge, err)
	}
	var out []ovsdb.PortInfo
	var uplink uint32
	for _, p := range d.watcher.Ports() {
		if !mine[p.Interface] {
			continue
		}
		if p.IsUplink() {
			if !d.routed && (uplink == 0 || (p.OFPort != 0 && p.OFPort < uplink)) {
				uplink = p.OFPort
			}
			continue
		}
		out = append(out, p)
	}
	return out, uplink, nil
}

func samePeer(a, b pipeline.TunnelPeer) bool {
	return a.Node == b.Node && a.IP == b.IP && slices.Equal(a.PodCIDRs, b.PodCIDRs)
}

// pod returns the port of a local pod.
func (d *ovsDatapath) pod(ctx context.Context, namespace, name string) (ovsdb.PortInfo, bool) {
	ports, _, err := d.ports(ctx)
	if err != nil {
		return ovsdb.PortInfo{}, false
	}
	for _, p := range ports {
		if p.PodNamespace == namespace && p.PodName == name {
			return p, true
		}
	}
	return ovsdb.PortInfo{}, false
}

func (d *ovsDatapath) close() {
	if d.of != nil {
		// Closing the connection leaves every flow installed.
		d.of.Close()
	}
	if d.watcher != nil {
		d.watcher.Stop()
	}
	if d.db != nil {
		d.db.Close()
	}
}

// classifyPorts turns the watcher's ports into the realizer's local pods.
// Ports that cannot be trusted are left out (their traffic is dropped by
// the classifier) and returned with the reason. So are the ports the
// controller's state does not admit (admission): a pod has no
// connectivity until the node's state lists it, by UID, with its
// addresses.
func classifyPorts(ports []ovsdb.PortInfo, named map[model.PodRef][]model.NamedPort, admitted *model.NodePods) ([]pipeline.LocalPod, []agentquery.Pod) {
	byRef := map[model.PodRef]model.NodePod{}
	if admitted != nil {
		for _, p := range admitted.Pods {
			byRef[p.Pod] = p
		}
	}
	var cands []pipeline.LocalPod
	var out []agentquery.Pod
	byPod := map[model.PodRef]int{}
	byIP := map[netip.Addr]int{}
	errs := map[int]string{}
	for _, p := range ports {
		if p.IsUplink() {
			continue
		}
		ref := model.PodRef{Namespace: p.PodNamespace, Name: p.PodName}
		qp := agentquery.Pod{Namespace: ref.Namespace, Name: ref.Name, Interface: p.Interface, OFPort: p.OFPort, MAC: p.MAC.String(), IPs: p.IPs}
		i := len(out)
		out = append(out, qp)
		lp := pipeline.LocalPod{Pod: ref, OFPort: p.OFPort, MAC: p.MAC, IPs: p.IPs, Ports: named[ref]}
		switch {
		case p.Error != "":
			errs[i] = "interface error: " + p.Error
		case p.OFPort == 0:
			errs[i] = "no OpenFlow port yet"
		default:
			if err := lp.Validate(); err != nil {
				errs[i] = err.Error()
			} else if why := admission(p, byRef); why != "" {
				errs[i] = why
			}
		}
		if _, bad := errs[i]; bad {
			cands = append(cands, pipeline.LocalPod{})
			continue
		}
		cands = append(cands, lp)
		// Two ports claiming one pod or one address: neither is trusted,
		// since either could be a stale or spoofing interface.
		if j, dup := byPod[ref]; dup {
			errs[i] = "pod claimed by two interfaces: " + out[j].Interface + " and " + p.Interface
			errs[j] = errs[i]
		} else {
			byPod[ref] = i
		}
		for _, ip := range p.IPs {
			if j, dup := byIP[ip]; dup && j != i {
				errs[i] = fmt.Sprintf("address %s claimed by two interfaces: %s and %s", ip, out[j].Interface, p.Interface)
				errs[j] = errs[i]
			} else {
				byIP[ip] = i
			}
		}
	}
	var local []pipeline.LocalPod
	for i := range out {
		if e, bad := errs[i]; bad {
			out[i].Error = e
			continue
		}
		local = append(local, cands[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Interface < out[j].Interface })
	return local, out
}

// admission says why the node's state does not admit a pod's port ("":
// it does): the pod must be listed with the port's UID, and with the
// port's addresses, so that the groups of every node carry them.
func admission(p ovsdb.PortInfo, byRef map[model.PodRef]model.NodePod) string {
	ref := model.PodRef{Namespace: p.PodNamespace, Name: p.PodName}
	e, ok := byRef[ref]
	switch {
	case p.PodUID == "":
		return "not admitted: the port carries no pod UID (" + ovsdb.KeyPodUID + ")"
	case !ok:
		return "not admitted: the controller's state for this node does not list the pod (yet)"
	case string(e.UID) != p.PodUID:
		return fmt.Sprintf("not admitted: the controller's pod %s has UID %s, the port's is %s (a deleted pod's port?)", ref, e.UID, p.PodUID)
	case len(e.IPs) == 0:
		return "not admitted: the controller has no addresses for the pod yet (or another pod still claims them)"
	case !slices.Equal(e.IPs, p.IPs):
		return fmt.Sprintf("not admitted: the controller has the pod's addresses as %v, the port's are %v", e.IPs, p.IPs)
	}
	return ""
}

// attachedPods are the pod ports of the bridge with the identity and
// addresses their CNI plugin recorded (wire.PodsReport): what the
// controller takes a new pod's addresses from until its status has them.
func (d *ovsDatapath) attachedPods(ctx context.Context) []model.NodePod {
	ports, _, err := d.ports(ctx)
	if err != nil {
		return nil
	}
	var out []model.NodePod
	for _, p := range ports {
		if p.PodUID == "" || p.Error != "" || len(p.IPs) == 0 {
			continue
		}
		out = append(out, model.NodePod{Pod: model.PodRef{Namespace: p.PodNamespace, Name: p.PodName}, UID: types.UID(p.PodUID), IPs: p.IPs})
	}
	return out
}

// podsInfo answers /v1/pods.
func (d *ovsDatapath) podsInfo(ctx context.Context) agentquery.Pods {
	d.mu.Lock()
	pods := append([]agentquery.Pod(nil), d.pods...)
	d.mu.Unlock()
	ports, uplink, err := d.ports(ctx)
	if pods == nil && err == nil {
		// Before the first realization: classify now for the answer.
		_, pods = classifyPorts(ports, nil, nil)
	}
	out := agentquery.Pods{Uplink: uplink, Pods: pods, Invalid: map[string]string{}}
	mine, _ := d.db.BridgeInterfaces(ctx, d.bridge)
	for name, err := range d.watcher.Invalid() {
		if mine[name] {
			out.Invalid[name] = err.Error()
		}
	}
	return out
}

// recordingInstaller is the realizer's Installer: it installs through the
// OpenFlow client and remembers the flows the bridge holds (Stats reports
// only identities and counters), for the query API.
type recordingInstaller struct {
	inner flowsync.Installer
	m     *agentMetrics
	// applied is when the switch confirmed the last change
	// (openflow.Client.LastApplied; nil: the return of Apply).
	applied func() time.Time

	mu    sync.Mutex
	flows map[string]openflow.Flow // by Flow.Key
	// timing of the bundles since the last takeTiming.
	timing bundleTiming
}

// takeTiming returns the timing of the bundles applied since the last
// call, and starts anew. Bundles are applied under ovsDatapath.mu, as is
// this called, so they are the caller's.
func (r *recordingInstaller) takeTiming() bundleTiming {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.timing
	r.timing = bundleTiming{}
	return t
}

func (r *recordingInstaller) Apply(ctx context.Context, b flowsync.Bundle) error {
	start := time.Now()
	if err := r.inner.Apply(ctx, b); err != nil {
		var fe *openflow.FlowError
		if errors.As(err, &fe) {
			r.m.ofErrors.WithLabelValues("flow").Inc()
		} else {
			r.m.ofErrors.WithLabelValues("bundle").Inc()
		}
		return err
	}
	committed := time.Now()
	if r.applied != nil {
		committed = r.applied()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b.ApplyTo(r.flows)
	if b.Empty() {
		return nil
	}
	if r.timing.start.IsZero() {
		r.timing.start = start
	}
	r.timing.committed = committed
	r.timing.changes += len(b.Add) + len(b.Modify) + len(b.Delete) + len(b.DeleteCookies) + len(b.Groups)
	return nil
}

func (r *recordingInstaller) Stats(ctx context.Context) ([]flowsync.FlowStat, error) {
	st, err := r.inner.Stats(ctx)
	if err != nil {
		r.m.ofErrors.WithLabelValues("stats").Inc()
	}
	return st, err
}

// installed returns the flows of round.
func (r *recordingInstaller) installed(round uint8) []openflow.Flow {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]openflow.Flow, 0, len(r.flows))
	for _, f := range r.flows {
		if rd, _, _ := pipeline.DecodeCookie(f.Cookie); rd == round {
			out = append(out, f)
		}
	}
	return out
}

// GroupIDs lets an adopting realizer delete an earlier run's groups.
func (r *recordingInstaller) GroupIDs(ctx context.Context) ([]uint32, error) {
	if gl, ok := r.inner.(flowsync.GroupLister); ok {
		return gl.GroupIDs(ctx)
	}
	return nil, nil
}

// wantGatewayNow is the gateway the next realization uses.
func (d *ovsDatapath) wantGatewayNow() pipeline.Gateway {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.wantGateway
}
