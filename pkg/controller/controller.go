package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	npinformers "sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/model"
)

// Config is what a Controller needs.
type Config struct {
	// Kube and Policy are the clients to watch and write with.
	Kube   kubernetes.Interface
	Policy npclient.Interface
	// Engine receives every API change. Nil: the controller makes its own.
	Engine *compute.Engine
	// Identity names this replica: the field manager of its status writes
	// and the host of its Events. Default "tierflow-controller".
	Identity string
	// CRDPollInterval is how often discovery is asked whether a missing
	// policy CRD has been installed. Default 10s.
	CRDPollInterval time.Duration
	// ResyncPeriod of the informers; 0 disables resync (the handlers are
	// level-triggered and the engine is exact, so none is needed).
	ResyncPeriod time.Duration
	// Workers sync status concurrently. Default 2.
	Workers int
	// Realization, when set, supplies the Realized condition.
	Realization RealizationSource
	// Registry receives the controller's metrics (MetricsHandler serves
	// it); nil: a registry of its own. Other parts of the process (the
	// distribution server) register theirs in the same one.
	Registry *prometheus.Registry
	// KindSyncGrace bounds how long status writes wait for a policy kind
	// whose informer cannot list (e.g. RBAC forbids it), so one broken
	// kind does not stop status for the others. Default 1m.
	KindSyncGrace time.Duration
}

// Controller feeds API objects into the engine and writes status back.
type Controller struct {
	cfg     Config
	engine  *compute.Engine
	metrics *metrics

	kubeFactory   informers.SharedInformerFactory
	policyFactory npinformers.SharedInformerFactory
	coreSynced    []cache.InformerSynced
	npInformer    cache.SharedIndexInformer

	mu    sync.Mutex
	kinds map[model.PolicyKind]*policyKind // network-policy-api kinds, by kind
	// refs remembers the API object and last seen generation of each
	// computed policy ID, so that a Deleted change (after which the engine
	// no longer knows the ID) still reaches the right queue key, and a
	// change of span alone (same generation) queues no status sync.
	refs map[string]knownPolicy
	// npFindings is the last set of findings emitted as Events per
	// NetworkPolicy, so Events are emitted only when findings change.
	npFindings map[model.PolicyRef]string
	// changedPolicies collects engine changes (policy ID → last change)
	// for resolveChanges; policiesChanged wakes it.
	changedPolicies map[string]compute.ChangeType
	policiesChanged chan struct{}
	// computedGauges are the computedObjects gauges, by object kind.
	computedGauges map[compute.ObjectKind]prometheus.Gauge

	// events carries informer events to the engine in batches.
	events *eventQueue
	// earlyPods feeds the pods of the initial list while they stream.
	earlyPods *earlyPods

	queue       workqueue.TypedRateLimitingInterface[model.PolicyRef]
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	started     bool
}

// New builds a controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.Kube == nil || cfg.Policy == nil {
		return nil, errors.New("controller: Config.Kube and Config.Policy are required")
	}
	if cfg.Identity == "" {
		cfg.Identity = "tierflow-controller"
	}
	if cfg.CRDPollInterval <= 0 {
		cfg.CRDPollInterval = 10 * time.Second
	}
	if cfg.KindSyncGrace <= 0 {
		cfg.KindSyncGrace = time.Minute
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Engine == nil {
		cfg.Engine = compute.New()
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:        cfg,
		engine:     cfg.Engine,
		metrics:    m,
		kinds:      map[model.PolicyKind]*policyKind{},
		refs:       map[string]knownPolicy{},
		events:     newEventQueue(cfg.Engine),
		npFindings: map[model.PolicyRef]string{},

		changedPolicies: map[string]compute.ChangeType{},
		policiesChanged: make(chan struct{}, 1),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[model.PolicyRef](),
			workqueue.TypedRateLimitingQueueConfig[model.PolicyRef]{Name: "tierflow-status"}),
	}
	c.computedGauges = map[compute.ObjectKind]prometheus.Gauge{}
	for _, k := range []compute.ObjectKind{compute.KindPolicy, compute.KindAppliedToGroup, compute.KindAddressGroup} {
		c.computedGauges[k] = m.computedObjects.WithLabelValues(string(k))
	}
	// The core caches keep only what the controller reads (transform.go,
	// informers.go); the policy kinds' keep everything but the managed
	// fields (status writes send the object back).
	c.kubeFactory = NewCoreInformerFactory(cfg.Kube, cfg.ResyncPeriod)
	c.policyFactory = npinformers.NewSharedInformerFactoryWithOptions(cfg.Policy, cfg.ResyncPeriod, npinformers.WithTransform(stripManagedFields))
	for _, k := range policyKinds(c) {
		c.kinds[k.kind] = k
	}
	if err := c.registerCoreHandlers(); err != nil {
		return nil, err
	}
	return c, nil
}

