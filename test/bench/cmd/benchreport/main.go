// Command benchreport runs tierflow's benchmark drivers (package
// test/bench, and the engine's own benchmarks in pkg/compute) one scenario
// per process, shows progress while they run, and writes the results as
// report.md and report.json. `make bench` runs it; BENCH_QUICK=1 selects
// the quick mode (smaller scales, same code paths, a few minutes).
//
// Numbers are reports, never pass/fail: the command fails only when a
// driver fails (a missing prerequisite, a broken scenario), and it writes
// the report first, with the failure and the log file named in it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierflow/tierflow/test/bench/measure"
)

func main() {
	out := flag.String("out", "_output/bench", "directory for report.md, report.json, logs and the compiled drivers")
	quick := flag.Bool("quick", os.Getenv("BENCH_QUICK") == "1", "quick mode: smaller scales (default from BENCH_QUICK=1)")
	only := flag.String("only", os.Getenv("BENCH_ONLY"), "run only the runs whose ID matches this regular expression (default from BENCH_ONLY)")
	goBin := flag.String("go", envOr("GO", "go"), "the go command")
	merge := flag.Bool("merge", os.Getenv("BENCH_MERGE") == "1", "keep the runs of the existing report.json (same mode) that this invocation does not run again (default from BENCH_MERGE=1)")
	flag.Parse()
	if err := run(*out, *quick, *only, *goBin, *merge); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(out string, quick bool, only, goBin string, merge bool) error {
	var filter *regexp.Regexp
	if only != "" {
		var err error
		if filter, err = regexp.Compile(only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(out, "logs"), 0o755); err != nil {
		return err
	}
	machine, err := measure.ReadMachine()
	if err != nil {
		return fmt.Errorf("reading the machine's description: %w", err)
	}
	rep := &Report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Mode:    map[bool]string{true: "quick", false: "full"}[quick],
		Machine: machine,
		Commit:  gitCommit(),
	}
	// An interrupted report kills the running driver (whose daemons die
	// with it: the harnesses give them a parent-death signal) and still
	// writes what was measured.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	logf("tierflow benchmarks, %s mode, on %d cores / %d MiB (%s)", rep.Mode, machine.Cores, machine.MemoryMiB, machine.CPU)

	var previous map[string]*Run
	if merge {
		var err error
		if previous, err = loadPrevious(filepath.Join(out, "report.json"), rep.Mode); err != nil {
			return err
		}
	}
	runs := plan(quick)
	order := map[string]int{}
	for i, r := range runs {
		order[r.ID] = i
	}
	if filter != nil {
		var kept []*Run
		for _, r := range runs {
			if filter.MatchString(r.ID) {
				kept = append(kept, r)
			}
		}
		runs = kept
	}

	// Compile the drivers once.
	binaries := map[string]string{}
	for _, pkg := range packagesOf(runs) {
		bin := filepath.Join(out, strings.ReplaceAll(strings.TrimPrefix(pkg, "./"), "/", "_")+".test")
		logf("compiling %s ...", pkg)
		cmd := exec.Command(goBin, "test", "-c", "-o", bin, pkg)
		if msg, err := cmd.CombinedOutput(); err != nil {
			// Every run of this package fails, with the compiler's words.
			for _, r := range runs {
				if r.Package == pkg {
					r.Status, r.Reason = StatusFailed, fmt.Sprintf("compiling %s: %v: %s", pkg, err, tail(string(msg), 10))
				}
			}
			logf("  compiling %s failed: %v", pkg, err)
			continue
		}
		abs, err := filepath.Abs(bin)
		if err != nil {
			return err
		}
		binaries[pkg] = abs
	}

	for i, r := range runs {
		prefix := fmt.Sprintf("[%d/%d] %s", i+1, len(runs), r.ID)
		switch {
		case ctx.Err() != nil:
			r.Status, r.Reason = StatusFailed, "interrupted before it ran"
			logf("%s: interrupted", prefix)
		case r.Status != "":
			logf("%s: %s", prefix, r.Status)
		case r.NotMeasured != "":
			r.Status, r.Reason = StatusNotMeasured, r.NotMeasured
			logf("%s: not measured: %s", prefix, r.NotMeasured)
		default:
			r.Date, r.Commit = time.Now().UTC().Format(time.RFC3339), rep.Commit
			logf("%s (%s scale) ...", prefix, r.Scale)
			execute(ctx, r, binaries[r.Package], filepath.Join(out, "logs"), prefix)
			if r.Status == StatusOK {
				logf("%s: done in %.1fs", prefix, r.WallSeconds)
			} else {
				logf("%s: FAILED after %.1fs: %s (log: %s)", prefix, r.WallSeconds, r.Reason, r.Log)
			}
		}
		rep.Runs = append(rep.Runs, r)
	}
	rep.WallSeconds = time.Since(started).Seconds()
	if merge {
		rep.Runs = mergeRuns(previous, rep.Runs, order)
	}
	rep.summarize()

	if err := writeJSON(filepath.Join(out, "report.json"), rep); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "report.md"), []byte(rep.Markdown()), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s in %.0fs", filepath.Join(out, "report.md"), filepath.Join(out, "report.json"), rep.WallSeconds)
	var failed []string
	for _, r := range rep.Runs {
		if r.Status == StatusFailed {
			failed = append(failed, r.ID)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d driver(s) failed: %s (see the report and _output/bench/logs)", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Printf("%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// gitCommit names the commit measured, with "-dirty" when the worktree
// has changes that commit does not hold.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		commit += "-dirty"
	}
	return commit
}

func packagesOf(runs []*Run) []string {
	var pkgs []string
	seen := map[string]bool{}
	for _, r := range runs {
		if r.Package != "" && r.NotMeasured == "" && !seen[r.Package] {
			seen[r.Package] = true
			pkgs = append(pkgs, r.Package)
		}
	}
	return pkgs
}

// progressPrefix starts the progress lines drivers print on stdout while
// they run (test/bench progressf); they are shown as they come.
const progressPrefix = "bench: "

// ovsLockWait is how long a driver may wait for the host-wide OVS lock
// (test/bench waitOVSLock gives up after as long).
const ovsLockWait = 55 * time.Minute

// benchLine is a benchmark result line: name, iterations, then value/unit
// pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// execute runs one driver in a process of its own, streaming its output to
// a log file and printing a heartbeat while it runs.
func execute(parent context.Context, r *Run, bin, logDir, prefix string) {
	r.Log = filepath.Join(logDir, r.ID+".log")
	start := time.Now()
	defer func() { r.WallSeconds = time.Since(start).Seconds() }()
	logFile, err := os.Create(r.Log)
	if err != nil {
		r.Status, r.Reason = StatusFailed, err.Error()
		return
	}
	defer logFile.Close()

	// A driver that needs the host's one private OVS may first queue
	// behind other test processes (it shows that as progress): its limit
	// is its own work plus that wait.
	timeout := r.Timeout
	if r.NeedsOVS {
		timeout += ovsLockWait
	}
	ctx, cancel := context.WithTimeout(parent, timeout+time.Minute)
	defer cancel()
	args := []string{"-test.run=^$", "-test.bench=" + r.Bench, "-test.benchtime=1x", "-test.timeout=" + timeout.String()}
	cmd := exec.CommandContext(ctx, bin, args...)
	// go test runs a test binary in its package directory; so do we, so
	// the drivers find the repository the same way.
	if cmd.Dir, err = filepath.Abs(r.Package); err != nil {
		r.Status, r.Reason = StatusFailed, err.Error()
		return
	}
	cmd.Env = append(os.Environ(), "BENCH_SCALE="+r.Scale)
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.Status, r.Reason = StatusFailed, err.Error()
		return
	}
	cmd.Stderr = logFile
	fmt.Fprintf(logFile, "# %s %s (BENCH_SCALE=%s, in %s)\n", bin, strings.Join(args, " "), r.Scale, cmd.Dir)
	if err := cmd.Start(); err != nil {
		r.Status, r.Reason = StatusFailed, err.Error()
		return
	}
	var loadMu sync.Mutex
	sampleLoad := func() {
		if l, err := measure.LoadAverage(); err == nil {
			loadMu.Lock()
			r.LoadAvg = append(r.LoadAvg, l)
			loadMu.Unlock()
		}
	}
	sampleLoad()
	defer sampleLoad()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				sampleLoad()
				logf("%s ... still running (%.0fs)", prefix, time.Since(start).Seconds())
			}
		}
	}()
	var results []map[string]float64
	var failLines []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logFile, line)
		if msg, ok := strings.CutPrefix(line, progressPrefix); ok {
			logf("%s: %s", prefix, msg)
		}
		if m := benchLine.FindStringSubmatch(line); m != nil {
			if metrics, ok := parseMetrics(m[3]); ok {
				results = append(results, metrics)
			}
		}
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "--- FAIL") || strings.Contains(t, "_test.go:") || strings.HasPrefix(t, "panic:") {
			failLines = append(failLines, t)
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	close(stop)
	wg.Wait()
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.ProcessMaxRSSMiB = float64(ru.Maxrss) / 1024
		}
	}
	switch {
	case err != nil || len(results) == 0:
		r.Status = StatusFailed
		reason := "no benchmark result"
		if err != nil {
			reason = err.Error()
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason = "timed out after " + timeout.String()
		} else if parent.Err() != nil {
			reason = "interrupted"
		}
		if len(failLines) > 0 {
			reason += ": " + strings.Join(lastN(failLines, 3), " | ")
		}
		r.Reason = reason
	default:
		r.Status = StatusOK
		r.Metrics = results[len(results)-1]
	}
}

