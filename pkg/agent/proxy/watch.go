package proxy

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tierflow/tierflow/pkg/services"
)

// Watcher follows the Services, EndpointSlices and Nodes of the cluster
// (list and watch only) and keeps the proxy's Input: each Service is
// translated again when it or one of its slices changes, nothing else.
type Watcher struct {
	kube     kubernetes.Interface
	onChange func()

	mu       sync.Mutex
	svcs     map[string]*corev1.Service                       // by namespace/name
	slices   map[string]map[string]*discoveryv1.EndpointSlice // service key → slice name → slice
	ports    map[string][]services.Port                       // translated, by service key
	warnings map[string][]string                              // by service key
	nodes    map[string][]netip.Addr                          // node name → addresses
	// dirty are the Services translated since the last Input or Changes.
	dirty  map[string]bool
	synced bool
}

// NewWatcher returns a watcher; onChange is called (without locks held)
// after every change once the caches have synced, and once at the sync.
func NewWatcher(kube kubernetes.Interface, onChange func()) *Watcher {
	return &Watcher{kube: kube, onChange: onChange, svcs: map[string]*corev1.Service{},
		slices: map[string]map[string]*discoveryv1.EndpointSlice{}, ports: map[string][]services.Port{},
		warnings: map[string][]string{}, nodes: map[string][]netip.Addr{}, dirty: map[string]bool{}}
}

// Run starts the informers and returns once their caches have synced (or
// ctx ended); they run until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	// As kube-proxy: Services another proxy owns, and headless Services'
	// slices, are not watched at all.
	notOther, _ := labels.NewRequirement(services.ProxyNameLabel, selection.DoesNotExist, nil)
	notHeadless, _ := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	svcFactory := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.NewSelector().Add(*notOther).String()
	}))
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.NewSelector().Add(*notOther, *notHeadless).String()
	}))
	nodeFactory := informers.NewSharedInformerFactory(w.kube, 0)

	svcInf := svcFactory.Core().V1().Services().Informer()
	sliceInf := sliceFactory.Discovery().V1().EndpointSlices().Informer()
	nodeInf := nodeFactory.Core().V1().Nodes().Informer()
	// The handlers' registrations say when each handler has seen every
	// object of the initial list (an informer's own HasSynced says only
	// that its store has: the handlers may still be behind).
	svcReg, err := svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.service(o, false) },
		UpdateFunc: func(_, o any) { w.service(o, false) },
		DeleteFunc: func(o any) { w.service(o, true) },
	})
	if err != nil {
		return err
	}
	sliceReg, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.slice(o, false) },
		UpdateFunc: func(_, o any) { w.slice(o, false) },
		DeleteFunc: func(o any) { w.slice(o, true) },
	})
	if err != nil {
		return err
	}
	nodeReg, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.node(o, false) },
		UpdateFunc: func(_, o any) { w.node(o, false) },
		DeleteFunc: func(o any) { w.node(o, true) },
	})
	if err != nil {
		return err
	}
	for _, f := range []informers.SharedInformerFactory{svcFactory, sliceFactory, nodeFactory} {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), svcReg.HasSynced, sliceReg.HasSynced, nodeReg.HasSynced) {
		return ctx.Err()
	}
	w.mu.Lock()
	w.synced = true
	w.mu.Unlock()
	w.onChange()
	return nil
}

// Synced says whether the caches have synced (Input is complete).
func (w *Watcher) Synced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Input is the current Service ports and node addresses, and the
// warnings of the Services' translation. What it returns is all there is:
// the next Changes starts from it.
func (w *Watcher) Input() (Input, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var in Input
	keys := make([]string, 0, len(w.ports))
	for k := range w.ports {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		in.Ports = append(in.Ports, w.ports[k]...)
	}
	in.NodeAddrs = w.nodeAddrsLocked()
	clear(w.dirty)
	return in, w.warningsLocked()
}

