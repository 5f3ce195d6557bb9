package compute

import (
	"fmt"
	"math"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/bench/shapes"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchCompute runs one full computation per iteration: every object
// upserted (with a subscriber receiving the changes) and a snapshot, which
// builds every model object. The objects are built before the clock starts:
// this is computation only. It reports CPU seconds per run (all threads,
// GC included; on a shared machine wall time overstates the cost) and the
// heap in use after the run.
func benchCompute(b *testing.B, c *shapes.Cluster) {
	benchComputeOrder(b, c, func(e *Engine, c *shapes.Cluster) { c.FeedTo(e) })
}

// benchComputeOrder is benchCompute with a given load order.
func benchComputeOrder(b *testing.B, c *shapes.Cluster, load func(*Engine, *shapes.Cluster)) {
	b.ReportAllocs()
	var e *Engine
	cpu0 := cpuTime()
	for b.Loop() {
		e = New()
		changes := 0
		e.Subscribe(func(cs []Change) { changes += len(cs) })
		load(e, c)
		s := e.Snapshot()
		if want := len(c.NPs) + len(c.ANPs); len(s.Policies) != want {
			b.Fatalf("computed %d policies, want %d", len(s.Policies), want)
		}
		b.ReportMetric(float64(len(s.AppliedToGroups)), "appliedToGroups")
		b.ReportMetric(float64(len(s.AddressGroups)), "addressGroups")
	}
	b.StopTimer()
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heapMB")
	runtime.KeepAlive(e)
}

func BenchmarkComputeSmallNamespaces(b *testing.B) { benchCompute(b, shapes.SmallNamespaces(false)) }

// BenchmarkComputeInBatches feeds small and large namespaces as the
// controller applies its initial lists (feedInBatches: batches of 1,000
// events, each batch's pods prepared beforehand and applied last);
// "serial" applies every run of pods one by one, "parallel" finds a run's
// groups on every core first (the controller's way). Compare wall time:
// CPU time is about the same.
func BenchmarkComputeInBatches(b *testing.B) {
	for _, c := range []struct {
		name    string
		cluster *shapes.Cluster
	}{{"small-namespaces", shapes.SmallNamespaces(false)}, {"large-namespaces", shapes.LargeNamespaces(false)}} {
		pods := preparePods(c.cluster.Pods)
		for _, mode := range []struct {
			name   string
			runMin int
		}{{"serial", math.MaxInt}, {"parallel", podRunMin}} {
			b.Run(c.name+"/"+mode.name, func(b *testing.B) {
				withPodRunMin(b, mode.runMin)
				benchComputeOrder(b, c.cluster, func(e *Engine, c *shapes.Cluster) { feedInBatches(e, c, pods) })
			})
		}
	}
}
func BenchmarkComputeLargeNamespaces(b *testing.B) { benchCompute(b, shapes.LargeNamespaces(false)) }
func BenchmarkComputeOneNamespace(b *testing.B)    { benchCompute(b, shapes.OneNamespace(false)) }
func BenchmarkComputePolicyPerPod(b *testing.B)    { benchCompute(b, shapes.PolicyPerPod(false)) }
func BenchmarkComputeClusterScoped(b *testing.B)   { benchCompute(b, shapes.ClusterScoped(false)) }

// loadPoliciesFirst feeds the policies before the pods: the order a
// controller sees when its policy informer lists before its (larger) pod
// informer, so every pod joins groups already used by every policy.
func loadPoliciesFirst(e *Engine, c *shapes.Cluster) {
	for _, o := range c.Namespaces {
		e.UpsertNamespace(o)
	}
	for _, o := range c.Nodes {
		e.UpsertNode(o)
	}
	for _, o := range c.NPs {
		e.UpsertNetworkPolicy(o)
	}
	for _, o := range c.ANPs {
		e.UpsertAdminNetworkPolicy(o)
	}
	for _, o := range c.Pods {
		e.UpsertPod(o)
	}
}

func BenchmarkComputeOneNamespacePoliciesFirst(b *testing.B) {
	benchComputeOrder(b, shapes.OneNamespace(false), loadPoliciesFirst)
}
func BenchmarkComputeLargeNamespacesPoliciesFirst(b *testing.B) {
	benchComputeOrder(b, shapes.LargeNamespaces(false), loadPoliciesFirst)
}

// BenchmarkComputeInitial: 10k pods / 1k namespaces / 1k NetworkPolicies /
// 100 AdminNetworkPolicies × 20 rules, from nothing.
func BenchmarkComputeInitial(b *testing.B) { benchCompute(b, shapes.Mixed(1000)) }

// BenchmarkPodLabelChange measures one pod label change (and reading back
// every object it changed, as distribution would) in the Initial cluster
// with a growing number of NetworkPolicies: the cost must stay flat.
func BenchmarkPodLabelChange(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			c := shapes.Mixed(n)
			e := New()
			c.FeedTo(e)
			var changed []Change
			e.Subscribe(func(cs []Change) { changed = append(changed[:0], cs...) })
			pod := c.Pods[0].DeepCopy()
			labelsA, labelsB := map[string]string{"app": "app-0"}, map[string]string{"app": "app-1"}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%2 == 0 {
					pod.Labels = labelsB
				} else {
					pod.Labels = labelsA
				}
				i++
				e.UpsertPod(pod)
				readBack(e, changed)
			}
			b.ReportMetric(float64(len(changed)), "changes/op")
		})
	}
}