func parseMetrics(s string) (map[string]float64, bool) {
	f := strings.Fields(s)
	if len(f)%2 != 0 {
		return nil, false
	}
	m := map[string]float64{}
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil, false
		}
		m[f[i+1]] = v
	}
	return m, true
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lastN(lines, n), "\n")
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// loadPrevious reads an earlier report's runs by ID; a missing report is
// an empty one, a report of the other mode an error.
func loadPrevious(path, mode string) (map[string]*Run, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var prev Report
	if err := json.Unmarshal(b, &prev); err != nil {
		return nil, fmt.Errorf("reading %s to merge: %w", path, err)
	}
	if prev.Mode != mode {
		return nil, fmt.Errorf("cannot merge: %s is a %s-mode report, this run is %s mode", path, prev.Mode, mode)
	}
	out := map[string]*Run{}
	for _, r := range prev.Runs {
		if r.Date == "" {
			r.Date = prev.Date
		}
		if r.Commit == "" && r.Date >= prev.Date {
			// Measured by that invocation (RFC 3339 UTC dates sort as
			// text); an older run's commit was not recorded.
			r.Commit = prev.Commit
		}
		out[r.ID] = r
	}
	return out, nil
}

// mergeRuns keeps the previous runs that were not run again, in plan
// order (runs no longer planned go last).
func mergeRuns(previous map[string]*Run, fresh []*Run, order map[string]int) []*Run {
	byID := map[string]*Run{}
	for id, r := range previous {
		byID[id] = r
	}
	for _, r := range fresh {
		byID[r.ID] = r
	}
	out := make([]*Run, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	rank := func(r *Run) int {
		if i, ok := order[r.ID]; ok {
			return i
		}
		return len(order)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if rank(out[i]) != rank(out[j]) {
			return rank(out[i]) < rank(out[j])
		}
		return out[i].ID < out[j].ID
	})
	return out
}
