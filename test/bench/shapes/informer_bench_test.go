package shapes_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	npfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/test/bench/measure"
	"github.com/tierflow/tierflow/test/bench/shapes"
	"github.com/tierflow/tierflow/test/watchlist"
)

// The from-informer-start benchmarks live here, out of package compute's
// tests, so that its fuzz builds need not instrument client-go. Their
// harness stands in for an apiserver in the benchmark's own process: each
// initial list of a kind (streamed, as client-go's reflectors ask for it,
// or listed) makes that kind's objects of the scenario again (package
// shapes builds them deterministically) and hands them over, as decoding
// an apiserver's answer hands a controller objects of its own. The
// harness holds no object but those in flight, as an apiserver (another
// process) holds none in the controller's, so the process's peak RSS is
// the controller's with what the lists hand it.

// referenceShapes are the shapes of Antrea's side-by-side figures.
var referenceShapes = []string{"small-namespaces", "large-namespaces", "one-namespace", "policy-per-pod"}

// eachReferenceShape runs fn on every reference shape (full scale unless
// BENCH_SCALE=quick), one sub-benchmark each, with the shape as served
// lists make it: run one per process for the peak RSS figures.
func eachReferenceShape(b *testing.B, fn func(b *testing.B, c *served)) {
	for _, name := range referenceShapes {
		b.Run(name, func(b *testing.B) {
			s, err := shapes.Get(name)
			if err != nil {
				b.Fatal(err)
			}
			fn(b, newServed(s, shapes.QuickScale()))
		})
	}
}

// served is a scenario the harness serves: its shape, scale, and how many
// objects of each kind a list answers (counted kind by kind, so the
// scenario is never held whole).
type served struct {
	shape                                  shapes.Shape
	quick                                  bool
	namespaces, nodes, pods, nps, policies int
	// listCPU is the CPU time spent making the lists served (the work an
	// apiserver and the decoding would do), in nanoseconds.
	listCPU atomic.Int64
}

func newServed(s shapes.Shape, quick bool) *served {
	c := &served{shape: s, quick: quick}
	c.namespaces = len(c.objects(shapes.NamespaceKind).Namespaces)
	c.nodes = len(c.objects(shapes.NodeKind).Nodes)
	c.pods = len(c.objects(shapes.PodKind).Pods)
	p := c.objects(shapes.NetworkPolicyKind | shapes.AdminNetworkPolicyKind)
	c.nps, c.policies = len(p.NPs), p.Policies()
	return c
}

// objects makes the scenario's objects of the kinds keep, anew.
func (c *served) objects(keep shapes.Kinds) *shapes.Cluster {
	return c.shape.BuildKinds(c.quick, keep)
}

// list makes the items of a list by mk, counting its CPU time in listCPU.
func list[T any](c *served, mk func() []T) []T {
	var items []T
	counted(c, func() { items = mk() })
	return items
}

// counted runs fn, counting its CPU time in listCPU: the calling
// goroutine keeps its thread meanwhile, and the thread's CPU time is read
// before and after.
func counted(c *served, fn func()) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	t0 := threadCPU()
	fn()
	c.listCPU.Add(int64(threadCPU() - t0))
}

// threadCPU is the calling thread's CPU time (user and system).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		panic(err) // Linux has had RUSAGE_THREAD since 2.6.26
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newClientset is a clientset that serves c's objects to the informers:
// each list of every namespace, node, pod or NetworkPolicy (of all
// namespaces) makes c's objects of that kind again and answers them
// (objects of the list's own, as decoding an apiserver's answer gives,
// none sharing a map or pointer with another), and so does each watch
// that asks for the initial events (sendInitialEvents, the streamed
// initial list client-go's reflectors ask for, see servedWatch).
// Other watches, writes and every other request go to a fake clientset
// (its object tracker starts empty). The reference test puts its objects into
// the fake's tracker instead, which keeps a second copy of every object
// for the whole run, and the fake's lists copy them twice more; here the
// process holds only what each list hands out.
func newClientset(c *served) kubernetes.Interface {
	return servingClientset{fake.NewSimpleClientset(), c} //nolint:staticcheck // NewClientset adds field management the reference test did not have
}

