package bench

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/bench/shapes"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// computedPods counts the distinct pods in the snapshot's applied-to
// groups.
func computedPods(s *model.Snapshot) int {
	seen := map[model.PodRef]struct{}{}
	for _, g := range s.AppliedToGroups {
		for _, e := range g.MembersByNode {
			for _, m := range e.Members {
				if m.Pod != nil {
					seen[*m.Pod] = struct{}{}
				}
			}
		}
	}
	return len(seen)
}

func eachShape(b *testing.B, fn func(b *testing.B, s shapes.Shape)) {
	for _, s := range shapes.All() {
		b.Run(s.Name, func(b *testing.B) { fn(b, s) })
	}
}

// BenchmarkControllerCompute is computation only: the engine fed directly,
// then a snapshot (which builds every model object).
func BenchmarkControllerCompute(b *testing.B) {
	eachShape(b, func(b *testing.B, s shapes.Shape) {
		c := s.Build(quickScale())
		wantPolicies, wantPods := c.Policies(), len(c.Pods)
		resetPeak(b)
		var e *compute.Engine
		for b.Loop() {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0 := cpuTime(b)
			start := time.Now()
			e = compute.New()
			c.FeedTo(e)
			snap := e.Snapshot()
			elapsed := time.Since(start)
			cpu := cpuTime(b) - cpu0
			runtime.ReadMemStats(&after)
			if len(snap.Policies) != wantPolicies {
				b.Fatalf("computed %d policies, want %d", len(snap.Policies), wantPolicies)
			}
			if got := computedPods(snap); got != wantPods {
				b.Fatalf("applied-to groups hold %d pods, want %d", got, wantPods)
			}
			b.ReportMetric(elapsed.Seconds(), "compute-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/mib, "alloc-MiB")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs), "allocs")
			b.ReportMetric(float64(len(snap.AppliedToGroups)), "appliedToGroups")
			b.ReportMetric(float64(len(snap.AddressGroups)), "addressGroups")
		}
		// Heap in use is the engine's state alone: the input objects are
		// dropped first (the engine keeps only what it needs of them).
		c = nil
		reportMemory(b)
		b.ReportMetric(float64(wantPods), "pods")
		b.ReportMetric(float64(wantPolicies), "policies")
		runtime.KeepAlive(e)
	})
}

// incrementalRuns is how many times each change is timed; the median and
// the maximum are reported.
const incrementalRuns = 21

// BenchmarkControllerIncremental times single changes on a loaded engine:
// the engine call plus reading back every object it reports changed (what
// distribution does next).
func BenchmarkControllerIncremental(b *testing.B) {
	eachShape(b, func(b *testing.B, s shapes.Shape) {
		c := s.Build(quickScale())
		e := compute.New()
		c.FeedTo(e)
		e.Snapshot()
		var changed []compute.Change
		e.Subscribe(func(cs []compute.Change) { changed = append(changed, cs...) })
		readBack := func() {
			for _, ch := range changed {
				switch ch.Kind {
				case compute.KindPolicy:
					e.Policy(ch.ID)
				case compute.KindAppliedToGroup:
					e.AppliedToGroup(ch.ID)
				case compute.KindAddressGroup:
					e.AddressGroup(ch.ID)
				}
			}
		}
		// timed runs change and undo alternately; only change is timed.
		timed := func(name string, change, undo func()) {
			var ds []time.Duration
			nChanges := 0
			for i := 0; i < incrementalRuns; i++ {
				changed = changed[:0]
				start := time.Now()
				change()
				readBack()
				ds = append(ds, time.Since(start))
				nChanges = len(changed)
				undo()
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e6, name+"-p50-ms")
			b.ReportMetric(float64(ds[len(ds)-1].Nanoseconds())/1e6, name+"-max-ms")
			b.ReportMetric(float64(nChanges), name+"-changes")
		}
		for b.Loop() {
			orig := c.Pods[0]
			timed("pod-relabel", func() { e.UpsertPod(c.PodRelabel) }, func() { e.UpsertPod(orig) })
			origNS := c.Namespaces[0]
			timed("ns-relabel", func() { e.UpsertNamespace(c.NamespaceRelabel) }, func() { e.UpsertNamespace(origNS) })
			switch {
			case c.AddedNP != nil:
				np := c.AddedNP
				timed("policy-add", func() { e.UpsertNetworkPolicy(np) }, func() { e.DeleteNetworkPolicy(np.Namespace, np.Name) })
			case c.AddedANP != nil:
				anp := c.AddedANP
				timed("policy-add", func() { e.UpsertAdminNetworkPolicy(anp) }, func() { e.DeleteAdminNetworkPolicy(anp.Name) })
			}
		}
		b.ReportMetric(float64(len(c.Pods)), "pods")
		b.ReportMetric(float64(c.Policies()), "policies")
	})
}

// fastConfig is cfg without client-side rate limiting: the loader and the
// controller's informers must not be throttled by the client.
func fastConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	return c
}

// clients are the core and network-policy-api clientsets of cfg.
func clients(b *testing.B, cfg *rest.Config) (kubernetes.Interface, npclient.Interface) {
	b.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pol, err := npclient.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return kube, pol
}