// Engine is the engine the controller feeds.
func (c *Controller) Engine() *compute.Engine { return c.engine }

// Identity is the controller's replica name.
func (c *Controller) Identity() string { return c.cfg.Identity }

func stripManagedFields(obj interface{}) (interface{}, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Run starts the informers and status workers and blocks until ctx is
// done. A Controller runs once.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("controller: Run called twice")
	}
	c.started = true
	c.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("controller", c.cfg.Identity)

	c.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cfg.Kube.CoreV1().Events("")})
	c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "tierflow-controller", Host: c.cfg.Identity})
	defer c.broadcaster.Shutdown()
	defer c.queue.ShutDown()

	unsubscribe := c.engine.Subscribe(c.onEngineChanges)
	defer unsubscribe()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.resolveChanges(ctx)
	}()
	go func() {
		defer wg.Done()
		c.events.run(ctx)
	}()

	c.kubeFactory.Start(ctx.Done())
	defer c.kubeFactory.Shutdown()
	defer c.policyFactory.Shutdown()
	// Look for the policy CRDs once before waiting, so objects that exist
	// at start are in the engine when the first status is written.
	c.discoverPolicyKinds(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.coreSynced...) {
		return nil // stopped before the caches synced
	}
	c.waitPolicyKindsSynced(ctx)
	logger.Info("caches synced; writing status", "kinds", c.WatchedKinds())

	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, c.discoverPolicyKinds, c.cfg.CRDPollInterval)
	}()
	for i := 0; i < c.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// HasSynced reports whether every started informer has delivered its
// initial list to the engine.
func (c *Controller) HasSynced() bool {
	if !c.coreHasSynced() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.kinds {
		if k.informer != nil && !k.synced() {
			return false
		}
	}
	return true
}

func (c *Controller) coreHasSynced() bool {
	for _, s := range c.coreSynced {
		if !s() {
			return false
		}
	}
	return true
}

// policyKindsSettled reports whether every watched policy kind has listed,
// not counting a kind stuck for longer than KindSyncGrace (its list keeps
// failing, e.g. for lack of RBAC): one broken kind must not stop status
// for the others forever.
func (c *Controller) policyKindsSettled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.kinds {
		if k.informer != nil && !k.synced() && time.Since(k.watchedSince) < c.cfg.KindSyncGrace {
			return false
		}
	}
	return true
}

// WatchedKinds lists the network-policy-api kinds being watched (their
// CRDs were found).
func (c *Controller) WatchedKinds() []model.PolicyKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []model.PolicyKind
	for _, k := range []model.PolicyKind{model.KindAdminNetworkPolicy, model.KindBaselineAdminNetworkPolicy, model.KindClusterNetworkPolicy} {
		if c.kinds[k].informer != nil {
			out = append(out, k)
		}
	}
	return out
}

// RealizationChanged tells the controller that a policy's realization
// summary changed, so its status is rewritten.
func (c *Controller) RealizationChanged(ref model.PolicyRef) {
	c.queue.Add(queueKey(ref))
}

// knownPolicy is what the controller remembers of a computed policy: its
// API object (the engine's, shared: 16 bytes per policy instead of 64)
// and generation.
type knownPolicy struct {
	source     *model.PolicyRef
	generation int64
}

func queueKey(ref model.PolicyRef) model.PolicyRef {
	ref.UID = ""
	return ref
}

// handlerFuncs queues one kind's events for the engine (see eventQueue),
// with tombstone handling and object counting. after, when set, runs once
// the engine has applied an event of that object.
func (c *Controller) handlerFuncs(kind string, upsert func(w compute.Writer, obj interface{}), del func(w compute.Writer, m metav1.Object), after func(m metav1.Object)) cache.ResourceEventHandlerFuncs {
	return c.handlersOf(c.eventKindOf(kind, upsert, del, after), nil)
}

