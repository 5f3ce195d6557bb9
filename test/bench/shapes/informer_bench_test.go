package shapes_test

import (
	"context"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	npfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/test/bench/measure"
	"github.com/tierflow/tierflow/test/bench/shapes"
)

// The from-informer-start benchmarks live here, out of package compute's
// tests, so that its fuzz builds need not instrument client-go. They use
// Antrea's harness: every object in a fake clientset (client-go's object
// tracker) in the benchmark's own process, informers listing from it.
// Everything in the process counts in its peak RSS, as it did for Antrea's
// figures: the scenario's objects as built, the fake clientset's copy of
// them, the copies its lists hand the informers, and the controller.

// referenceShapes are the shapes of Antrea's side-by-side figures.
var referenceShapes = []string{"small-namespaces", "large-namespaces", "one-namespace", "policy-per-pod"}

// eachReferenceShape runs fn on every reference shape (full scale unless
// BENCH_SCALE=quick), one sub-benchmark each: run one per process for the
// peak RSS figures.
func eachReferenceShape(b *testing.B, fn func(b *testing.B, c *shapes.Cluster)) {
	for _, name := range referenceShapes {
		b.Run(name, func(b *testing.B) {
			s, err := shapes.Get(name)
			if err != nil {
				b.Fatal(err)
			}
			fn(b, s.Build(shapes.QuickScale()))
		})
	}
}

// clientsetObjects is every object of c, for a fake clientset.
func clientsetObjects(c *shapes.Cluster) []runtime.Object {
	objs := make([]runtime.Object, 0, c.Objects()+len(c.Nodes))
	for _, o := range c.Namespaces {
		objs = append(objs, o)
	}
	for _, o := range c.Nodes {
		objs = append(objs, o)
	}
	for _, o := range c.Pods {
		objs = append(objs, o)
	}
	for _, o := range c.NPs {
		objs = append(objs, o)
	}
	return objs
}

// newClientset is a fake clientset holding c's objects. The reference test
// builds its fake clientset the same way; the non-deprecated NewClientset
// adds field management it did not have.
func newClientset(c *shapes.Cluster) *fake.Clientset {
	return fake.NewSimpleClientset(clientsetObjects(c)...) //nolint:staticcheck
}

// harnessRSS is what the process holds before the clock starts: the
// scenario's objects and the fake clientset's copy of them (reported as
// harness-rss-MiB).
func harnessRSS(b *testing.B) float64 {
	b.Helper()
	rss, err := measure.RSSBytes()
	if err != nil {
		b.Fatal(err)
	}
	return float64(rss) / (1 << 20)
}

// BenchmarkControllerFromInformerStart times what an operator waits for
// when tierflow-controller starts, on Antrea's harness: from starting
// pkg/controller (its informers over a fake clientset holding every
// object, its handlers, event batching and engine) until its initial
// lists are in the engine and a snapshot holds every computed object.
func BenchmarkControllerFromInformerStart(b *testing.B) {
	klog.SetLogger(logr.Discard()) // the controller's progress logs are not the point
	eachReferenceShape(b, func(b *testing.B, c *shapes.Cluster) {
		kube := newClientset(c)
		harness := harnessRSS(b)
		wantPolicies := c.Policies()
		for b.Loop() {
			e := compute.New()
			ctl, err := controller.New(controller.Config{Kube: kube, Policy: npfake.NewSimpleClientset(), Engine: e})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
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
				for _, ms := range g.MembersByNode {
					members += len(ms)
				}
			}
			if members == 0 {
				b.Fatal("no pod in any applied-to group")
			}
			b.ReportMetric(elapsed.Seconds(), "informer-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.StartTimer()
		}
		b.ReportMetric(harness, "harness-rss-MiB")
		b.ReportMetric(float64(len(c.Pods)), "pods")
		b.ReportMetric(float64(wantPolicies), "policies")
		goruntime.KeepAlive(c) // held for the whole run, as the reference test holds its objects
	})
}

// BenchmarkInformersOnly is the harness's own floor: the same fake
// clientset and client-go informers (with the controller's transform of
// the core objects) listing every object, with handlers that only count.
// Time and memory here are not the controller's.
func BenchmarkInformersOnly(b *testing.B) {
	eachReferenceShape(b, func(b *testing.B, c *shapes.Cluster) {
		kube := newClientset(c)
		harness := harnessRSS(b)
		for b.Loop() {
			elapsed, cpu := listEverything(b, controller.NewCoreInformerFactory(kube, 0), c, func(any) {})
			b.StopTimer()
			measure.ReportMemory(b) // the process's peak: never reset
			b.ReportMetric(elapsed.Seconds(), "informer-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.StartTimer()
		}
		b.ReportMetric(harness, "harness-rss-MiB")
		b.ReportMetric(float64(len(c.Pods)), "pods")
		b.ReportMetric(float64(c.Policies()), "policies")
		goruntime.KeepAlive(c)
	})
}

// BenchmarkEngineFromInformerStart is BenchmarkControllerFromInformerStart
// without pkg/controller: bare informer handlers call the engine, one call
// per object, concurrently, then a snapshot.
func BenchmarkEngineFromInformerStart(b *testing.B) {
	eachReferenceShape(b, func(b *testing.B, c *shapes.Cluster) {
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
			if len(s.Policies) != len(c.NPs) {
				b.Fatalf("computed %d policies, want %d", len(s.Policies), len(c.NPs))
			}
			b.ReportMetric(elapsed.Seconds(), "informer-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.StartTimer()
		}
	})
}

// listEverything starts the factory's informers for the core kinds (over
// a fake clientset holding c), hands every object of c they deliver to
// handle (concurrently, from their goroutines), and returns once all were
// handed over, with the wall and CPU time that took; the informers
// are stopped.
func listEverything(b *testing.B, factory informers.SharedInformerFactory, c *shapes.Cluster, handle func(any)) (elapsed, cpu time.Duration) {
	b.Helper()
	total := int64(c.Objects() + len(c.Nodes))
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
