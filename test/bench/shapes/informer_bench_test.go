package shapes_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	npfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/test/bench/shapes"
)

// The from-informer-start benchmarks live here, out of package compute's
// tests, so that its fuzz builds need not instrument client-go.

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

// benchFromInformerStart times what an operator waits for when the
// controller starts: from starting the informers (over a fake clientset
// holding every object, as the reference figures were measured) until the
// engine has computed every object. Informer handlers call the engine
// concurrently, as the controller's would.
func benchFromInformerStart(b *testing.B, c *shapes.Cluster) {
	objs := clientsetObjects(c)
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
		if len(s.Policies) != len(c.NPs) {
			b.Fatalf("computed %d policies, want %d", len(s.Policies), len(c.NPs))
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
	benchFromInformerStart(b, shapes.SmallNamespaces(false))
}
func BenchmarkFromInformerStartLargeNamespaces(b *testing.B) {
	benchFromInformerStart(b, shapes.LargeNamespaces(false))
}
func BenchmarkFromInformerStartOneNamespace(b *testing.B) {
	benchFromInformerStart(b, shapes.OneNamespace(false))
}
func BenchmarkFromInformerStartPolicyPerPod(b *testing.B) {
	benchFromInformerStart(b, shapes.PolicyPerPod(false))
}

// benchControllerFromInformerStart is benchFromInformerStart through
// pkg/controller (its handlers, event batching and engine subscriber), the
// way tierflow-controller starts. With policiesFirst, the pod list is held
// back until the engine holds every policy: the order a real API server
// tends to produce (its policy list is smaller than its pod list), in which
// every pod joins groups that every policy already uses.
func benchControllerFromInformerStart(b *testing.B, c *shapes.Cluster, policiesFirst bool) {
	klog.SetLogger(logr.Discard()) // the controller's progress logs are not the point
	objs := clientsetObjects(c)
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		kube := fake.NewSimpleClientset(objs...) //nolint:staticcheck // as benchFromInformerStart
		e := compute.New()
		policiesIn := make(chan struct{})
		var policies atomic.Int64
		e.Subscribe(func(cs []compute.Change) {
			for _, ch := range cs {
				if ch.Kind == compute.KindPolicy && ch.Type == compute.Added &&
					policies.Add(1) == int64(len(c.NPs)) {
					close(policiesIn)
				}
			}
		})
		var client kubernetes.Interface = kube
		if policiesFirst {
			client = podsListedAfter{kube, policiesIn}
		}
		ctl, err := controller.New(controller.Config{Kube: client, Policy: npfake.NewSimpleClientset(), Engine: e})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.StartTimer()
		cpu0 := cpuTime()
		go func() { done <- ctl.Run(ctx) }()
		for !ctl.HasSynced() {
			time.Sleep(time.Millisecond)
		}
		s := e.Snapshot()
		cpu += cpuTime() - cpu0
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if len(s.Policies) != len(c.NPs) {
			b.Fatalf("computed %d policies, want %d", len(s.Policies), len(c.NPs))
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
		b.StartTimer()
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}

func BenchmarkControllerFromInformerStartOneNamespace(b *testing.B) {
	benchControllerFromInformerStart(b, shapes.OneNamespace(false), false)
}
func BenchmarkControllerFromInformerStartOneNamespacePoliciesFirst(b *testing.B) {
	benchControllerFromInformerStart(b, shapes.OneNamespace(false), true)
}
func BenchmarkControllerFromInformerStartLargeNamespacesPoliciesFirst(b *testing.B) {
	benchControllerFromInformerStart(b, shapes.LargeNamespaces(false), true)
}
func BenchmarkControllerFromInformerStartPolicyPerPod(b *testing.B) {
	benchControllerFromInformerStart(b, shapes.PolicyPerPod(false), false)
}

// podsListedAfter is a clientset whose pod lists wait for a channel to
// close. (A blocking reactor would not do: the fake clientset runs its
// reactors under one lock, so it would hold back every other list too.)
type podsListedAfter struct {
	*fake.Clientset
	wait <-chan struct{}
}

func (c podsListedAfter) CoreV1() typedcorev1.CoreV1Interface {
	return coreListedAfter{c.Clientset.CoreV1(), c.wait}
}

type coreListedAfter struct {
	typedcorev1.CoreV1Interface
	wait <-chan struct{}
}

func (c coreListedAfter) Pods(namespace string) typedcorev1.PodInterface {
	return podListAfter{c.CoreV1Interface.Pods(namespace), c.wait}
}

type podListAfter struct {
	typedcorev1.PodInterface
	wait <-chan struct{}
}

func (p podListAfter) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	select {
	case <-p.wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.PodInterface.List(ctx, opts)
}
func BenchmarkControllerFromInformerStartSmallNamespaces(b *testing.B) {
	benchControllerFromInformerStart(b, shapes.SmallNamespaces(false), false)
}