// eventKindOf is how one kind's events reach the engine.
func (c *Controller) eventKindOf(kind string, upsert func(w compute.Writer, obj interface{}), del func(w compute.Writer, m metav1.Object), after func(m metav1.Object)) *eventKind {
	return &eventKind{kind: kind, upsert: upsert, del: del, after: after, observer: c.metrics.syncDuration.WithLabelValues(kind, "engine")}
}

// handlersOf queues the events of kind k; early, when set, is the kind's
// early feed (pods: see earlyPods), which an event of an object it fed
// passes first.
func (c *Controller) handlersOf(k *eventKind, early *earlyPods) cache.ResourceEventHandlerFuncs {
	objects := c.metrics.apiObjects.WithLabelValues(k.kind)
	queue := func(m metav1.Object, obj interface{}, deleted bool) {
		if early != nil && early.delivered(m, obj, deleted) {
			return // fed while it streamed: queued already
		}
		c.events.push(eventKey{kind: k.kind, namespace: m.GetNamespace(), name: m.GetName()}, k, m, deleted)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			objects.Inc()
			if m, ok := obj.(metav1.Object); ok {
				queue(m, obj, false)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if m, ok := obj.(metav1.Object); ok {
				queue(m, obj, false)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			objects.Dec()
			if m, ok := obj.(metav1.Object); ok {
				queue(m, obj, true)
			}
		},
	}
}

func (c *Controller) registerCoreHandlers() error {
	var errs []error
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler, early *earlyPods) {
		// AddEventHandler fails only on a stopped informer; these are new.
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			errs = append(errs, fmt.Errorf("controller: adding an event handler: %w", err))
			return
		}
		// The registration's HasSynced (unlike the informer's) is true only
		// once the handler has seen the initial list; syncedAfter adds
		// that the engine has applied it (and, for pods, that the early
		// feed's pods missing from the list are deleted from it).
		synced := reg.HasSynced
		if early != nil {
			synced = func() bool {
				if !reg.HasSynced() {
					return false
				}
				early.finish()
				return true
			}
		}
		c.coreSynced = append(c.coreSynced, c.events.syncedAfter(synced))
	}
	add(c.kubeFactory.Core().V1().Namespaces().Informer(), c.handlerFuncs("Namespace",
		func(w compute.Writer, obj interface{}) {
			if ns, ok := obj.(*cachedNamespace); ok {
				w.UpsertNamespace(ns.Namespace())
			}
		},
		func(w compute.Writer, m metav1.Object) { w.DeleteNamespace(m.GetName()) }, nil), nil)
	add(c.kubeFactory.Core().V1().Nodes().Informer(), c.handlerFuncs("Node",
		func(w compute.Writer, obj interface{}) {
			if n, ok := obj.(*cachedNode); ok {
				w.UpsertNode(n.Node())
			}
		},
		func(w compute.Writer, m metav1.Object) { w.DeleteNode(m.GetName()) }, nil), nil)
	c.npInformer = c.kubeFactory.Networking().V1().NetworkPolicies().Informer()
	add(c.npInformer, c.networkPolicyHandler(), nil)
	pods := c.eventKindOf(podKind,
		func(w compute.Writer, obj interface{}) {
			if p, ok := obj.(*cachedPod); ok {
				w.UpsertPreparedPod(p.prepared)
			}
		},
		func(w compute.Writer, m metav1.Object) { w.DeletePod(m.GetNamespace(), m.GetName()) }, nil)
	// The pods of the initial list reach the engine as they stream in
	// (earlyPods: they are most of a start's work, and the stream about
	// half of its time).
	others := len(c.coreSynced) // namespaces, nodes, NetworkPolicies
	early := newEarlyPods(c.events, pods, func() bool {
		for _, s := range c.coreSynced[:others] {
			if !s() {
				return false
			}
		}
		return true
	})
	c.earlyPods = early
	podInformer := c.kubeFactory.Core().V1().Pods().Informer()
	if err := podInformer.SetTransform(early.transform); err != nil {
		errs = append(errs, fmt.Errorf("controller: setting the pod informer's transform: %w", err))
	}
	add(podInformer, c.handlersOf(pods, early), early)
	return errors.Join(errs...)
}

