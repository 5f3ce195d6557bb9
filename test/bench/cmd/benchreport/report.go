package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tierflow/tierflow/test/bench/measure"
)

// Run statuses.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusNotMeasured = "not measured"
)

// Run is one driver run: one scenario in one process.
type Run struct {
	ID          string `json:"id"`
	Section     string `json:"section"`
	Scenario    string `json:"scenario"`
	Description string `json:"description,omitempty"`
	// Scale is "full" or "quick" (the reduced sizes of package shapes).
	Scale string `json:"scale"`
	Note  string `json:"note,omitempty"`

	Package string        `json:"package,omitempty"`
	Bench   string        `json:"bench,omitempty"`
	Timeout time.Duration `json:"-"`
	// NeedsOVS: the driver runs the host's one private ovs-vswitchd
	// (test/ovsenv) and may first wait for other processes' to finish.
	NeedsOVS    bool   `json:"-"`
	NotMeasured string `json:"-"`
	// SourceCommit, when set, is the commit of this repository whose
	// Package is compiled and run instead of the working tree's (see
	// sourceTree): the calibration runs measure old code on this machine.
	SourceCommit string `json:"source_commit,omitempty"`
	// Count is how many processes run the benchmark, one after the
	// other (at least one); Metrics then holds each figure's median and
	// ProcessMaxRSSMiB the largest, WallSeconds their sum.
	Count int `json:"count,omitempty"`

	// Date is when the run started (RFC 3339, UTC), Commit the commit
	// measured (its invocation's: with BENCH_MERGE=1 runs can differ).
	Date   string `json:"date,omitempty"`
	Commit string `json:"commit,omitempty"`
	Status string `json:"status"`
	// Reason says why a run failed or was not measured.
	Reason string `json:"reason,omitempty"`
	// Metrics are the driver's figures by unit (see the drivers in
	// test/bench for their meaning).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// ProcessMaxRSSMiB is the driver process's peak RSS as the kernel
	// reports it at exit (everything the process did, including building
	// the scenario's objects).
	ProcessMaxRSSMiB float64 `json:"process_max_rss_mib,omitempty"`
	// LoadAvg are the host's 1-minute load averages sampled while the run
	// ran (at its start, every 30 s, at its end).
	LoadAvg     []float64  `json:"load_avg,omitempty"`
	WallSeconds float64    `json:"wall_seconds"`
	Log         string     `json:"log,omitempty"`
	Reference   *Reference `json:"reference,omitempty"`
}

// Report is report.json.
type Report struct {
	Date   string `json:"date"`
	Mode   string `json:"mode"`
	Commit string `json:"commit,omitempty"`
	// LoadAvg summarizes every run's load samples (see Run.LoadAvg).
	LoadAvg     *LoadSummary    `json:"load_avg,omitempty"`
	Machine     measure.Machine `json:"machine"`
	WallSeconds float64         `json:"wall_seconds"`
	// AgentVsOfctlRatio is the agent's installation time over ovs-ofctl's
	// for the same flows, at the largest flow count measured (~100k in
	// full mode); null when not measured.
	AgentVsOfctlRatio *float64 `json:"agent_vs_ofctl_ratio"`
	// E2ELatencyP99Ms is the end-to-end realization latency's 99th
	// percentile over every change of the run, and E2ELatencyResolutionMs
	// how late the bridges' flow monitors may report a change (see the
	// end-to-end section); null when not measured.
	E2ELatencyP99Ms        *float64 `json:"e2e_latency_p99_ms"`
	E2ELatencyResolutionMs *float64 `json:"e2e_latency_resolution_ms"`
	// AgentVsOfctlRatioByFlows is the same ratio for every flow count
	// measured, keyed by the number of flows installed.
	AgentVsOfctlRatioByFlows map[string]float64 `json:"agent_vs_ofctl_ratio_by_flows,omitempty"`
	// ControllerVsAntrea is, per reference shape, tierflow-controller's
	// time from informer start on Antrea's harness over Antrea's time in
	// the side-by-side run (AntreaSideBySide); ControllerRSSVsAntrea the
	// same for the process's peak RSS. In quick mode the shapes are
	// smaller than the reference's: the ratios do not compare.
	ControllerVsAntrea    map[string]float64 `json:"controller_vs_antrea"`
	ControllerRSSVsAntrea map[string]float64 `json:"controller_rss_vs_antrea"`
	// ControllerCPUSeconds is, per reference shape, the CPU time (all
	// threads, GC included) of the same timed part, and HarnessCPUSeconds
	// that of the harness alone: on a loaded machine the wall time
	// includes waiting for a core, the CPU time much less so.
	ControllerCPUSeconds map[string]float64          `json:"controller_cpu_seconds"`
	HarnessCPUSeconds    map[string]float64          `json:"harness_cpu_seconds"`
	AntreaSideBySide     map[string]AntreaSideBySide `json:"antrea_side_by_side"`
	// SideBySideCodeSeconds is, per reference shape, the time the
	// side-by-side's tierflow code (sideBySideCommit, its own benchmark)
	// takes on this machine; MachineSpeedVsSideBySide is its time in the
	// side-by-side over that (above 1: this machine runs the same code
	// faster); AntreaEstimatedSeconds is Antrea's side-by-side time
	// scaled by it, and ControllerVsAntreaSameMachine the controller's
	// time over that estimate: controller_vs_antrea with the machine's
	// speed taken out (full mode only: quick mode's shapes are smaller).
	SideBySideCodeSeconds         map[string]float64 `json:"side_by_side_code_seconds,omitempty"`
	MachineSpeedVsSideBySide      map[string]float64 `json:"machine_speed_vs_side_by_side,omitempty"`
	AntreaEstimatedSeconds        map[string]float64 `json:"antrea_estimated_seconds,omitempty"`
	ControllerVsAntreaSameMachine map[string]float64 `json:"controller_vs_antrea_same_machine,omitempty"`
	Runs                          []*Run             `json:"runs"`
}