type servingClientset struct {
	*fake.Clientset
	c *served
}

// IsWatchListSemanticsUnSupported tells client-go's reflectors that this
// clientset serves the initial list as a stream (the fake clientset it
// embeds says it does not): see servedWatch.
func (servingClientset) IsWatchListSemanticsUnSupported() bool { return false }

func (k servingClientset) CoreV1() corev1client.CoreV1Interface {
	return servingCoreV1{k.Clientset.CoreV1(), k.c}
}

func (k servingClientset) NetworkingV1() networkingv1client.NetworkingV1Interface {
	return servingNetworkingV1{k.Clientset.NetworkingV1(), k.c}
}

type servingCoreV1 struct {
	corev1client.CoreV1Interface
	c *served
}

func (s servingCoreV1) Namespaces() corev1client.NamespaceInterface {
	return servedNamespaces{s.CoreV1Interface.Namespaces(), s.c}
}

func (s servingCoreV1) Nodes() corev1client.NodeInterface {
	return servedNodes{s.CoreV1Interface.Nodes(), s.c}
}

func (s servingCoreV1) Pods(namespace string) corev1client.PodInterface {
	if namespace != metav1.NamespaceAll {
		return s.CoreV1Interface.Pods(namespace)
	}
	return servedPods{s.CoreV1Interface.Pods(namespace), s.c}
}

type servingNetworkingV1 struct {
	networkingv1client.NetworkingV1Interface
	c *served
}

func (s servingNetworkingV1) NetworkPolicies(namespace string) networkingv1client.NetworkPolicyInterface {
	if namespace != metav1.NamespaceAll {
		return s.NetworkingV1Interface.NetworkPolicies(namespace)
	}
	return servedNetworkPolicies{s.NetworkingV1Interface.NetworkPolicies(namespace), s.c}
}

type servedNamespaces struct {
	corev1client.NamespaceInterface
	c *served
}

func (s servedNamespaces) List(_ context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error) {
	return &corev1.NamespaceList{Items: list(s.c, func() []corev1.Namespace { return listItems(s.c.objects(shapes.NamespaceKind).Namespaces) })}, unselected(opts)
}

func (s servedNamespaces) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return servedWatch[corev1.Namespace](ctx, s.c, shapes.NamespaceKind, opts, s.NamespaceInterface.Watch)
}

type servedNodes struct {
	corev1client.NodeInterface
	c *served
}

func (s servedNodes) List(_ context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return &corev1.NodeList{Items: list(s.c, func() []corev1.Node { return listItems(s.c.objects(shapes.NodeKind).Nodes) })}, unselected(opts)
}

func (s servedNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return servedWatch[corev1.Node](ctx, s.c, shapes.NodeKind, opts, s.NodeInterface.Watch)
}

type servedPods struct {
	corev1client.PodInterface
	c *served
}

func (s servedPods) List(_ context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return &corev1.PodList{Items: list(s.c, func() []corev1.Pod { return listItems(s.c.objects(shapes.PodKind).Pods) })}, unselected(opts)
}

func (s servedPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return servedWatch[corev1.Pod](ctx, s.c, shapes.PodKind, opts, s.PodInterface.Watch)
}

type servedNetworkPolicies struct {
	networkingv1client.NetworkPolicyInterface
	c *served
}

func (s servedNetworkPolicies) List(_ context.Context, opts metav1.ListOptions) (*networkingv1.NetworkPolicyList, error) {
	return &networkingv1.NetworkPolicyList{Items: list(s.c, func() []networkingv1.NetworkPolicy { return listItems(s.c.objects(shapes.NetworkPolicyKind).NPs) })}, unselected(opts)
}

func (s servedNetworkPolicies) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return servedWatch[networkingv1.NetworkPolicy](ctx, s.c, shapes.NetworkPolicyKind, opts, s.NetworkPolicyInterface.Watch)
}

