package realizer

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// Realizer installs the pipeline of one bridge. Its methods are safe for
// concurrent use.
type Realizer struct {
	cfg  pipeline.Config
	inst flowsync.Installer

	mu       sync.Mutex
	round    uint8
	comp     *policyflows.Compiler
	syncer   *flowsync.Syncer
	started  bool
	synced   bool
	adopting bool
	// resync makes the next Update sync every flow (diffed against what
	// the syncer holds) instead of the compiler's changes: after an update
	// that failed on the bridge, whose changes the compiler has already
	// made its own.
	resync bool
	// static are the pipeline's static flows installed (with their keys);
	// the policy flows are the compiler's (policyflows.Compiler.Flows).
	static     []openflow.Flow
	staticKeys []string
	// staticFor are the pods the static flows were built for with the
	// current configuration and round (staticValid; Start and
	// SetTunnelPeers clear it): an Update whose pods are the same skips
	// building and syncing the static flows, a few per pod, which on a
	// node of hundreds of pods were most of a policy change's work.
	staticFor   []pipeline.LocalPod
	staticValid bool
	rules       map[uint32]agentquery.RuleInfo
	warnings    []string
	leftOut     map[string]string
}

// New returns a realizer for the bridge behind inst.
func New(cfg pipeline.Config, inst flowsync.Installer) *Realizer {
	return &Realizer{cfg: cfg, inst: inst, syncer: flowsync.NewSyncer(inst), rules: map[uint32]agentquery.RuleInfo{}}
}

// Start picks a new cookie round. On a bridge without flows of an earlier
// run it installs the pipeline with no pod classified, so nothing passes
// before the first full sync; a previous run's flows are left enforcing
// their policy until the first Update adopts them.
func (r *Realizer) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	stats, err := r.inst.Stats(ctx)
	if err != nil {
		return fmt.Errorf("reading the bridge's flows: %w", err)
	}
	r.round = flowsync.NextRound(stats)
	r.comp = policyflows.NewCompiler(r.round)
	r.started = true
	r.staticValid = false
	for _, st := range stats {
		if _, role, _ := pipeline.DecodeCookie(st.Cookie); role == pipeline.RoleSentinel {
			r.adopting = true
			return nil
		}
	}
	r.static, r.staticKeys = keyed(pipeline.StaticFlows(r.cfg, nil, false, r.round))
	_, err = r.syncer.AdoptKeyed(ctx, r.static, r.staticKeys, r.round)
	return err
}

// keyed returns flows with their keys.
func keyed(flows []openflow.Flow) ([]openflow.Flow, []string) {
	keys := make([]string, len(flows))
	for i := range flows {
		keys[i] = flows[i].Key()
	}
	return flows, keys
}

// desired is every flow of the bridge's pipeline with its key: the static
// flows and the compiler's.
func (r *Realizer) desired() ([]openflow.Flow, []string) {
	policy, policyKeys := r.comp.Flows()
	flows := append(append(make([]openflow.Flow, 0, len(r.static)+len(policy)), r.static...), policy...)
	keys := append(append(make([]string, 0, len(flows)), r.staticKeys...), policyKeys...)
	return flows, keys
}

// Round is the cookie round of this run.
func (r *Realizer) Round() uint8 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.round
}

// SetTunnelPeers replaces the tunnel's peers (nodes joining, leaving or
// moving); the next Update installs the change with everything else in
// one bundle. The tunnel port, like the uplink and the gateway, is fixed
// per realizer.
func (r *Realizer) SetTunnelPeers(peers []pipeline.TunnelPeer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.cfg
	cfg.Tunnel.Peers = peers
	if err := cfg.Validate(); err != nil {
		return err
	}
	r.cfg = cfg
	r.staticValid = false
	return nil
}

// Update makes the bridge enforce in, the agent's complete current state,
// in one atomic bundle. On error nothing changed on the bridge.
func (r *Realizer) Update(ctx context.Context, in policyflows.Input) (flowsync.Bundle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return flowsync.Bundle{}, fmt.Errorf("realizer not started")
	}
	for _, p := range in.Pods {
		if r.cfg.UplinkPort != 0 && p.OFPort == r.cfg.UplinkPort {
			return flowsync.Bundle{}, fmt.Errorf("pod %s on the uplink port %d", p.Pod, p.OFPort)
		}
	}
	res, changes, err := r.comp.CompileChanges(in)
	if err != nil {
		return flowsync.Bundle{}, err
	}
	prevStaticKeys := r.staticKeys
	staticChanged := !r.staticValid || !slices.EqualFunc(r.staticFor, in.Pods, sameLocalPod)
	if staticChanged {
		r.static, r.staticKeys = keyed(pipeline.StaticFlows(r.cfg, in.Pods, true, r.round))
		r.staticFor, r.staticValid = cloneLocalPods(in.Pods), true
	}
	var b flowsync.Bundle
	switch {
	case r.adopting:
		flows, keys := r.desired()
		b, err = r.syncer.AdoptKeyed(ctx, flows, keys, r.round)
	case r.resync:
		flows, keys := r.desired()
		b, err = r.syncer.SyncKeyed(ctx, flows, keys)
	default:
		// Only what changed: the compiler's changes (the flows of the
		// rules whose input changed) and, when the pods changed, the
		// static flows (a few per pod), whatever the number of flows on
		// the bridge.
		if staticChanged {
			changes = withStatic(changes, prevStaticKeys, r.static, r.staticKeys)
		}
		b, err = r.syncer.SyncChanges(ctx, changes)
	}
	if err != nil {
		// The bridge and the syncer are as before; the compiler is not.
		r.resync = true
		return b, err
	}
	r.adopting, r.resync, r.synced = false, false, true
	r.rules, r.warnings, r.leftOut = res.Rules, res.Warnings, res.LeftOut
	return b, nil
}

