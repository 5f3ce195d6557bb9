package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/test/bench/measure"
)

func TestBenchLineParsing(t *testing.T) {
	line := "BenchmarkAgentInstall/flows=10000-2        \t       1\t1476449444 ns/op\t      9655 agent-bridge-flows\t         0.2489 agent-s\t         1.174 agent/ofctl"
	m := benchLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("benchmark line not recognized: %q", line)
	}
	if m[1] != "BenchmarkAgentInstall/flows=10000" {
		t.Errorf("name %q, want the sub-benchmark without the GOMAXPROCS suffix", m[1])
	}
	metrics, ok := parseMetrics(m[3])
	if !ok {
		t.Fatalf("metrics not parsed: %q", m[3])
	}
	want := map[string]float64{"ns/op": 1476449444, "agent-bridge-flows": 9655, "agent-s": 0.2489, "agent/ofctl": 1.174}
	for k, v := range want {
		if metrics[k] != v {
			t.Errorf("%s = %v, want %v", k, metrics[k], v)
		}
	}
	if _, ok := parseMetrics("12 ns/op 3"); ok {
		t.Error("an odd number of fields must not parse")
	}
	if benchLine.MatchString("--- FAIL: BenchmarkFanout") {
		t.Error("a failure line must not be taken for a result")
	}
}

