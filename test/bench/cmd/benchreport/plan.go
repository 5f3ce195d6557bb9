package main

import (
	"fmt"
	"time"

	"github.com/tierflow/tierflow/test/bench/shapes"
)

// Sections of the report, in order.
const (
	SectionCompute     = "Controller: computation only"
	SectionEngineBench = "Controller: the engine's own benchmarks (pkg/compute)"
	SectionVsAntrea    = "Controller: from informer start, on Antrea's harness"
	SectionHarness     = "The harness alone (served lists and informers, no controller)"
	SectionCalibration = "This machine against the side-by-side's (the tierflow code measured beside Antrea, run here)"
	SectionInformers   = "Controller: from informer start"
	SectionIncremental = "Controller: incremental changes"
	SectionAgent       = "Agent: flow installation into OVS"
	SectionE2E         = "End-to-end realization latency (test bed)"
	SectionDatapath    = "Datapath overhead"
	SectionEncap       = "Encapsulation overhead"
	SectionFanout      = "Controller fan-out"
	SectionSessions    = "Controller: distribution sessions"
	SectionServices    = "Service proxy"
)

// Reference is a figure from ../shared/BENCH-REFERENCES.md, relative to the
// repository root (Antrea's network-policy controller on a machine of the
// project's kind).
type Reference struct {
	Time   string `json:"time,omitempty"`
	Memory string `json:"memory,omitempty"`
	Alloc  string `json:"alloc,omitempty"`
}

// antreaInformer: time from informer start, memory (heap in use) and
// peak RSS.
var antreaInformer = map[string]Reference{
	"small-namespaces": {Time: "13.56 s", Memory: "1,971 MB (peak RSS 2.19 GB)"},
	"large-namespaces": {Time: "5.74 s", Memory: "1,090 MB (peak RSS 1.24 GB)"},
	"one-namespace":    {Time: "4.88 s", Memory: "908 MB (peak RSS 0.99 GB)"},
	"policy-per-pod":   {Time: "76.84 s", Memory: "190 MB (peak RSS 0.31 GB)"},
}