// withStatic adds to the compiler's changes the static flows: all of them
// as upserts (the syncer skips those installed as they are) and the keys
// of the previous ones that went.
func withStatic(ch flowsync.Changes, prevKeys []string, static []openflow.Flow, keys []string) flowsync.Changes {
	ch.Upserts = append(ch.Upserts, static...)
	ch.Keys = append(ch.Keys, keys...)
	now := make(map[string]bool, len(keys))
	for _, k := range keys {
		now[k] = true
	}
	for _, k := range prevKeys {
		if !now[k] {
			ch.Removes = append(ch.Removes, k)
		}
	}
	return ch
}

// sameLocalPod says whether two local pods are the same for the static
// flows (every field, in order).
func sameLocalPod(a, b pipeline.LocalPod) bool {
	return a.Pod == b.Pod && a.OFPort == b.OFPort && bytes.Equal(a.MAC, b.MAC) && slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Ports, b.Ports)
}

// cloneLocalPods copies pods deeply: the realizer compares the next
// Update's pods with them.
func cloneLocalPods(pods []pipeline.LocalPod) []pipeline.LocalPod {
	out := make([]pipeline.LocalPod, len(pods))
	for i, p := range pods {
		p.MAC, p.IPs, p.Ports = slices.Clone(p.MAC), slices.Clone(p.IPs), slices.Clone(p.Ports)
		out[i] = p
	}
	return out
}

// servicesPart names the Service proxy's share of the bridge in the syncer.
const servicesPart = "services"

// Services is the Service proxy's share of the bridge (package proxy):
// its flows and select groups, and cookies of flows the switch learned
// that must go (session affinity to endpoints that left).
type Services struct {
	Flows []openflow.Flow
	// Keys are the flows' Flow.Key (nil: computed).
	Keys          []string
	Groups        []openflow.Group
	DeleteCookies []flowsync.CookieMask
}

// UpdateServices makes the bridge hold exactly svc as the Service
// proxy's flows and groups, in one atomic bundle, leaving the policy
// pipeline alone. On error nothing changed on the bridge.
func (r *Realizer) UpdateServices(ctx context.Context, svc Services) (flowsync.Bundle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return flowsync.Bundle{}, fmt.Errorf("realizer not started")
	}
	return r.syncer.SyncPart(ctx, servicesPart, svc.Flows, svc.Keys, svc.Groups, flowsync.Bundle{DeleteCookies: svc.DeleteCookies})
}

// ServiceChanges are what changed in the Service proxy's flows and
// groups since its last update (proxy.Compiler.CompileChanges).
type ServiceChanges struct {
	Flows         flowsync.Changes
	Groups        flowsync.GroupChanges
	DeleteCookies []flowsync.CookieMask
}

// UpdateServiceChanges changes the Service proxy's flows and groups by
// ch, in one atomic bundle, leaving the policy pipeline alone: the work is
// that of the changes, whatever the number of Services. On error nothing
// changed on the bridge.
func (r *Realizer) UpdateServiceChanges(ctx context.Context, ch ServiceChanges) (flowsync.Bundle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return flowsync.Bundle{}, fmt.Errorf("realizer not started")
	}
	return r.syncer.SyncPartChanges(ctx, servicesPart, ch.Flows, ch.Groups, flowsync.Bundle{DeleteCookies: ch.DeleteCookies})
}

// LeftOut maps the policies the last update left out of a full table to
// why (policyflows.Result.LeftOut): their pods are isolated instead.
func (r *Realizer) LeftOut() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.leftOut)
}

// Warnings are the last compilation's warnings.
func (r *Realizer) Warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warnings...)
}

// Rules maps the rule IDs in installed cookies and ct_labels to rules: the
// table tooling reads flows back with.
func (r *Realizer) Rules() map[uint32]agentquery.RuleInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint32]agentquery.RuleInfo, len(r.rules))
	for k, v := range r.rules {
		out[k] = v
	}
	return out
}

// Check verifies the sentinel flow of this round is installed and, if it
// is not (ovs-vswitchd restarted, someone ran del-flows), replays every
// flow. It reports whether a replay happened. Call it periodically and from
// the OpenFlow client's reconnect hook.
func (r *Realizer) Check(ctx context.Context) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.adopting {
		return false, nil
	}
	stats, err := r.inst.Stats(ctx)
	if err != nil {
		return false, err
	}
	want := pipeline.Cookie(r.round, pipeline.RoleSentinel, 0)
	for _, st := range stats {
		if st.Cookie == want {
			return false, nil
		}
	}
	return true, r.replayLocked(ctx)
}

// Replay installs every flow again, whatever the bridge holds: for the
// OpenFlow client's reconnect hook when it reports the flows lost. It does
// nothing before the first Update of an agent adopting a previous run's
// flows (that Update installs everything anyway).
func (r *Realizer) Replay(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.adopting {
		return nil
	}
	return r.replayLocked(ctx)
}

// replayLocked re-adds all flows (replacing whatever is left) and deletes
// anything of other rounds, in one bundle.
func (r *Realizer) replayLocked(ctx context.Context) error {
	r.syncer.Forget()
	flows, keys := r.desired()
	_, err := r.syncer.AdoptKeyed(ctx, flows, keys, r.round)
	return err
}

// Stats returns the counters of every flow of this round.
func (r *Realizer) Stats(ctx context.Context) ([]flowsync.FlowStat, error) {
	r.mu.Lock()
	round := r.round
	r.mu.Unlock()
	stats, err := r.inst.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := stats[:0]
	for _, st := range stats {
		if rd, _, _ := pipeline.DecodeCookie(st.Cookie); rd == round {
			out = append(out, st)
		}
	}
	return out, nil
}