// loadAPI creates a scenario's objects in the API server with parallel
// writers (pods are created, then their status is written, as a kubelet
// would).
func loadAPI(b *testing.B, cfg *rest.Config, c *shapes.Cluster) {
	b.Helper()
	kube, pol := clients(b, cfg)
	ctx := context.Background()
	var failed atomic.Value
	parallel := func(n int, fn func(i int) error) {
		const workers = 32
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n || failed.Load() != nil {
						return
					}
					if err := fn(i); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatalf("loading the API server: %v", err)
		}
	}
	opts := metav1.CreateOptions{}
	parallel(len(c.Nodes), func(i int) error {
		n, err := kube.CoreV1().Nodes().Create(ctx, c.Nodes[i], opts)
		if err != nil {
			return err
		}
		n.Status = c.Nodes[i].Status
		_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	parallel(len(c.Namespaces), func(i int) error {
		_, err := kube.CoreV1().Namespaces().Create(ctx, c.Namespaces[i], opts)
		return err
	})
	parallel(len(c.Pods), func(i int) error {
		want := c.Pods[i]
		p := want.DeepCopy()
		p.UID, p.Status = "", corev1.PodStatus{}
		got, err := kube.CoreV1().Pods(p.Namespace).Create(ctx, p, opts)
		if err != nil {
			return err
		}
		got.Status = want.Status
		_, err = kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	})
	parallel(len(c.NPs), func(i int) error {
		np := c.NPs[i].DeepCopy()
		np.UID = ""
		_, err := kube.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, opts)
		return err
	})
	parallel(len(c.ANPs), func(i int) error {
		anp := c.ANPs[i].DeepCopy()
		anp.UID = ""
		_, err := pol.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, opts)
		return err
	})
}

// installCRDs installs the network-policy-api CRDs of manifests/crds and
// waits until their kinds are served. Unlike kubeapi.WithCRDs it adds the
// api-approved.kubernetes.io annotation when a manifest lacks it: the API
// server refuses CRDs in a *.k8s.io group without it, and the controller-gen
// output for AdminNetworkPolicy and BaselineAdminNetworkPolicy does not
// carry it.
func installCRDs(b *testing.B, api *kubeapi.Cluster) {
	b.Helper()
	ctx := context.Background()
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, crd := range kubeapi.AllCRDs {
		obj, err := kubeapi.LoadCRD(crd)
		if err != nil {
			b.Fatal(err)
		}
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		if ann["api-approved.kubernetes.io"] == "" {
			ann["api-approved.kubernetes.io"] = "https://github.com/kubernetes-sigs/network-policy-api/pull/30"
			obj.SetAnnotations(ann)
		}
		if _, err := api.Dynamic.Resource(crdGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			b.Fatalf("installing CRD %s: %v", crd.Name(), err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err1 := api.Policy.PolicyV1alpha1().AdminNetworkPolicies().List(ctx, metav1.ListOptions{Limit: 1})
		_, err2 := api.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().List(ctx, metav1.ListOptions{Limit: 1})
		_, err3 := api.Policy.PolicyV1alpha2().ClusterNetworkPolicies().List(ctx, metav1.ListOptions{Limit: 1})
		return err1 == nil && err2 == nil && err3 == nil, nil
	})
	if err != nil {
		b.Fatalf("network-policy-api kinds not served: %v", err)
	}
}

// BenchmarkControllerInformers is the operator's view: every object is in
// the API server before tierflow-controller's core starts; the clock runs
// from the informers' start until the engine holds every policy and every
// pod in its applied-to groups.
func BenchmarkControllerInformers(b *testing.B) {
	eachShape(b, func(b *testing.B, s shapes.Shape) {
		c := s.Build(quickScale())
		wantPolicies, wantPods := c.Policies(), len(c.Pods)
		api := kubeapi.Start(b)
		installCRDs(b, api)
		loadStart := time.Now()
		loadAPI(b, fastConfig(api.Config), c)
		loadTime := time.Since(loadStart)
		c = nil
		cfg := fastConfig(api.Config)
		kube, pol := clients(b, cfg)
		resetPeak(b)
		for b.Loop() {
			ctl, err := controller.New(controller.Config{Kube: kube, Policy: pol, Identity: "tierflow-bench"})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			cpu0 := cpuTime(b)
			start := time.Now()
			go func() { done <- ctl.Run(ctx) }()
			var lastPolicies, lastPods int
			deadline := time.Now().Add(30 * time.Minute)
			for {
				if ctl.HasSynced() {
					snap := ctl.Engine().Snapshot()
					lastPolicies, lastPods = len(snap.Policies), computedPods(snap)
					if lastPolicies == wantPolicies && lastPods == wantPods {
						break
					}
				}
				if time.Now().After(deadline) {
					cancel()
					b.Fatalf("controller computed %d/%d policies, %d/%d pods after 30m", lastPolicies, wantPolicies, lastPods, wantPods)
				}
				select {
				case err := <-done:
					cancel()
					b.Fatalf("controller stopped: %v", err)
				case <-time.After(100 * time.Millisecond):
				}
			}
			b.ReportMetric(time.Since(start).Seconds(), "informer-s")
			b.ReportMetric((cpuTime(b) - cpu0).Seconds(), "cpu-s")
			reportMemory(b)
			cancel()
			if err := <-done; err != nil {
				b.Fatalf("controller: %v", err)
			}
		}
		b.ReportMetric(loadTime.Seconds(), "load-s")
		b.ReportMetric(float64(wantPods), "pods")
		b.ReportMetric(float64(wantPolicies), "policies")
	})
}