func TestReportRatioAndFailures(t *testing.T) {
	rep := &Report{Date: "2026-11-22T00:00:00Z", Mode: "quick", Machine: measure.Machine{Cores: 2, MemoryMiB: 24000}}
	rep.Runs = []*Run{
		{ID: "agent-install-2000", Section: SectionAgent, Scenario: "~2000 flows", Scale: "quick", Status: StatusOK,
			Metrics: map[string]float64{"agent/ofctl": 0.8, "bundle-flows": 1980, "agent-s": 0.05, "ofctl-s": 0.0625}},
		{ID: "agent-install-10000", Section: SectionAgent, Scenario: "~10000 flows", Scale: "quick", Status: StatusOK,
			Metrics: map[string]float64{"agent/ofctl": 1.2, "bundle-flows": 9618, "agent-s": 0.25, "ofctl-s": 0.21}},
		{ID: "fanout", Section: SectionFanout, Scenario: "fake agents", Scale: "quick", Status: StatusFailed,
			Reason: "kube-apiserver did not start", Log: "_output/bench/logs/fanout.log"},
		{ID: "e2e-latency", Section: SectionE2E, Scenario: "policy change", Scale: "quick", Status: StatusNotMeasured, Reason: "no wiring"},
	}
	rep.summarize()
	if rep.AgentVsOfctlRatio == nil || *rep.AgentVsOfctlRatio != 1.2 {
		t.Fatalf("agent_vs_ofctl_ratio = %v, want the largest flow count's 1.2", rep.AgentVsOfctlRatio)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back["agent_vs_ofctl_ratio"] != 1.2 {
		t.Errorf("report.json agent_vs_ofctl_ratio = %v", back["agent_vs_ofctl_ratio"])
	}
	md := rep.Markdown()
	for _, want := range []string{
		"2 cores, 24000 MiB", "2026-11-22T00:00:00Z", "agent_vs_ofctl_ratio: 1.20",
		"fake agents — failed: kube-apiserver did not start (log: _output/bench/logs/fanout.log)",
		"policy change — not measured: no wiring",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

func TestReportWithoutAgentRunsHasNullRatio(t *testing.T) {
	rep := &Report{Mode: "full"}
	rep.summarize()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"agent_vs_ofctl_ratio":null`) {
		t.Errorf("without a measurement the ratio must be null, not a number: %s", b)
	}
}

func TestMergeKeepsRunsNotRunAgain(t *testing.T) {
	previous := map[string]*Run{
		"compute-one-namespace": {ID: "compute-one-namespace", Status: StatusOK, Date: "2026-11-22T01:00:00Z"},
		"agent-install-10000":   {ID: "agent-install-10000", Status: StatusFailed, Date: "2026-11-22T01:10:00Z"},
	}
	fresh := []*Run{{ID: "agent-install-10000", Status: StatusOK, Date: "2026-11-22T01:40:00Z"}}
	order := map[string]int{"compute-one-namespace": 0, "agent-install-10000": 1}
	got := mergeRuns(previous, fresh, order)
	if len(got) != 2 || got[0].ID != "compute-one-namespace" || got[1].ID != "agent-install-10000" {
		t.Fatalf("merged runs out of plan order: %+v", got)
	}
	if got[1].Status != StatusOK || got[1].Date != "2026-11-22T01:40:00Z" {
		t.Errorf("the fresh run must replace the failed one: %+v", got[1])
	}
}

func TestControllerVsAntrea(t *testing.T) {
	rep := &Report{Mode: "full"}
	rep.Runs = []*Run{
		{ID: "vs-antrea-small-namespaces", Section: SectionVsAntrea, Scenario: "small-namespaces", Status: StatusOK,
			Metrics: map[string]float64{"informer-s": 2.536, "peak-rss-MiB": 1051, "cpu-s": 3.5}},
		{ID: "vs-antrea-large-namespaces", Section: SectionVsAntrea, Scenario: "large-namespaces", Status: StatusFailed},
		{ID: "harness-small-namespaces", Section: SectionHarness, Scenario: "small-namespaces", Status: StatusOK,
			Metrics: map[string]float64{"informer-s": 1, "peak-rss-MiB": 900, "cpu-s": 1.25}},
	}
	rep.summarize()
	if got := rep.ControllerVsAntrea["small-namespaces"]; got < 0.1999 || got > 0.2001 {
		t.Errorf("controller_vs_antrea[small-namespaces] = %v, want 2.536 / 12.68 = 0.2", got)
	}
	if got := rep.ControllerRSSVsAntrea["small-namespaces"]; got < 0.4999 || got > 0.5001 {
		t.Errorf("controller_rss_vs_antrea[small-namespaces] = %v, want 1051 / 2102 = 0.5", got)
	}
	if _, ok := rep.ControllerVsAntrea["large-namespaces"]; ok || len(rep.ControllerVsAntrea) != 1 {
		t.Errorf("controller_vs_antrea = %v: a failed run and the harness floor have no ratio", rep.ControllerVsAntrea)
	}
	if rep.ControllerCPUSeconds["small-namespaces"] != 3.5 || rep.HarnessCPUSeconds["small-namespaces"] != 1.25 || len(rep.ControllerCPUSeconds) != 1 {
		t.Errorf("controller_cpu_seconds = %v, harness_cpu_seconds = %v", rep.ControllerCPUSeconds, rep.HarnessCPUSeconds)
	}
	if md := rep.Markdown(); !strings.Contains(md, "controller_vs_antrea") || !strings.Contains(md, "small-namespaces 0.200") ||
		!strings.Contains(md, "small-namespaces 3.50 (harness alone 1.25)") {
		t.Errorf("report.md does not state the ratio:\n%s", md)
	}
}

func TestE2EKeys(t *testing.T) {
	rep := &Report{Mode: "quick"}
	rep.Runs = []*Run{{ID: "e2e-latency", Section: SectionE2E, Scenario: "policy change", Status: StatusOK,
		Metrics: map[string]float64{"p99-ms": 42.5, "resolution-ms": 1.25, "np-create-p50-ms": 20, "np-create-p90-ms": 30, "np-create-p99-ms": 40, "np-create-max-ms": 41}}}
	rep.summarize()
	if rep.E2ELatencyP99Ms == nil || *rep.E2ELatencyP99Ms != 42.5 || rep.E2ELatencyResolutionMs == nil || *rep.E2ELatencyResolutionMs != 1.25 {
		t.Fatalf("e2e keys: %v %v", rep.E2ELatencyP99Ms, rep.E2ELatencyResolutionMs)
	}
	if md := rep.Markdown(); !strings.Contains(md, "20 / 30 / 40 / 41 ms") || !strings.Contains(md, "e2e_latency_p99_ms: 42.5") ||
		!strings.Contains(md, "resolution 1.25 ms") {
		t.Errorf("report.md lacks the per-kind percentiles or the key:\n%s", md)
	}
}

func TestSameMachineCalibration(t *testing.T) {
	rep := &Report{Mode: "full"}
	rep.Runs = []*Run{
		{ID: "vs-antrea-large-namespaces", Section: SectionVsAntrea, Scenario: "large-namespaces", Status: StatusOK,
			Metrics: map[string]float64{"informer-s": 0.864, "peak-rss-MiB": 300}},
		// The side-by-side's code (4.29 s that day) takes 1.43 s here:
		// this machine is 3× as fast, so Antrea's 4.32 s is 1.44 s here.
		{ID: "calibration-large-namespaces", Section: SectionCalibration, Scenario: "large-namespaces", Status: StatusOK,
			Metrics: map[string]float64{"ns/op": 1.43e9}},
		{ID: "calibration-small-namespaces", Section: SectionCalibration, Scenario: "small-namespaces", Status: StatusFailed},
	}
	rep.summarize()
	near := func(got, want float64) bool { return got > want*0.9999 && got < want*1.0001 }
	if got := rep.MachineSpeedVsSideBySide["large-namespaces"]; !near(got, 3) {
		t.Errorf("machine_speed_vs_side_by_side = %v, want 4.29 / 1.43 = 3", got)
	}
	if got := rep.AntreaEstimatedSeconds["large-namespaces"]; !near(got, 1.44) {
		t.Errorf("antrea_estimated_seconds = %v, want 4.32 / 3 = 1.44", got)
	}
	if got := rep.ControllerVsAntreaSameMachine["large-namespaces"]; !near(got, 0.6) {
		t.Errorf("controller_vs_antrea_same_machine = %v, want 0.864 / 1.44 = 0.6", got)
	}
	if got := rep.ControllerVsAntrea["large-namespaces"]; !near(got, 0.2) {
		t.Errorf("controller_vs_antrea = %v, want 0.864 / 4.32 = 0.2 (the raw ratio stays)", got)
	}
	if len(rep.SideBySideCodeSeconds) != 1 {
		t.Errorf("side_by_side_code_seconds = %v: a failed calibration has no figure", rep.SideBySideCodeSeconds)
	}
	if md := rep.Markdown(); !strings.Contains(md, "controller_vs_antrea_same_machine") || !strings.Contains(md, "large-namespaces 0.600") ||
		!strings.Contains(md, "| 3.00× | 1.44 s | **0.600** |") {
		t.Errorf("report.md does not state the same-machine ratio:\n%s", md)
	}

	// Quick mode's controller runs are of smaller shapes: the machine's
	// speed is shown, no same-machine ratio made of them.
	rep.Mode = "quick"
	rep.summarize()
	if rep.MachineSpeedVsSideBySide["large-namespaces"] == 0 || len(rep.ControllerVsAntreaSameMachine) != 0 {
		t.Errorf("quick mode: speed %v, same-machine ratios %v", rep.MachineSpeedVsSideBySide, rep.ControllerVsAntreaSameMachine)
	}
}

func TestMedians(t *testing.T) {
	got := medians([]map[string]float64{{"ns/op": 3, "cpu-s": 1}, {"ns/op": 1, "cpu-s": 5}, {"ns/op": 2}})
	if got["ns/op"] != 2 || got["cpu-s"] != 1 {
		t.Errorf("medians = %v, want ns/op 2 (of 1, 2, 3) and cpu-s 1 (the lower middle of 1, 5)", got)
	}
}