// AntreaSideBySide is Antrea's controller in its own performance test
// (fake clientset in the test's process, peak RSS of the process from
// /usr/bin/time -v), run on a quiet machine of the project's kind one
// after tierflow's: the "Side by side" table of the references. Time in
// seconds, peak RSS in MiB.
type AntreaSideBySide struct {
	Seconds    float64 `json:"seconds"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// TierflowSeconds is tierflow's time in the same side-by-side run
	// (the code of sideBySideCommit, its benchmark sideBySideBench).
	TierflowSeconds float64 `json:"tierflow_seconds"`
}

// antreaSideBySide is keyed by shape; these are the four reference shapes.
var antreaSideBySide = map[string]AntreaSideBySide{
	"small-namespaces": {12.68, 2102, 5.54},
	"large-namespaces": {4.32, 1229, 4.29},
	"one-namespace":    {4.15, 945, 0.60},
	"policy-per-pod":   {22.59, 282, 0.61},
}

// sideBySideCommit is the tierflow code of the side-by-side run, or the
// closest to it this repository can name: the figures were measured on
// 2026-11-25 and entered the report with c890c24, whose parent this is:
// the newest code the side-by-side can have run. Older code of that day
// (8b4ec99, measured here) ran no faster, so it would not make Antrea's
// estimate on this machine smaller. Its benchmarks' peak RSS per shape,
// which does not depend on the machine's speed, reproduces the
// side-by-side's within 11 % (test/bench/METHODS.md, "Calibration").
const sideBySideCommit = "d8fb57843e97eab3100504c0c7cb3110af07d315"

// sideBySideBench names, per reference shape, the benchmark of
// sideBySideCommit's test/bench/shapes that the side-by-side ran (large
// namespaces and one namespace with the pods listed after the policies,
// as the side-by-side's table says).
var sideBySideBench = map[string]string{
	"small-namespaces": "BenchmarkControllerFromInformerStartSmallNamespaces",
	"large-namespaces": "BenchmarkControllerFromInformerStartLargeNamespacesPoliciesFirst",
	"one-namespace":    "BenchmarkControllerFromInformerStartOneNamespacePoliciesFirst",
	"policy-per-pod":   "BenchmarkControllerFromInformerStartPolicyPerPod",
}

// quickCalibration are the shapes calibrated in quick mode too: the
// side-by-side's code has full-scale shapes only, and these two take a
// fraction of a second (quick mode's controller runs are of smaller
// shapes, so no same-machine ratio is made of them).
var quickCalibration = map[string]bool{"one-namespace": true, "policy-per-pod": true}

// calibrationCount is how many times each calibration benchmark runs (its
// median is taken: the same-machine ratio divides by it).
const calibrationCount = 3

// referenceShapes are the shapes of the side-by-side table, in report order.
var referenceShapes = []string{"small-namespaces", "large-namespaces", "one-namespace", "policy-per-pod"}

// antreaCompute: computation only, per run.
var antreaCompute = map[string]Reference{
	"small-namespaces": {Time: "4.7 – 6.6 s", Alloc: "944 MB, 10.0 M allocations"},
	"large-namespaces": {Time: "1.38 – 1.45 s", Alloc: "290 MB, 3.3 M allocations"},
	"one-namespace":    {Time: "0.34 – 0.37 s", Alloc: "88 MB, 1.0 M allocations"},
	"policy-per-pod":   {Time: "58 – 82 s", Alloc: "139 MB, 1.5 M allocations"},
	"cluster-scoped":   {Time: "1.22 – 1.45 s", Alloc: "262 MB, 3.0 M allocations"},
}

// informerFullScale lists the shapes whose full scale is loaded into the
// API server in full mode. The others would need 100,000 pods or more
// (each a create and a status write, plus etcd holding them): on the
// project's 2-core machine that is tens of minutes of loading per shape,
// so in full mode they run from informer start at the quick scale, and
// the report says so.
var informerFullScale = map[string]bool{"one-namespace": true, "policy-per-pod": true, "admin-heavy": true}

// engineBenchmarks are pkg/compute's own benchmarks of the same shapes
// (fixed, full scale), reused as a cross-check in full mode.
var engineBenchmarks = []struct{ shape, bench string }{
	{"small-namespaces", "BenchmarkComputeSmallNamespaces"},
	{"large-namespaces", "BenchmarkComputeLargeNamespaces"},
	{"one-namespace", "BenchmarkComputeOneNamespace"},
	{"policy-per-pod", "BenchmarkComputePolicyPerPod"},
	{"cluster-scoped", "BenchmarkComputeClusterScoped"},
}

func scaleName(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}

// plan lists every run of a report.
func plan(quick bool) []*Run {
	const pkg = "./test/bench"
	scale := scaleName(quick)
	var runs []*Run
	add := func(r *Run) { runs = append(runs, r) }
	for _, s := range shapes.All() {
		ref := antreaCompute[s.Name]
		add(&Run{ID: "compute-" + s.Name, Section: SectionCompute, Scenario: s.Name, Description: s.Description, Scale: scale,
			Package: pkg, Bench: fmt.Sprintf("^BenchmarkControllerCompute$/^%s$", s.Name), Timeout: 30 * time.Minute, Reference: refOrNil(ref)})
	}
	if !quick {
		for _, e := range engineBenchmarks {
			add(&Run{ID: "engine-" + e.shape, Section: SectionEngineBench, Scenario: e.shape, Description: e.bench, Scale: "full",
				Package: "./pkg/compute", Bench: "^" + e.bench + "$", Timeout: 30 * time.Minute, Reference: refOrNil(antreaCompute[e.shape])})
		}
	}
	for _, name := range referenceShapes {
		s, err := shapes.Get(name)
		if err != nil {
			panic(err) // referenceShapes names shapes of package shapes
		}
		a := antreaSideBySide[name]
		ref := &Reference{Time: fmt.Sprintf("%.2f s", a.Seconds), Memory: fmt.Sprintf("peak RSS %.0f MiB", a.PeakRSSMiB)}
		add(&Run{ID: "vs-antrea-" + name, Section: SectionVsAntrea, Scenario: name, Description: s.Description, Scale: scale,
			Package: "./test/bench/shapes", Bench: fmt.Sprintf("^BenchmarkControllerFromInformerStart$/^%s$", name), Timeout: 30 * time.Minute, Reference: ref})
	}
	for _, name := range referenceShapes {
		s, _ := shapes.Get(name)
		add(&Run{ID: "harness-" + name, Section: SectionHarness, Scenario: name, Description: s.Description, Scale: scale,
			Package: "./test/bench/shapes", Bench: fmt.Sprintf("^BenchmarkInformersOnly$/^%s$", name), Timeout: 30 * time.Minute})
	}
	for _, name := range referenceShapes {
		if quick && !quickCalibration[name] {
			continue
		}
		s, _ := shapes.Get(name)
		add(&Run{ID: "calibration-" + name, Section: SectionCalibration, Scenario: name, Description: s.Description, Scale: "full",
			Package: "./test/bench/shapes", SourceCommit: sideBySideCommit, Bench: "^" + sideBySideBench[name] + "$", Count: calibrationCount, Timeout: 30 * time.Minute})
	}
	for _, s := range shapes.All() {
		sc := scale
		note := ""
		if !quick && !informerFullScale[s.Name] {
			sc = "quick"
			note = "quick scale in full mode: loading the full shape into the API server takes too long on this machine"
		}
		ref := antreaInformer[s.Name]
		add(&Run{ID: "informers-" + s.Name, Section: SectionInformers, Scenario: s.Name, Description: s.Description, Scale: sc, Note: note,
			Package: pkg, Bench: fmt.Sprintf("^BenchmarkControllerInformers$/^%s$", s.Name), Timeout: 60 * time.Minute, Reference: refOrNil(ref)})
	}
	for _, s := range shapes.All() {
		add(&Run{ID: "incremental-" + s.Name, Section: SectionIncremental, Scenario: s.Name, Description: s.Description, Scale: scale,
			Package: pkg, Bench: fmt.Sprintf("^BenchmarkControllerIncremental$/^%s$", s.Name), Timeout: 30 * time.Minute})
	}
	flows := []int{10000, 100000}
	if quick {
		flows = []int{2000, 10000}
	}
	for _, n := range flows {
		add(&Run{ID: fmt.Sprintf("agent-install-%d", n), Section: SectionAgent, Scenario: fmt.Sprintf("~%d flows", n),
			Description: fmt.Sprintf("policies totalling about %d flows (one third Admin tier, the rest NetworkPolicy tier, %d peers each) on a bridge with 8 real pods", n, 100),
			Scale:       scale, Package: pkg, Bench: fmt.Sprintf("^BenchmarkAgentInstall$/^flows=%d$", n), Timeout: 30 * time.Minute, NeedsOVS: true,
			Reference: &Reference{Time: "floor: ovs-ofctl -O OpenFlow13 --bundle add-flows of the same flows (measured in the same run)"}})
	}
	add(&Run{ID: "e2e-latency", Section: SectionE2E, Scenario: "policy change → flows on every node", Scale: scale,
		Description: "three nodes, 1,000 pods in 20 namespaces (quick: 60 in 4): from the API write of a policy change until its flows are on every node bridge that needs them; " +
			"per round NetworkPolicy create / update / delete, a pod relabel into and out of the policy's peers, AdminNetworkPolicy create / update / delete",
		Package: pkg, Bench: "^BenchmarkE2ELatency$", Timeout: 40 * time.Minute, NeedsOVS: true})
	add(&Run{ID: "datapath-throughput", Section: SectionDatapath, Scenario: "pod → pod", Scale: scale,
		Description: "TCP throughput between two pods of one node and across two nodes, short TCP connections per second on one node (userspace datapath), no policy vs 1000 rules realized, in one run",
		Package:     pkg, Bench: "^BenchmarkDatapathThroughput$", Timeout: 20 * time.Minute, NeedsOVS: true})
	add(&Run{ID: "encap-throughput", Section: SectionEncap, Scenario: "iperf3 pod → pod across nodes", Scale: scale,
		Description: "TCP throughput between pods on two nodes (each its own namespace, OVS and agent), node network noEncap vs encap (Geneve), on one underlay, in one run",
		Package:     pkg, Bench: "^BenchmarkEncapThroughput$", Timeout: 20 * time.Minute})
	for _, s := range shapes.All() {
		add(&Run{ID: "sessions-" + s.Name, Section: SectionSessions, Scenario: s.Name, Description: s.Description, Scale: scale,
			Package: pkg, Bench: fmt.Sprintf("^BenchmarkDistributionSessions$/^%s$", s.Name), Timeout: 30 * time.Minute})
	}
	add(&Run{ID: "service-proxy", Section: SectionServices, Scenario: "Services in the pipeline", Scale: scale,
		Description: "10,000 Services (quick: 1,000) in a real kube-apiserver, watched and realized into a real bridge by the agent's proxy; EndpointSlice changes; connection rate and throughput through a ClusterIP vs to the pod",
		Package:     pkg, Bench: "^BenchmarkServiceProxy$", Timeout: 40 * time.Minute, NeedsOVS: true})
	add(&Run{ID: "fanout", Section: SectionFanout, Scenario: "datapath-less agents", Scale: scale,
		Description: "1,000 datapath-less agents (pkg/agent/nodatapath, quick: 100) on the real distribution server; controller on a real kube-apiserver holding 100,000 pods in 1,000 namespaces with a NetworkPolicy each (quick: 400 in 20)",
		Package:     pkg, Bench: "^BenchmarkFanout$", Timeout: 60 * time.Minute})
	return runs
}

func refOrNil(r Reference) *Reference {
	if r == (Reference{}) {
		return nil
	}
	return &r
}
