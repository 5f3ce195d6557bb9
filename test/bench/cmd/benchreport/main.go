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

	// Compile the drivers once (per source tree and package).
	binaries := map[driver]string{}
	dirs := map[driver]string{}
	for _, d := range driversOf(runs) {
		fail := func(err error) {
			// Every run of this driver fails, with the cause's words.
			for _, r := range runs {
				if driverOf(r) == d {
					r.Status, r.Reason = StatusFailed, err.Error()
				}
			}
			logf("  %v", err)
		}
		root := "."
		name := strings.ReplaceAll(strings.TrimPrefix(d.pkg, "./"), "/", "_")
		if d.commit != "" {
			logf("extracting commit %.12s of this repository ...", d.commit)
			var err error
			if root, err = sourceTree(out, d.commit); err != nil {
				fail(err)
				continue
			}
			name = d.commit[:12] + "_" + name
		}
		bin, err := filepath.Abs(filepath.Join(out, name+".test"))
		if err != nil {
			return err
		}
		logf("compiling %s ...", filepath.Join(root, d.pkg))
		cmd := exec.Command(goBin, "test", "-c", "-o", bin, d.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if msg, err := cmd.CombinedOutput(); err != nil {
			fail(fmt.Errorf("compiling %s: %v: %s", filepath.Join(root, d.pkg), err, tail(string(msg), 10)))
			continue
		}
		binaries[d] = bin
		if dirs[d], err = filepath.Abs(filepath.Join(root, d.pkg)); err != nil {
			return err
		}
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
			executeEach(ctx, r, binaries[driverOf(r)], dirs[driverOf(r)], filepath.Join(out, "logs"), prefix)
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

// driver is a test binary: a package of the working tree, or of a commit
// of this repository's history.
type driver struct{ commit, pkg string }

func driverOf(r *Run) driver { return driver{r.SourceCommit, r.Package} }

func driversOf(runs []*Run) []driver {
	var ds []driver
	seen := map[driver]bool{}
	for _, r := range runs {
		d := driverOf(r)
		if r.Package != "" && r.NotMeasured == "" && !seen[d] {
			seen[d] = true
			ds = append(ds, d)
		}
	}
	return ds
}

// sourceTree is the tree of a commit of this repository (git archive),
// extracted once under out/src: its own module, built with its own go.mod
// and go.sum (modules from the module proxy as usual).
func sourceTree(out, commit string) (string, error) {
	dir := filepath.Join(out, "src", commit)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("bash", "-o", "pipefail", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "extract", commit, tmp)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("extracting commit %s (a clone that lacks it, e.g. a shallow one, cannot calibrate): %v: %s", commit, err, tail(string(msg), 5))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
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

// executeEach runs a driver r.Count times, each in a process of its own
// (a benchmark repeated inside one process runs on the heap and caches
// its first run left, faster than a process that starts anew), and keeps
// each figure's median; the first failure ends the run.
func executeEach(ctx context.Context, r *Run, bin, dir, logDir, prefix string) {
	if r.Count <= 1 {
		execute(ctx, r, bin, dir, logDir, prefix)
		return
	}
	var results []map[string]float64
	for i := 1; i <= r.Count; i++ {
		one := *r
		one.ID = fmt.Sprintf("%s-%d", r.ID, i)
		execute(ctx, &one, bin, dir, logDir, fmt.Sprintf("%s (%d/%d)", prefix, i, r.Count))
		r.WallSeconds += one.WallSeconds
		r.LoadAvg = append(r.LoadAvg, one.LoadAvg...)
		r.ProcessMaxRSSMiB = max(r.ProcessMaxRSSMiB, one.ProcessMaxRSSMiB)
		r.Log = one.Log
		if one.Status != StatusOK {
			r.Status, r.Reason = one.Status, fmt.Sprintf("process %d of %d: %s", i, r.Count, one.Reason)
			return
		}
		results = append(results, one.Metrics)
	}
	r.Status, r.Metrics = StatusOK, medians(results)
}

// execute runs one driver in a process of its own, streaming its output to
// a log file and printing a heartbeat while it runs.
func execute(parent context.Context, r *Run, bin, dir, logDir, prefix string) {
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
	cmd.Dir = dir
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

// medians is each figure's median over the results that have it (the
// lower middle of an even count).
func medians(results []map[string]float64) map[string]float64 {
	all := map[string][]float64{}
	for _, m := range results {
		for k, v := range m {
			all[k] = append(all[k], v)
		}
	}
	out := map[string]float64{}
	for k, vs := range all {
		sort.Float64s(vs)
		out[k] = vs[(len(vs)-1)/2]
	}
	return out
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