// LoadSummary is the 1-minute load average over a report's runs.
type LoadSummary struct {
	Min     float64 `json:"min"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
}

func (rep *Report) summarize() {
	var load LoadSummary
	for _, r := range rep.Runs {
		for _, l := range r.LoadAvg {
			if load.Samples == 0 || l < load.Min {
				load.Min = l
			}
			load.Max = max(load.Max, l)
			load.Mean += l
			load.Samples++
		}
	}
	if load.Samples > 0 {
		load.Mean /= float64(load.Samples)
		rep.LoadAvg = &load
	}
	rep.ControllerVsAntrea, rep.ControllerRSSVsAntrea = map[string]float64{}, map[string]float64{}
	rep.ControllerCPUSeconds, rep.HarnessCPUSeconds = map[string]float64{}, map[string]float64{}
	rep.AntreaSideBySide = antreaSideBySide
	for _, r := range rep.Runs {
		a, ok := antreaSideBySide[r.Scenario]
		if r.Status != StatusOK || !ok {
			continue
		}
		if r.Section == SectionHarness {
			if c, ok := val(r, "cpu-s"); ok {
				rep.HarnessCPUSeconds[r.Scenario] = c
			}
		}
		if r.Section != SectionVsAntrea {
			continue
		}
		if c, ok := val(r, "cpu-s"); ok {
			rep.ControllerCPUSeconds[r.Scenario] = c
		}
		if t, ok := val(r, "informer-s"); ok {
			rep.ControllerVsAntrea[r.Scenario] = t / a.Seconds
		}
		if m, ok := val(r, "peak-rss-MiB"); ok {
			rep.ControllerRSSVsAntrea[r.Scenario] = m / a.PeakRSSMiB
		}
	}
	rep.calibrate()
	for _, r := range rep.Runs {
		if r.Section != SectionE2E || r.Status != StatusOK {
			continue
		}
		if v, ok := val(r, "p99-ms"); ok {
			rep.E2ELatencyP99Ms = &v
		}
		if v, ok := val(r, "resolution-ms"); ok {
			rep.E2ELatencyResolutionMs = &v
		}
	}
	best := -1.0
	for _, r := range rep.Runs {
		if r.Section != SectionAgent || r.Status != StatusOK {
			continue
		}
		ratio, ok := r.Metrics["agent/ofctl"]
		if !ok {
			continue
		}
		flows := r.Metrics["bundle-flows"]
		if rep.AgentVsOfctlRatioByFlows == nil {
			rep.AgentVsOfctlRatioByFlows = map[string]float64{}
		}
		rep.AgentVsOfctlRatioByFlows[fmt.Sprintf("%.0f", flows)] = ratio
		if flows > best {
			best = flows
			v := ratio
			rep.AgentVsOfctlRatio = &v
		}
	}
}

// calibrate fills the same-machine comparison from the calibration runs
// (SectionCalibration): Antrea's side-by-side time is scaled by how much
// faster or slower this machine runs the tierflow code measured beside it.
func (rep *Report) calibrate() {
	rep.SideBySideCodeSeconds, rep.MachineSpeedVsSideBySide = nil, nil
	rep.AntreaEstimatedSeconds, rep.ControllerVsAntreaSameMachine = nil, nil
	for _, r := range rep.Runs {
		a, ok := antreaSideBySide[r.Scenario]
		if r.Section != SectionCalibration || r.Status != StatusOK || !ok || a.TierflowSeconds <= 0 {
			continue
		}
		ns, ok := val(r, "ns/op")
		if !ok || ns <= 0 {
			continue
		}
		here := ns / 1e9
		if rep.SideBySideCodeSeconds == nil {
			rep.SideBySideCodeSeconds, rep.MachineSpeedVsSideBySide = map[string]float64{}, map[string]float64{}
			rep.AntreaEstimatedSeconds, rep.ControllerVsAntreaSameMachine = map[string]float64{}, map[string]float64{}
		}
		rep.SideBySideCodeSeconds[r.Scenario] = here
		speed := a.TierflowSeconds / here
		rep.MachineSpeedVsSideBySide[r.Scenario] = speed
		antrea := a.Seconds / speed
		rep.AntreaEstimatedSeconds[r.Scenario] = antrea
		if v, ok := rep.ControllerVsAntrea[r.Scenario]; ok && rep.Mode == "full" {
			rep.ControllerVsAntreaSameMachine[r.Scenario] = v * a.Seconds / antrea
		}
	}
}

// Markdown renders report.md.
func (rep *Report) Markdown() string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# tierflow benchmark report\n\n")
	fmt.Fprintf(&b, "- Date: %s (this invocation took %s)\n", rep.Date, (time.Duration(rep.WallSeconds) * time.Second).String())
	first, last := rep.Date, rep.Date
	for _, r := range rep.Runs {
		if r.Date != "" && r.Date < first {
			first = r.Date
		}
		if r.Date > last {
			last = r.Date
		}
	}
	if first != last {
		fmt.Fprintf(&b, "- Runs measured from %s to %s (each run's start is in report.json; with BENCH_MERGE=1 some come from an earlier invocation)\n", first, last)
	}
	fmt.Fprintf(&b, "- Mode: **%s**", rep.Mode)
	if rep.Mode == "quick" {
		b.WriteString(" (reduced scales, same code paths: the reference values are for the full shapes and do not compare)")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- Machine: %d cores, %d MiB memory (from /proc), %s, Linux %s, %s\n", m.Cores, m.MemoryMiB, m.CPU, m.Kernel, m.GoVersion)
	if rep.Commit != "" {
		fmt.Fprintf(&b, "- Commit: %s\n", rep.Commit)
	}
	if cs := runCommits(rep); len(cs) > 1 {
		fmt.Fprintf(&b, "- Commits measured, by run (BENCH_MERGE=1 kept runs of earlier invocations): %s\n", strings.Join(cs, "; "))
	}
	if l := rep.LoadAvg; l != nil {
		fmt.Fprintf(&b, "- Load average (1 min) while the runs ran: min %.2f, mean %.2f, max %.2f (%d samples: each run's start and end, and every 30 s; per run in report.json)\n", l.Min, l.Mean, l.Max, l.Samples)
	}
	b.WriteString("- References: Antrea's network-policy controller (commit fc70f2bb) on a machine of the project's kind (2 cores, 24 GiB), from ../shared/BENCH-REFERENCES.md (relative to the repository root).\n")
	b.WriteString("- Times are wall-clock on a machine shared with other work; CPU time (user + system of the driver process) is given beside them where it matters: when it is well below the wall time, the run waited for a core.\n")
	b.WriteString("- Every scenario ran once in its own process (`go test -bench` drivers in test/bench, `-benchtime=1x`); logs are in _output/bench/logs. Numbers are reports, not pass/fail.\n")
	if len(rep.ControllerVsAntrea) > 0 {
		fmt.Fprintf(&b, "- **controller_vs_antrea** (time from informer start on Antrea's harness / Antrea's): %s\n", byShape(rep.ControllerVsAntrea))
	}
	if len(rep.ControllerVsAntreaSameMachine) > 0 {
		fmt.Fprintf(&b, "- **controller_vs_antrea_same_machine** (the same, with Antrea's time scaled to this machine by the side-by-side's tierflow code run here): %s\n", byShape(rep.ControllerVsAntreaSameMachine))
	}
	if len(rep.ControllerCPUSeconds) > 0 {
		var parts []string
		for _, name := range referenceShapes {
			if v, ok := rep.ControllerCPUSeconds[name]; ok {
				part := fmt.Sprintf("%s %.2f", name, v)
				if h, ok := rep.HarnessCPUSeconds[name]; ok {
					part += fmt.Sprintf(" (harness alone %.2f)", h)
				}
				parts = append(parts, part)
			}
		}
		fmt.Fprintf(&b, "- controller_cpu_seconds (the same runs' CPU time, all threads; less inflated by load than wall time): %s\n", strings.Join(parts, ", "))
	}
	if rep.E2ELatencyP99Ms != nil && rep.E2ELatencyResolutionMs != nil {
		fmt.Fprintf(&b, "- **e2e_latency_p99_ms: %.1f** (end-to-end realization, resolution %.3g ms)\n", *rep.E2ELatencyP99Ms, *rep.E2ELatencyResolutionMs)
	}
	if rep.AgentVsOfctlRatio != nil {
		fmt.Fprintf(&b, "- **agent_vs_ofctl_ratio: %.2f** (agent time / `ovs-ofctl --bundle add-flows` time, largest flow count)\n", *rep.AgentVsOfctlRatio)
	}
	b.WriteString("\n")

	bySection := map[string][]*Run{}
	for _, r := range rep.Runs {
		bySection[r.Section] = append(bySection[r.Section], r)
	}
	for _, s := range []struct {
		name  string
		intro string
		cols  []string
		row   func(r *Run) []string
	}{
		{SectionCompute,
			"The compute engine (pkg/compute) fed directly with every object, then a snapshot that builds every model object. Time, allocations (bytes and count) of that; heap in use after a full GC with the input objects dropped (the engine's state); peak RSS of the computation (reset after the input was built).",
			[]string{"scenario", "scale", "pods", "policies", "time", "CPU time", "allocated", "allocations", "heap in use", "peak RSS", "groups (applied-to / address)", "Antrea time", "Antrea allocated"},
			func(r *Run) []string {
				return []string{r.Scenario, r.Scale, num(r, "pods"), num(r, "policies"), secs(r, "compute-s"), secs(r, "cpu-s"), mibs(r, "alloc-MiB"), count(r, "allocs"),
					mibs(r, "heap-MiB"), mibs(r, "peak-rss-MiB"), num(r, "appliedToGroups") + " / " + num(r, "addressGroups"), ref(r, "time"), ref(r, "alloc")}
			}},
		{SectionEngineBench,
			"pkg/compute's own benchmarks (bench_test.go, fixed full-scale shapes), run the same way as a cross-check; full mode only. Process peak RSS includes building the input objects.",
			[]string{"scenario", "benchmark", "time", "CPU time", "allocated", "allocations", "heap in use", "process peak RSS", "Antrea time", "Antrea allocated"},
			func(r *Run) []string {
				t := "–"
				if v, ok := r.Metrics["ns/op"]; ok {
					t = fmt.Sprintf("%.2f s", v/1e9)
				}
				a := "–"
				if v, ok := r.Metrics["B/op"]; ok {
					a = fmt.Sprintf("%.0f MiB", v/(1<<20))
				}
				return []string{r.Scenario, r.Description, t, secs(r, "cpu-s/op"), a, count(r, "allocs/op"), mibs(r, "heapMB"), fmt.Sprintf("%.0f MiB", r.ProcessMaxRSSMiB), ref(r, "time"), ref(r, "alloc")}
			}},
		{SectionVsAntrea,
			"Antrea's own controller performance test measures from the informers' start over a fake clientset in the test's process, with the process's peak RSS (`/usr/bin/time -v`); here pkg/controller runs on a harness that stands in for an apiserver and holds no object: each list the controller's informers make of every namespace, node, pod or NetworkPolicy makes the shape's objects of that kind again (deterministically, the same every time) and answers a deep copy of them (what decoding an apiserver's list gives); watches go to a fake clientset. The clock runs from starting the controller until its initial lists are in the engine and a snapshot holds every computed object. Peak RSS is the whole process's, as Antrea's was: the controller and what the lists hand its informers (Antrea's process also held the shape's objects and its fake clientset's copy of every object). Harness RSS is what the process held before the clock started (the test binary); the harness's own cost with no controller is in the next section. Antrea: the side-by-side run of ../shared/BENCH-REFERENCES.md (quiet machine). Ratios are tierflow / Antrea (report.json: controller_vs_antrea, controller_rss_vs_antrea).",
			[]string{"scenario", "scale", "pods", "policies", "time", "CPU time", "peak RSS (process)", "harness RSS", "heap in use after", "Antrea time", "Antrea peak RSS", "time / Antrea", "peak RSS / Antrea"},
			func(r *Run) []string {
				a := antreaSideBySide[r.Scenario]
				rel := func(unit string, ref float64) string {
					if v, ok := val(r, unit); ok && ref > 0 {
						return fmt.Sprintf("**%.3f**", v/ref)
					}
					return "–"
				}
				return []string{r.Scenario, r.Scale, num(r, "pods"), num(r, "policies"), secs(r, "informer-s"), secs(r, "cpu-s"), mibs(r, "peak-rss-MiB"), mibs(r, "harness-rss-MiB"),
					mibs(r, "heap-MiB"), fmt.Sprintf("%.2f s", a.Seconds), fmt.Sprintf("%.0f MiB", a.PeakRSSMiB), rel("informer-s", a.Seconds), rel("peak-rss-MiB", a.PeakRSSMiB)}
			}},
		{SectionHarness,
			"The floor of the harness above: the same clientset and client-go informers (with the controller's transform of core objects) listing every object, with handlers that only count them. Nothing of this is tierflow's work; it is what the process of the section above spends before the controller does anything.",
			[]string{"scenario", "scale", "pods", "policies", "time", "CPU time", "peak RSS (process)", "harness RSS", "heap in use after"},
			func(r *Run) []string {
				return []string{r.Scenario, r.Scale, num(r, "pods"), num(r, "policies"), secs(r, "informer-s"), secs(r, "cpu-s"), mibs(r, "peak-rss-MiB"), mibs(r, "harness-rss-MiB"), mibs(r, "heap-MiB")}
			}},
		{SectionCalibration,
			"Machines of the project's kind differ in speed (the same code has run 1.5–3× faster on one than on another), while Antrea's figures above come from one run on one of them, beside tierflow's code of that day. That code (commit " + sideBySideCommit[:12] + ", extracted from this repository's history, its own benchmark of the shape as the side-by-side ran it: fake clientset holding every object, pods listed after the policies for large namespaces and one namespace) runs here in " + fmt.Sprint(calibrationCount) + " processes, one after the other (median). Machine speed is its side-by-side time over its time here; Antrea's estimated time here is Antrea's side-by-side time over that speed, and the last column is the controller's time (section above) over that estimate (full mode only; quick mode calibrates two shapes to show the machine's speed). Process peak RSS is the whole process's, building the shape's objects included.",
			[]string{"scenario", "benchmark", "time here", "time in the side-by-side", "machine speed", "Antrea estimated here", "controller now / Antrea here", "process peak RSS"},
			func(r *Run) []string {
				a := antreaSideBySide[r.Scenario]
				cell := func(m map[string]float64, f string) string {
					if v, ok := m[r.Scenario]; ok {
						return fmt.Sprintf(f, v)
					}
					return "–"
				}
				return []string{r.Scenario, sideBySideBench[r.Scenario], cell(rep.SideBySideCodeSeconds, "%.2f s"), fmt.Sprintf("%.2f s", a.TierflowSeconds),
					cell(rep.MachineSpeedVsSideBySide, "%.2f×"), cell(rep.AntreaEstimatedSeconds, "%.2f s"), cell(rep.ControllerVsAntreaSameMachine, "**%.3f**"), fmt.Sprintf("%.0f MiB", r.ProcessMaxRSSMiB)}
			}},
		{SectionInformers,
			"Every object is first created in a real kube-apiserver (test/kubeapi; pods created, then their status written). Then pkg/controller starts its informers; the clock stops when the engine holds every policy and every pod in its applied-to groups (polled every 100 ms). Heap in use includes the informer caches; peak RSS is the controller's run (reset after loading).",
			[]string{"scenario", "scale", "pods", "policies", "time from informer start", "CPU time", "heap in use", "peak RSS", "API load time", "Antrea time", "Antrea memory"},
			func(r *Run) []string {
				return []string{r.Scenario, r.Scale + noteMark(r), num(r, "pods"), num(r, "policies"), secs(r, "informer-s"), secs(r, "cpu-s"), mibs(r, "heap-MiB"), mibs(r, "peak-rss-MiB"),
					secs(r, "load-s"), ref(r, "time"), ref(r, "memory")}
			}},
		{SectionIncremental,
			"One change on the fully computed engine, timed from the engine call until every object it reports changed has been read back (what distribution does next); 21 runs each (change, then undo untimed): median / maximum, and the number of changed objects. Computation only.",
			[]string{"scenario", "scale", "pods", "policies", "pod relabel", "namespace relabel", "policy added"},
			func(r *Run) []string {
				return []string{r.Scenario, r.Scale, num(r, "pods"), num(r, "policies"), incr(r, "pod-relabel"), incr(r, "ns-relabel"), incr(r, "policy-add")}
			}},
		{SectionAgent,
			"The agent's realizer (pkg/agent/realizer: compile, diff, one atomic OpenFlow bundle over its pkg/ovs/openflow connection) realizing the policies on a fresh bridge of a private ovs-vswitchd (test/ovsenv, userspace datapath), against `ovs-ofctl -O OpenFlow13 --bundle add-flows` of the very same flows (the realizer's bundle rendered by pkg/ovs/openflow's Flow.String) into another fresh bridge in the same run; 5 pairs in turn (quick: 3), each on bridges emptied first: median times, and the median (minimum – maximum) of the pairs' ratios. One policy change: on the bridge holding those flows, one NetworkPolicy's rule moves to another port (Realizer.Update with the agent's whole state, as the agent applies any change); median of 7, with the flows its bundle added, modified and deleted.",
			[]string{"scenario", "scale", "policies", "flows installed", "agent", "ovs-ofctl (floor)", "agent / ofctl", "flows on bridge (agent / ofctl)", "one policy change on that bridge"},
			func(r *Run) []string {
				change := "–"
				if t, ok := val(r, "change-ms"); ok {
					change = fmt.Sprintf("%.1f ms (%s flows touched)", t, num(r, "change-flows"))
				}
				spread := ratio(r, "agent/ofctl")
				if lo, ok := val(r, "agent/ofctl-min"); ok {
					hi, _ := val(r, "agent/ofctl-max")
					spread += fmt.Sprintf(" (%.2f – %.2f)", lo, hi)
				}
				return []string{r.Scenario, r.Scale, num(r, "policies"), num(r, "bundle-flows"), secs(r, "agent-s"), secs(r, "ofctl-s"), spread,
					num(r, "agent-bridge-flows") + " / " + num(r, "ofctl-bridge-flows"), change}
			}},
		{SectionE2E,
			"The simulated cluster (test/testbed: real kube-apiserver, kwok nodes, pods as network namespaces on one bridge per node of a private ovs-vswitchd) with the real tierflow-controller and one tierflow-agent per node (test/e2e/framework). Each change is timed from the start of its API write until the bridge of every node that needs it (the nodes of the pods the rule applies to) has reported the flows that realize it: an OpenFlow flow monitor on each bridge (pkg/ovs/openflow Monitor: the ONF flow monitor extension Open vSwitch implements for OpenFlow 1.3) reports every committed change as the switch commits it, and the change counts as seen when the bridge's flows make the rule's port or peer address present (created, updated, joining) and the replaced ones absent (updated, deleted, leaving); the bridges are then cross-checked with `ovs-ofctl dump-flows` (a disagreement fails the run). Resolution: the monitors connect to each bridge's loopback TCP listener, and a change is seen at the kernel's receive stamp (SO_TIMESTAMPNS, taken inside the switch's send call) of the report that made its flows hold; the resolution is the p99 of the kernel's path from a send call to that stamp, measured before each round on a loopback connection of the bench (test/bench/METHODS.md, Resolution, also says what it leaves out: the switch's own work between applying a change and sending its report). Reading delay: how much later the bench read the reports than the kernel stamped them (what stamping on read would add). Calibration round trip: before each round this process adds one flow to a scratch table of each bridge and deletes it (one flow-mod each), timed from the write until the monitor's report — it includes ovs-vswitchd's turn for the flow-mod, so it is no measure of the monitor's delay. Percentiles are nearest rank; per change kind p50 / p90 / p99 / max.",
			[]string{"scale", "nodes", "pods", "pods running after", "changes", "p50", "p90", "p99", "max", "resolution (p99 of the loopback stamp path; max)", "monitor reading delay (p50 / p99)", "calibration round trip (p50 / p99)", "calibration: monitor read after the switch's reply (p50 / p99)", "agent's commit reply vs monitor (p99 of the difference)", "API write (p50 / p99)", "after the write (p50 / p99)", "load during the rounds", "NP create", "NP update", "NP delete", "pod joins peers", "pod leaves peers", "ANP create", "ANP update", "ANP delete"},
			func(r *Run) []string {
				kind := func(k string) string {
					p50, ok1 := val(r, k+"-p50-ms")
					p90, _ := val(r, k+"-p90-ms")
					p99, _ := val(r, k+"-p99-ms")
					max, ok2 := val(r, k+"-max-ms")
					if !ok1 || !ok2 {
						return "–"
					}
					return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f ms", p50, p90, p99, max)
				}
				return []string{r.Scale, num(r, "nodes"), num(r, "pods"), secs(r, "pods-s"), num(r, "changes"), "**" + ms(r, "p50-ms") + "**", ms(r, "p90-ms"), "**" + ms(r, "p99-ms") + "**", ms(r, "max-ms"),
					ms(r, "resolution-ms") + " (" + ms(r, "stamp-path-max-ms") + ")", ms(r, "monitor-read-delay-p50-ms") + " / " + ms(r, "monitor-read-delay-p99-ms"), ms(r, "calib-roundtrip-p50-ms") + " / " + ms(r, "calib-roundtrip-p99-ms"), ms(r, "calib-after-reply-p50-ms") + " / " + ms(r, "calib-after-reply-p99-ms"), ms(r, "ack-monitor-agreement-p99-ms"),
					ms(r, "write-p50-ms") + " / " + ms(r, "write-p99-ms"), ms(r, "after-write-p50-ms") + " / " + ms(r, "after-write-p99-ms"),
					num(r, "rounds-load-min") + " – " + num(r, "rounds-load-max"),
					kind("np-create"), kind("np-update"), kind("np-delete"), kind("relabel-join"), kind("relabel-leave"), kind("anp-create"), kind("anp-update"), kind("anp-delete")}
			}},
		{SectionDatapath,
			"Pods on bridges of a private ovs-vswitchd (userspace datapath) through the agent's full pipeline, with no policy and with 1000 rules realized on every node (a quarter Admin-tier Deny rules against other peers, the rest NetworkPolicy-tier Allow rules; only the last one allows the clients), the two settings alternating in one run; medians over the rounds, ratios per round (rules / no policy), median. TCP throughput by iperf3 between two pods of one node and from a pod of another node (two bridges joined by patch ports, each the other's uplink); short TCP connections per second (connect and close, 4 at a time, each a new conntrack entry) between two pods of one node. A port no rule allows is checked closed each round. Shared 2-core machine: expect noise.",
			[]string{"scale", "same node: no policy", "same node: 1000 rules", "ratio", "across nodes: no policy", "across nodes: 1000 rules", "ratio", "connections/s: no policy", "connections/s: 1000 rules", "ratio", "flows (no policy / rules)", "durations × rounds"},
			func(r *Run) []string {
				return []string{r.Scale, gbps(r, "no-policy-Gbps"), gbps(r, "rules-Gbps"), ratio(r, "rules/no-policy"),
					gbps(r, "remote-no-policy-Gbps"), gbps(r, "remote-rules-Gbps"), ratio(r, "remote-rules/no-policy"),
					num(r, "no-policy-conn/s"), num(r, "rules-conn/s"), ratio(r, "conn-rules/no-policy"),
					num(r, "no-policy-flows") + " / " + num(r, "rules-flows"), "iperf3 " + secs(r, "iperf-s") + ", connections " + secs(r, "conn-s") + " × " + num(r, "rounds")}
			}},
		{SectionEncap,
			"iperf3 (TCP) between pods on two nodes, each node its own network namespace with its own OVS (userspace datapath) and the real agent (watching Nodes on a real kube-apiserver, following the real controller), the nodes joined by one veth pair (one subnet, so both modes work on it). noEncap: pod → gateway → host routes → the other node's host → its gateway → pod. encap: pod → Geneve tunnel (OVS's userspace tunnelling through the node's underlay bridge) → pod. Pods have each mode's MTU (1500; 1450 under Geneve over IPv4). Every noEncap round, then every encap round (encap moves the node's address onto its underlay bridge, which noEncap would then route through too); medians. Shared 2-core machine: expect noise.",
			[]string{"scale", "noEncap", "encap (Geneve)", "encap / noEncap", "encap pod MTU", "iperf3 duration × rounds"},
			func(r *Run) []string {
				return []string{r.Scale, gbps(r, "noencap-Gbps"), gbps(r, "encap-Gbps"), ratio(r, "encap/noencap"), num(r, "encap-pod-mtu"),
					secs(r, "iperf-s") + " × " + num(r, "rounds") + " each"}
			}},
		{SectionServices,
			"The agent's Service proxy (pkg/agent/proxy: Watcher on a real kube-apiserver, Compiler, realizer bundles into a real bridge, userspace datapath) with every Service holding two endpoints on two ports. First realization: from the informers' start until every Service's flows and groups are installed. Flows and groups per Service: the proxy's own (frontends, ARP responders, endpoint translations; select groups). EndpointSlice change: an endpoint added to or removed from one Service's slice, from the API write until the switch acknowledged the bundle with it (p50 / max). Connections: TCP connect, one echo and close, four clients in parallel, through the Service's ClusterIP and straight to the pod, alternately; throughput: iperf3 the same way; medians over the rounds. A shared 2-core machine: expect noise.",
			[]string{"scale", "Services", "first realization", "flows / Service", "groups / Service", "bridge flows", "slice change p50 / max", "conn/s Service / pod", "throughput Service / pod", "heap in use", "peak RSS"},
			func(r *Run) []string {
				return []string{r.Scale, num(r, "services"), secs(r, "first-realize-s"), fmt.Sprintf("%.1f", r.Metrics["flows/service"]), fmt.Sprintf("%.1f", r.Metrics["groups/service"]),
					num(r, "bridge-flows"), ms(r, "slice-change-p50-ms") + " / " + ms(r, "slice-change-max-ms"),
					num(r, "service-conn/s") + " / " + num(r, "pod-conn/s"), gbps(r, "service-Gbps") + " / " + gbps(r, "pod-Gbps"),
					mibs(r, "heap-MiB"), mibs(r, "peak-rss-MiB")}
			}},
		{SectionSessions,
			"The distribution server (pkg/distribution/server) over the fully computed engine, with one in-process stream per node of the shape (no gRPC), each until its full update was sent: the heap the sessions add (after a full GC) and the largest node's encoded full update (what one full-sync slot holds while sending). With the computation and informer figures, the basis of the controller's memory limit (manifests/README.md).",
			[]string{"scenario", "scale", "agents", "sessions' heap", "largest full update"},
			func(r *Run) []string {
				return []string{r.Scenario, r.Scale, num(r, "agents"), mibs(r, "sessions-MiB"), num(r, "largest-full-update-KiB") + " KiB"}
			}},
		{SectionFanout,
			"pkg/controller on a real kube-apiserver and the distribution server (gRPC over TLS, static tokens) in the benchmark's process; datapath-less agents (pkg/agent/nodatapath), one gRPC stream each, in a process of their own, so the memory figures are the controller's (its informer caches, engine and distribution state, and the updates queued to the agents; peak RSS measured from the controller's start). Initial: from the agents' start until each has exactly the policies spanning its node. Change: an AdminNetworkPolicy selecting every namespace, its peers one team's namespaces (a tenth of the pods), created through the API, until every agent's state holds it. The first such policy brings every agent that new address group (in full mode 10,000 members, about 1 MB of JSON per agent, all decoded by the agents' process on the same two cores); the later ones reuse it (median / maximum).",
			[]string{"scale", "agents", "pods", "policies", "initial convergence", "first change (new address group)", "later changes p50", "later changes max", "changes", "controller heap in use", "controller peak RSS", "agents' process peak RSS"},
			func(r *Run) []string {
				return []string{r.Scale, num(r, "agents"), num(r, "pods"), num(r, "policies"), secs(r, "initial-s"), ms(r, "first-change-ms"), ms(r, "change-p50-ms"), ms(r, "change-max-ms"), num(r, "changes"),
					mibs(r, "heap-MiB"), mibs(r, "peak-rss-MiB"), mibs(r, "agents-rss-MiB")}
			}},
	} {
		runs := bySection[s.name]
		if len(runs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n", s.name)
		if s.intro != "" {
			fmt.Fprintf(&b, "%s\n\n", s.intro)
		}
		var notes []string
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(s.cols, " | "), strings.Repeat("---|", len(s.cols)))
		for _, r := range runs {
			if r.Status != StatusOK {
				cells := make([]string, len(s.cols))
				cells[0] = r.Scenario
				for i := 1; i < len(cells); i++ {
					cells[i] = ""
				}
				if len(cells) > 1 {
					cells[1] = r.Scale
				}
				if len(cells) > 2 {
					cells[2] = "**" + r.Status + "**"
				}
				fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
				n := fmt.Sprintf("%s — %s: %s", r.Scenario, r.Status, r.Reason)
				if r.Log != "" && r.Status == StatusFailed {
					n += " (log: " + r.Log + ")"
				}
				notes = append(notes, n)
				continue
			}
			fmt.Fprintf(&b, "| %s |\n", strings.Join(s.row(r), " | "))
			if r.Note != "" {
				notes = append(notes, r.Scenario+": "+r.Note)
			}
		}
		b.WriteString("\n")
		if s.name == SectionE2E {
			for _, r := range runs {
				if r.Status == StatusOK {
					b.WriteString(stagesTable(r))
				}
			}
		}
		var descs []string
		for _, r := range runs {
			if r.Description != "" && s.name != SectionEngineBench {
				descs = append(descs, fmt.Sprintf("%s: %s", r.Scenario, r.Description))
			}
		}
		sort.Strings(notes)
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		if len(descs) > 0 {
			b.WriteString("\n<details><summary>Scenarios (sizes at full scale; quick runs are smaller)</summary>\n\n")
			for _, d := range descs {
				fmt.Fprintf(&b, "- %s\n", d)
			}
			b.WriteString("\n</details>\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// e2eKinds are the end-to-end run's change kinds: metric prefix, name.
var e2eKinds = [][2]string{{"np-create", "NP create"}, {"np-update", "NP update"}, {"np-delete", "NP delete"},
	{"relabel-join", "pod joins peers"}, {"relabel-leave", "pod leaves peers"},
	{"anp-create", "ANP create"}, {"anp-update", "ANP update"}, {"anp-delete", "ANP delete"}, {"stage", "all changes"}}

// stagesTable is the end-to-end run's latency by stage (measure.E2EStages)
// and change kind, p50 / p90 / p99 / max; empty when the run has none.
func stagesTable(r *Run) string {
	if _, ok := val(r, "stage-"+measure.E2EStages[0].Key+"-p50-ms"); !ok {
		return ""
	}
	var b strings.Builder
	b.WriteString("By stage, on the node whose bridge reported last, each from the previous stage's stamp to its own (they add up to the latency); every stamp is made where the stage happens, on this machine's clock: p50 / p90 / p99 / max in ms.\n\n")
	cols := []string{"change"}
	for _, st := range measure.E2EStages {
		cols = append(cols, st.Key)
	}
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, k := range e2eKinds {
		row := []string{k[1]}
		for _, st := range measure.E2EStages {
			key := k[0] + "-" + st.Key
			p50, ok := val(r, key+"-p50-ms")
			if !ok {
				row = append(row, "–")
				continue
			}
			p90, _ := val(r, key+"-p90-ms")
			p99, _ := val(r, key+"-p99-ms")
			mx, _ := val(r, key+"-max-ms")
			row = append(row, fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", p50, p90, p99, mx))
		}
		if k[0] == "stage" {
			row[0] = "**" + row[0] + "**"
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
	}
	b.WriteString("\n")
	for _, st := range measure.E2EStages {
		fmt.Fprintf(&b, "- %s: %s\n", st.Key, st.What)
	}
	b.WriteString("\n")
	return b.String()
}

// runCommits lists each commit the runs measured with the runs that
// measured it ("COMMIT: id, id"), in run order.
func runCommits(rep *Report) []string {
	var commits []string
	byCommit := map[string][]string{}
	for _, r := range rep.Runs {
		c := r.Commit
		if c == "" {
			c = "not recorded"
		}
		if byCommit[c] == nil {
			commits = append(commits, c)
		}
		byCommit[c] = append(byCommit[c], r.ID)
	}
	out := make([]string, len(commits))
	for i, c := range commits {
		out[i] = c + ": " + strings.Join(byCommit[c], ", ")
	}
	return out
}

// byShape lists a ratio per reference shape, in report order.
func byShape(m map[string]float64) string {
	var parts []string
	for _, name := range referenceShapes {
		if v, ok := m[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.3f", name, v))
		}
	}
	return strings.Join(parts, ", ")
}

func val(r *Run, unit string) (float64, bool) {
	v, ok := r.Metrics[unit]
	return v, ok && !math.IsNaN(v)
}

func num(r *Run, unit string) string {
	if v, ok := val(r, unit); ok {
		return fmt.Sprintf("%.0f", v)
	}
	return "–"
}

func count(r *Run, unit string) string {
	v, ok := val(r, unit)
	switch {
	case !ok:
		return "–"
	case v >= 1e6:
		return fmt.Sprintf("%.2f M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func secs(r *Run, unit string) string {
	if v, ok := val(r, unit); ok {
		if v < 1 {
			return fmt.Sprintf("%.3f s", v)
		}
		return fmt.Sprintf("%.2f s", v)
	}
	return "–"
}

func ms(r *Run, unit string) string {
	if v, ok := val(r, unit); ok {
		return fmt.Sprintf("%.2f ms", v)
	}
	return "–"
}

func mibs(r *Run, unit string) string {
	if v, ok := val(r, unit); ok {
		return fmt.Sprintf("%.0f MiB", v)
	}
	return "–"
}

func gbps(r *Run, unit string) string {
	if v, ok := val(r, unit); ok {
		return fmt.Sprintf("%.2f Gbit/s", v)
	}
	return "–"
}

func ratio(r *Run, unit string) string {
	if v, ok := val(r, unit); ok {
		return fmt.Sprintf("**%.2f**", v)
	}
	return "–"
}

func incr(r *Run, name string) string {
	p50, ok1 := val(r, name+"-p50-ms")
	max, ok2 := val(r, name+"-max-ms")
	n, _ := val(r, name+"-changes")
	if !ok1 || !ok2 {
		return "–"
	}
	return fmt.Sprintf("%.3f / %.3f ms (%.0f changed)", p50, max, n)
}

func ref(r *Run, what string) string {
	if r.Reference == nil {
		return "–"
	}
	switch what {
	case "time":
		return orDash(r.Reference.Time)
	case "memory":
		return orDash(r.Reference.Memory)
	case "alloc":
		return orDash(r.Reference.Alloc)
	}
	return "–"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func noteMark(r *Run) string {
	if r.Note != "" {
		return " (see note)"
	}
	return ""
}