// networkPolicyHandler feeds NetworkPolicies into the engine and queues
// their findings for Events.
func (c *Controller) networkPolicyHandler() cache.ResourceEventHandlerFuncs {
	return c.handlerFuncs(string(model.KindNetworkPolicy),
		func(w compute.Writer, obj interface{}) {
			if np, ok := obj.(*cachedNetworkPolicy); ok {
				w.UpsertCompiled(np.compiled)
			}
		},
		func(w compute.Writer, m metav1.Object) { w.DeleteNetworkPolicy(m.GetNamespace(), m.GetName()) },
		func(m metav1.Object) {
			// Every change of what the engine computed for a policy
			// reaches resolveChanges, which queues the policy when it has
			// findings to report. Here only a policy with findings on
			// record is queued (its Events may need correcting, or its
			// record dropping): the initial list of 10,000 clean
			// NetworkPolicies queues nothing.
			ref := model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: m.GetNamespace(), Name: m.GetName()}
			if c.hasFindingsRecord(ref) {
				c.queue.Add(ref)
			}
		})
}

// hasFindingsRecord reports whether Events were emitted for a
// NetworkPolicy's findings (and not yet withdrawn).
func (c *Controller) hasFindingsRecord(ref model.PolicyRef) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, had := c.npFindings[ref]
	return had
}

// onEngineChanges notes every policy whose computed form changed: its
// conditions may have changed, including through another policy (a
// same-priority warning appears or goes). It must not call the engine: it
// runs under the engine's notification lock, and another engine call may
// be holding the engine's main lock while waiting for it. resolveChanges
// turns the IDs into queue keys outside that lock.
//
// A policy reported at the generation already seen changed its span only:
// its status (findings; realization comes from the distribution layer) is
// what it was, so no sync is queued. On a large cluster's start that is
// most policy changes.
func (c *Controller) onEngineChanges(changes []compute.Change) {
	var delta [3]float64 // Policy, AppliedToGroup, AddressGroup
	kindIndex := func(k compute.ObjectKind) int {
		switch k {
		case compute.KindPolicy:
			return 0
		case compute.KindAppliedToGroup:
			return 1
		}
		return 2
	}
	c.mu.Lock()
	for _, ch := range changes {
		if ch.Kind == compute.KindNodePods {
			continue // node pods are the agents' business
		}
		switch ch.Type {
		case compute.Added:
			delta[kindIndex(ch.Kind)]++
		case compute.Deleted:
			delta[kindIndex(ch.Kind)]--
		}
		if ch.Kind != compute.KindPolicy {
			continue
		}
		if k, ok := c.refs[ch.ID]; ok && ch.Type == compute.Updated && k.generation == ch.Generation {
			continue
		}
		c.changedPolicies[ch.ID] = ch.Type
	}
	c.mu.Unlock()
	for i, k := range []compute.ObjectKind{compute.KindPolicy, compute.KindAppliedToGroup, compute.KindAddressGroup} {
		if delta[i] != 0 {
			c.computedGauges[k].Add(delta[i])
		}
	}
	select {
	case c.policiesChanged <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// resolveChanges queues a status sync for each policy onEngineChanges
// noted, until ctx is done.
func (c *Controller) resolveChanges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.policiesChanged:
		}
		c.mu.Lock()
		changed := c.changedPolicies
		c.changedPolicies = map[string]compute.ChangeType{}
		c.mu.Unlock()
		for id, typ := range changed {
			p, ok := c.engine.PolicyStatus(id)
			c.mu.Lock()
			if typ == compute.Deleted || !ok {
				// Gone: the engine no longer knows its source; use what
				// it was last seen as.
				k, known := c.refs[id]
				if !ok {
					delete(c.refs, id)
				}
				c.mu.Unlock()
				if known {
					c.queue.Add(queueKey(*k.source))
				}
				continue
			}
			ref := queueKey(*p.Source)
			c.refs[id] = knownPolicy{source: p.Source, generation: p.Generation}
			// A NetworkPolicy's status is its findings' Events: one with
			// none, and none on record, has nothing to sync (at a start,
			// nearly all of them). syncNetworkPolicyEvents records
			// findings only of the generation seen here, so none it read
			// before this change is left on record.
			_, had := c.npFindings[ref]
			quiet := ref.Kind == model.KindNetworkPolicy && len(p.Conditions) == 0 && !had
			c.mu.Unlock()
			if !quiet {
				c.queue.Add(ref)
			}
		}
	}
}