// servedWatch answers a watch of all objects of a kind. One that asks
// for the initial events is served as kube-apiserver serves it (its
// WatchList feature, which client-go 0.35's reflectors use by default,
// WatchListClient): the kind's objects, each an Added event of its own as
// soon as the shape's builder made it (the harness holds none but those
// in flight, as an apiserver's objects are another process's memory),
// the bookmark annotated k8s.io/initial-events-end, then the watch goes
// on as rest (the fake clientset's watch, on which nothing of these kinds
// is ever written). Any other watch is rest's.
func servedWatch[T any, P interface {
	*T
	runtime.Object
}](ctx context.Context, c *served, kind shapes.Kinds, opts metav1.ListOptions, rest func(context.Context, metav1.ListOptions) (watch.Interface, error)) (watch.Interface, error) {
	if !watchlist.WantsInitialEvents(opts) {
		return rest(ctx, opts)
	}
	if err := unselected(opts); err != nil {
		return nil, err
	}
	// A buffer of events, as a watch's connection has: the builder's
	// goroutine (locked to its thread to count its CPU time) parks only
	// when it is full.
	return watchlist.Serve(ctx, func(send func(runtime.Object) bool) {
		counted(c, func() {
			c.shape.StreamKinds(c.quick, kind, func(o any) { send(o.(P)) })
		})
	}, P(new(T)), 256, rest)
}

// unselected refuses a list with a selector: the served lists hold every
// object (the controller's informers select nothing).
func unselected(opts metav1.ListOptions) error {
	if opts.LabelSelector != "" || opts.FieldSelector != "" {
		return fmt.Errorf("benchmark clientset: list with selector %q/%q not served", opts.LabelSelector, opts.FieldSelector)
	}
	return nil
}

// listItems moves objects into a list's items (each item the object;
// the object made garbage as soon as it is moved).
func listItems[T any](objs []*T) []T {
	items := make([]T, len(objs))
	for i, o := range objs {
		items[i], objs[i] = *o, nil
	}
	return items
}

// deepCopies is a deep copy of every object, as the items of a list.
func deepCopies[T any, P interface {
	*T
	DeepCopyInto(*T)
}](objs []P) []T {
	items := make([]T, len(objs))
	for i, o := range objs {
		o.DeepCopyInto(&items[i])
	}
	return items
}

// harnessRSS is what the process holds before the clock starts (reported
// as harness-rss-MiB): the test binary and the fake clientset; the peak
// RSS of counting the scenario's objects is reset.
func harnessRSS(b *testing.B) float64 {
	b.Helper()
	if err := measure.ResetPeakRSS(); err != nil {
		b.Fatal(err)
	}
	rss, err := measure.RSSBytes()
	if err != nil {
		b.Fatal(err)
	}
	return float64(rss) / (1 << 20)
}