// readBack reads every object the changes name, as distribution does
// after a change.
func readBack(e *Engine, changed []Change) {
	for _, c := range changed {
		switch c.Kind {
		case KindPolicy:
			e.Policy(c.ID)
		case KindAppliedToGroup:
			e.AppliedToGroup(c.ID)
		case KindAddressGroup:
			e.AddressGroup(c.ID)
		}
	}
}

func BenchmarkComputeAdminHeavy(b *testing.B) { benchCompute(b, shapes.AdminHeavy(false)) }

// BenchmarkIncremental times one change on a fully computed engine plus
// reading back every object it reported (what distribution does next),
// as test/bench's incremental driver does; the undo is not timed.
func BenchmarkIncremental(b *testing.B) {
	type change struct {
		name     string
		do, undo func(e *Engine)
	}
	// The changes are the shapes' own (test/bench times the same ones).
	cases := []struct {
		name    string
		cluster *shapes.Cluster
		changes func(c *shapes.Cluster) []change
	}{
		{"one-namespace", shapes.OneNamespace(false), func(c *shapes.Cluster) []change {
			orig := c.Pods[0]
			return []change{{"pod-relabel", func(e *Engine) { e.UpsertPod(c.PodRelabel) }, func(e *Engine) { e.UpsertPod(orig) }}}
		}},
		{"admin-heavy", shapes.AdminHeavy(false), func(c *shapes.Cluster) []change {
			orig, pod := c.Namespaces[0], c.Pods[0]
			return []change{
				{"ns-relabel", func(e *Engine) { e.UpsertNamespace(c.NamespaceRelabel) }, func(e *Engine) { e.UpsertNamespace(orig) }},
				{"pod-relabel", func(e *Engine) { e.UpsertPod(c.PodRelabel) }, func(e *Engine) { e.UpsertPod(pod) }},
			}
		}},
	}
	for _, sh := range cases {
		c := sh.cluster
		e := New()
		c.FeedTo(e)
		e.Snapshot()
		var changed []Change
		e.Subscribe(func(cs []Change) { changed = append(changed, cs...) })
		for _, ch := range sh.changes(c) {
			b.Run(sh.name+"/"+ch.name, func(b *testing.B) {
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					changed = changed[:0]
					ch.do(e)
					readBack(e, changed)
					n = len(changed)
					b.StopTimer()
					ch.undo(e)
					b.StartTimer()
				}
				b.ReportMetric(float64(n), "changes/op")
			})
		}
	}
}
