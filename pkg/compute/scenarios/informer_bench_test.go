package scenarios_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/compute/scenarios"
)

// Package scenarios_test holds the from-informer-start benchmarks, kept out
// of package compute's tests so its fuzz builds need not instrument
// client-go.

// benchFromInformerStart times what an operator waits for when the
// controller starts: from starting the informers (over a fake clientset
// holding every object, as the reference figures were measured) until the
// engine has computed every object. Informer handlers call the engine
// concurrently, as the controller's would.
func benchFromInformerStart(b *testing.B, c *scenarios.Cluster) {
	objs := make([]runtime.Object, 0, c.Objects())
	for _, o := range c.Namespaces {
		objs = append(objs, o)
	}
	for _, o := range c.Nodes {
		objs = append(objs, o)
	}
	for _, o := range c.Pods {
		objs = append(objs, o)
	}
	for _, o := range c.NetworkPolicies {
		objs = append(objs, o)
	}
	total := int64(len(objs))
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		// The reference test builds its fake clientset the same way; the
		// non-deprecated NewClientset adds field management it did not have.
		client := fake.NewSimpleClientset(objs...) //nolint:staticcheck
		e := compute.New()
		var seen atomic.Int64
		factory := informers.NewSharedInformerFactory(client, 0)
		handle := func(inf cache.SharedIndexInformer, upsert func(any)) {
			_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(o any) { upsert(o); seen.Add(1) },
				UpdateFunc: func(_, o any) { upsert(o) },
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		handle(factory.Core().V1().Namespaces().Informer(), func(o any) { e.UpsertNamespace(o.(*corev1.Namespace)) })
		handle(factory.Core().V1().Nodes().Informer(), func(o any) { e.UpsertNode(o.(*corev1.Node)) })
		handle(factory.Core().V1().Pods().Informer(), func(o any) { e.UpsertPod(o.(*corev1.Pod)) })
		handle(factory.Networking().V1().NetworkPolicies().Informer(), func(o any) { e.UpsertNetworkPolicy(o.(*networkingv1.NetworkPolicy)) })
		ctx, cancel := context.WithCancel(context.Background())
		b.StartTimer()
		cpu0 := cpuTime()
		factory.Start(ctx.Done())
		for seen.Load() < total {
			time.Sleep(time.Millisecond)
		}
		s := e.Snapshot()
		cpu += cpuTime() - cpu0
		b.StopTimer()
		cancel()
		factory.Shutdown()
		if len(s.Policies) != len(c.NetworkPolicies) {
			b.Fatalf("computed %d policies, want %d", len(s.Policies), len(c.NetworkPolicies))
		}
		b.StartTimer()
	}
	// CPU seconds (all threads, GC included): on a shared machine wall time
	// overstates the cost.
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		// Process lifetime peak: run one benchmark per process to read it.
		b.ReportMetric(float64(ru.Maxrss)/1024, "peakRSS-MB")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkFromInformerStartSmallNamespaces(b *testing.B) {
	benchFromInformerStart(b, scenarios.SmallNamespaces())
}
func BenchmarkFromInformerStartLargeNamespaces(b *testing.B) {
	benchFromInformerStart(b, scenarios.LargeNamespaces())
}
func BenchmarkFromInformerStartOneNamespace(b *testing.B) {
	benchFromInformerStart(b, scenarios.OneNamespace())
}
func BenchmarkFromInformerStartPolicyPerPod(b *testing.B) {
	benchFromInformerStart(b, scenarios.PolicyPerPod())
}