// BenchmarkControllerFromInformerStart times what an operator waits for
// when tierflow-controller starts: from starting pkg/controller (its
// informers over the harness's clientset, its handlers, event batching and
// engine) until its initial lists are in the engine and a snapshot holds
// every computed object.
func BenchmarkControllerFromInformerStart(b *testing.B) {
	klog.SetLogger(logr.Discard()) // the controller's progress logs are not the point
	eachReferenceShape(b, func(b *testing.B, c *served) {
		kube := newClientset(c)
		harness := harnessRSS(b)
		wantPolicies := c.policies
		for b.Loop() {
			e := compute.New()
			ctl, err := controller.New(controller.Config{Kube: kube, Policy: npfake.NewSimpleClientset(), Engine: e})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			c.listCPU.Store(0)
			cpu0 := measure.MustCPUTime(b)
			start := time.Now()
			go func() { done <- ctl.Run(ctx) }()
			for !ctl.HasSynced() {
				time.Sleep(time.Millisecond)
			}
			s := e.Snapshot()
			elapsed, cpu := time.Since(start), measure.MustCPUTime(b)-cpu0
			b.StopTimer()
			measure.ReportMemory(b) // the process's peak: never reset
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			if len(s.Policies) != wantPolicies {
				b.Fatalf("computed %d policies, want %d", len(s.Policies), wantPolicies)
			}
			members := 0
			for _, g := range s.AppliedToGroups {
				for _, e := range g.MembersByNode {
					members += len(e.Members)
				}
			}
			if members == 0 {
				b.Fatal("no pod in any applied-to group")
			}
			b.ReportMetric(elapsed.Seconds(), "informer-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.ReportMetric(time.Duration(c.listCPU.Load()).Seconds(), "harness-list-cpu-s")
			b.StartTimer()
		}
		b.ReportMetric(harness, "harness-rss-MiB")
		b.ReportMetric(float64(c.pods), "pods")
		b.ReportMetric(float64(wantPolicies), "policies")
	})
}

// BenchmarkInformersOnly is the harness's own floor: the same
// clientset and client-go informers (with the controller's transform of
// the core objects) listing every object, with handlers that only count.
// Time and memory here are not the controller's.
func BenchmarkInformersOnly(b *testing.B) {
	eachReferenceShape(b, func(b *testing.B, c *served) {
		kube := newClientset(c)
		harness := harnessRSS(b)
		for b.Loop() {
			c.listCPU.Store(0)
			elapsed, cpu := listEverything(b, controller.NewCoreInformerFactory(kube, 0), c, func(any) {})
			b.StopTimer()
			measure.ReportMemory(b) // the process's peak: never reset
			b.ReportMetric(elapsed.Seconds(), "informer-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.ReportMetric(time.Duration(c.listCPU.Load()).Seconds(), "harness-list-cpu-s")
			b.StartTimer()
		}
		b.ReportMetric(harness, "harness-rss-MiB")
		b.ReportMetric(float64(c.pods), "pods")
		b.ReportMetric(float64(c.policies), "policies")
	})
}

// BenchmarkEngineFromInformerStart is BenchmarkControllerFromInformerStart
// without pkg/controller: bare informer handlers call the engine, one call
// per object, concurrently, then a snapshot.
func BenchmarkEngineFromInformerStart(b *testing.B) {
	eachReferenceShape(b, func(b *testing.B, c *served) {
		kube := newClientset(c)
		for b.Loop() {
			e := compute.New()
			upsert := func(o any) {
				switch o := o.(type) {
				case *corev1.Namespace:
					e.UpsertNamespace(o)
				case *corev1.Node:
					e.UpsertNode(o)
				case *corev1.Pod:
					e.UpsertPod(o)
				case *networkingv1.NetworkPolicy:
					e.UpsertNetworkPolicy(o)
				}
			}
			cpu0, start := measure.MustCPUTime(b), time.Now()
			listEverything(b, informers.NewSharedInformerFactory(kube, 0), c, upsert)
			s := e.Snapshot()
			elapsed, cpu := time.Since(start), measure.MustCPUTime(b)-cpu0
			b.StopTimer()
			if len(s.Policies) != c.nps {
				b.Fatalf("computed %d policies, want %d", len(s.Policies), c.nps)
			}
			b.ReportMetric(elapsed.Seconds(), "informer-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.StartTimer()
		}
	})
}

// listEverything starts the factory's informers for the core kinds (over
// the harness's clientset serving c), hands every object of c they deliver
// to handle (concurrently, from their goroutines), and returns once all
// were handed over, with the wall and CPU time that took; the informers
// are stopped.
func listEverything(b *testing.B, factory informers.SharedInformerFactory, c *served, handle func(any)) (elapsed, cpu time.Duration) {
	b.Helper()
	total := int64(c.namespaces + c.nodes + c.pods + c.nps)
	var seen atomic.Int64
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(o any) { handle(o); seen.Add(1) }}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Core().V1().Namespaces().Informer(), factory.Core().V1().Nodes().Informer(),
		factory.Core().V1().Pods().Informer(), factory.Networking().V1().NetworkPolicies().Informer(),
	} {
		if _, err := inf.AddEventHandler(h); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer factory.Shutdown()
	defer cancel()
	cpu0, start := measure.MustCPUTime(b), time.Now()
	factory.Start(ctx.Done())
	for seen.Load() < total {
		time.Sleep(time.Millisecond)
	}
	return time.Since(start), measure.MustCPUTime(b) - cpu0
}
