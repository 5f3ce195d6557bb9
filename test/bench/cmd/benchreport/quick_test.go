package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestQuickReport runs the whole quick-mode report (what `BENCH_QUICK=1
// make bench` runs: every driver, real OVS, real kube-apiserver, the test
// bed) into a temporary directory and checks that it is complete: every
// section there, every planned run measured, agent_vs_ofctl_ratio a
// positive number. The figures themselves are not judged.
func TestQuickReport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, OVS, the test bed): run as root, e.g. through `make test`")
	}
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	// The plan names packages relative to the repository root, as `make
	// bench` runs it.
	t.Chdir(root)
	out := t.TempDir()
	start := time.Now()
	runErr := run(out, true, "", goBin, false)
	t.Logf("quick report took %v", time.Since(start).Round(time.Second))

	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("no report.json (run: %v)", err)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatalf("no report.md (run: %v)", err)
	}
	if runErr != nil {
		t.Errorf("benchreport: %v", runErr)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	// The ratio must be a JSON number, not null or a string.
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if r, ok := raw["agent_vs_ofctl_ratio"].(float64); !ok || r <= 0 {
		t.Errorf("agent_vs_ofctl_ratio = %v, want a positive number", raw["agent_vs_ofctl_ratio"])
	}
	for _, key := range []string{"e2e_latency_p99_ms", "e2e_latency_resolution_ms"} {
		if v, ok := raw[key].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", key, raw[key])
		}
	}
	ratios, _ := raw["controller_vs_antrea"].(map[string]any)
	for _, shape := range referenceShapes {
		if r, ok := ratios[shape].(float64); !ok || r <= 0 {
			t.Errorf("controller_vs_antrea[%s] = %v, want a positive number", shape, ratios[shape])
		}
	}
	if rep.Mode != "quick" || rep.Machine.Cores == 0 || rep.Date == "" {
		t.Errorf("report header: mode %q, machine %+v, date %q", rep.Mode, rep.Machine, rep.Date)
	}

	planned := plan(true)
	got := map[string]*Run{}
	for _, r := range rep.Runs {
		got[r.ID] = r
	}
	sections := map[string]bool{}
	for _, p := range planned {
		sections[p.Section] = true
		r, ok := got[p.ID]
		switch {
		case !ok:
			t.Errorf("run %s missing from report.json", p.ID)
		case r.Status != StatusOK:
			// No quick run is documented as impossible here: every one
			// must be measured.
			t.Errorf("run %s: %s: %s (log %s:\n%s)", p.ID, r.Status, r.Reason, r.Log, logTail(r.Log, 15))
		case len(r.Metrics) == 0:
			t.Errorf("run %s: no figures", p.ID)
		}
	}
	for s := range sections {
		if !strings.Contains(string(md), "\n## "+s+"\n") {
			t.Errorf("report.md has no section %q", s)
		}
	}
	for _, want := range []string{SectionCompute, SectionVsAntrea, SectionHarness, SectionCalibration, SectionInformers, SectionIncremental, SectionAgent, SectionE2E, SectionDatapath, SectionEncap, SectionFanout, SectionServices} {
		if !sections[want] {
			t.Errorf("the quick plan has no run in section %q", want)
		}
	}
	if strings.Contains(string(md), "**failed**") || strings.Contains(string(md), "**not measured**") {
		t.Errorf("report.md lists a failed or unmeasured run:\n%s", md)
	}
	if t.Failed() {
		t.Logf("report.md:\n%s", md)
	}
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}