// Changes is what changed since the last Input or Changes: the current
// ports of every Service translated since (none: gone), and the node
// addresses (Compiler.CompileChanges).
func (w *Watcher) Changes() Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := Change{Services: make(map[string][]services.Port, len(w.dirty)), NodeAddrs: w.nodeAddrsLocked()}
	for k := range w.dirty {
		ch.Services[k] = w.ports[k]
	}
	clear(w.dirty)
	return ch
}

// Warnings are the warnings of every Service's translation.
func (w *Watcher) Warnings() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.warningsLocked()
}

func (w *Watcher) nodeAddrsLocked() []netip.Addr {
	var addrs []netip.Addr
	for _, a := range w.nodes {
		addrs = append(addrs, a...)
	}
	return sortedAddrs(addrs)
}

// warningsLocked are the translation's warnings, by Service.
func (w *Watcher) warningsLocked() []string {
	keys := make([]string, 0, len(w.warnings))
	for k := range w.warnings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var warn []string
	for _, k := range keys {
		warn = append(warn, w.warnings[k]...)
	}
	return warn
}

// Counts is the number of Services and EndpointSlices watched.
func (w *Watcher) Counts() (svcs, slices int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.slices {
		slices += len(m)
	}
	return len(w.svcs), slices
}

func unwrap(o any) any {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

func (w *Watcher) service(o any, deleted bool) {
	svc, ok := unwrap(o).(*corev1.Service)
	if !ok {
		return
	}
	k := svc.Namespace + "/" + svc.Name
	w.mu.Lock()
	if deleted {
		delete(w.svcs, k)
	} else {
		w.svcs[k] = svc
	}
	w.translate(k)
	w.mu.Unlock()
	w.changed()
}

func (w *Watcher) slice(o any, deleted bool) {
	sl, ok := unwrap(o).(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	k := sl.Namespace + "/" + name
	w.mu.Lock()
	m := w.slices[k]
	if m == nil {
		m = map[string]*discoveryv1.EndpointSlice{}
		w.slices[k] = m
	}
	if deleted {
		delete(m, sl.Name)
		if len(m) == 0 {
			delete(w.slices, k)
		}
	} else {
		m[sl.Name] = sl
	}
	w.translate(k)
	w.mu.Unlock()
	w.changed()
}

func (w *Watcher) node(o any, deleted bool) {
	n, ok := unwrap(o).(*corev1.Node)
	if !ok {
		return
	}
	var addrs []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Zone() == "" {
			addrs = append(addrs, ip.Unmap())
		}
	}
	w.mu.Lock()
	old := w.nodes[n.Name]
	if deleted {
		delete(w.nodes, n.Name)
	} else {
		w.nodes[n.Name] = sortedAddrs(addrs)
	}
	same := !deleted && fmt.Sprint(old) == fmt.Sprint(w.nodes[n.Name])
	w.mu.Unlock()
	if !same {
		w.changed()
	}
}

// translate recomputes one Service's ports. Called with w.mu held.
func (w *Watcher) translate(k string) {
	w.dirty[k] = true
	svc := w.svcs[k]
	if svc == nil {
		delete(w.ports, k)
		delete(w.warnings, k)
		return
	}
	var sl []*discoveryv1.EndpointSlice
	for _, s := range w.slices[k] {
		sl = append(sl, s)
	}
	sort.Slice(sl, func(i, j int) bool { return sl[i].Name < sl[j].Name })
	ports, warn := services.Translate(svc, sl)
	if len(ports) == 0 {
		delete(w.ports, k)
	} else {
		w.ports[k] = ports
	}
	if len(warn) == 0 {
		delete(w.warnings, k)
	} else {
		w.warnings[k] = warn
	}
}

func (w *Watcher) changed() {
	w.mu.Lock()
	synced := w.synced
	w.mu.Unlock()
	if synced {
		w.onChange()
	}
}

// debounce is how long the proxy waits after a change for more before it
// realizes: a Deployment rollout changes slices in bursts.
const debounce = 20 * time.Millisecond
