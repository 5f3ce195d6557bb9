package cyclonus

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Version is the release whose generator and prober run against the
// cluster (the same one pkg/explain/crosscheck compares with).
const Version = "v0.5.6"

// Build installs cyclonus's command from its own module (its dependencies
// are its own, not tierflow's) into root's _output/bin, once.
func Build(root string) (string, error) {
	bin := filepath.Join(root, "_output", "bin", "cyclonus")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "install", "github.com/mattfenwick/cyclonus/cmd/cyclonus@"+Version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(bin), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install cyclonus@%s: %v\n%s", Version, err, out)
	}
	return bin, nil
}

// BuildBatch builds cmd/cyclonus-batch (cyclonus's generate with its batch
// prober, from tierflow's module) into root's _output/bin.
func BuildBatch(root string) (string, error) {
	bin := filepath.Join(root, "_output", "bin", "cyclonus-batch")
	cmd := exec.Command("go", "build", "-o", bin, "./test/cyclonus/cmd/cyclonus-batch")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cyclonus-batch: %v\n%s", err, out)
	}
	return bin, nil
}

// BedWorkerPath is where the batch prober's exec finds the worker
// (cyclonus's worker.Client runs /worker in the source pod).
const BedWorkerPath = "/worker"

// InstallBedWorker builds cmd/cyclonus-worker into root's _output/bin and
// makes /worker a symlink to it for the tierflow test bed, where kwok runs
// exec'd commands on the host (the worker enters the pod's network
// namespace itself); the symlink is removed at cleanup.
func InstallBedWorker(tb testing.TB, root string) error {
	bin := filepath.Join(root, "_output", "bin", "cyclonus-worker")
	cmd := exec.Command("go", "build", "-o", bin, "./test/cyclonus/cmd/cyclonus-worker")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build cyclonus-worker: %v\n%s", err, out)
	}
	if target, err := os.Readlink(BedWorkerPath); err == nil {
		if filepath.Base(target) != "cyclonus-worker" {
			return fmt.Errorf("%s is a symlink to %s, not to cyclonus-worker; remove it", BedWorkerPath, target)
		}
		if err := os.Remove(BedWorkerPath); err != nil {
			return err
		}
	} else if _, statErr := os.Lstat(BedWorkerPath); statErr == nil {
		return fmt.Errorf("%s exists and is not the test bed's symlink; remove it", BedWorkerPath)
	}
	if err := os.Symlink(bin, BedWorkerPath); err != nil {
		return err
	}
	tb.Cleanup(func() {
		if t, err := os.Readlink(BedWorkerPath); err == nil && t == bin {
			_ = os.Remove(BedWorkerPath)
		}
	})
	return nil
}

// Run is one `cyclonus generate`.
type Run struct {
	// Batch: the binary is BuildBatch's, which probes through cyclonus's
	// worker (one exec per source pod and step; the pods run the
	// cyclonus-worker image) instead of one exec per probe.
	Batch      bool
	Kubeconfig string
	// Destination is what the probes connect to: pod-ip, service-ip
	// (the pod's own Service's ClusterIP) or service-name (its DNS name).
	Destination string
	// Include limits the generated cases to those with any of these tags
	// (empty: every case not excluded).
	Include []string
	// Dir receives cyclonus-<destination>.xml (the JUnit report) and
	// cyclonus-<destination>.log.
	Dir string
}

// Generate runs cyclonus's generated NetworkPolicy cases against the
// cluster and returns them with their results: cyclonus creates
// namespaces x, y, z with pods a, b, c serving TCP and UDP on ports 80
// and 81 (each behind a Service of its own), applies each generated
// policy set, probes every pair with agnhost through `kubectl exec` and
// compares with its own model.
//
// Flags: SCTP is left out (this kernel has none); loopback is ignored
// (KEP-2091 and the NetworkPolicy documentation leave a pod's traffic to
// itself unspecified; tierflow never blocks it on its pod IP); end ports
// and the kubernetes.io/metadata.name namespace label, which cyclonus
// excludes by default for old clusters, are included (v1.31 has both).
// The error is about the report; how cyclonus itself exited is in
// Result.ExitErr.
func (r Run) Generate(ctx context.Context, bin string) (*Result, error) {
	junit := filepath.Join(r.Dir, "cyclonus-"+r.Destination+".xml")
	log := filepath.Join(r.Dir, "cyclonus-"+r.Destination+".log")
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(junit)
	logf, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{
		"--server-protocol=tcp,udp", "--destination-type=" + r.Destination,
		"--exclude=multi-peer,upstream-e2e,example",
		"--ignore-loopback", "--cleanup-namespaces",
		"--perturbation-wait-seconds=3", "--retries=1",
		"--junit-results-file=" + junit}
	if !r.Batch {
		// cyclonus's own command; agnhost connect's timeout (the batch
		// prober's is one second).
		args = append([]string{"generate"}, append(args, "--job-timeout-seconds=2")...)
	}
	if len(r.Include) > 0 {
		args = append(args, "--include="+strings.Join(r.Include, ","))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	started := time.Now()
	res := &Result{Log: log}
	res.ExitErr = cmd.Run()
	res.Took = time.Since(started)
	if res.Cases, err = ReadJUnit(junit); err != nil {
		return res, fmt.Errorf("%v (cyclonus: %v; see %s)", err, res.ExitErr, log)
	}
	return res, nil
}

// Namespaces are the namespaces cyclonus creates its pods in (a case
// adds y-2 for a while).
var Namespaces = []string{"x", "y", "z"}

// GenerateInTest is Generate (with the batch prober) for a test: it first
// waits, by waitGone, until the Namespaces of a run before are gone
// (deletion finishes asynchronously, and cyclonus cannot create its pods
// in a terminating namespace), logs what ran, fails t when there is no
// report, and marks it failed when cyclonus-batch stopped before the
// last case.
func (r Run) GenerateInTest(t *testing.T, bin string, timeout time.Duration, waitGone func(ns string) error) *Result {
	t.Helper()
	for _, ns := range Namespaces {
		if err := waitGone(ns); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.Batch = true
	res, err := r.Generate(ctx, bin)
	if res != nil {
		t.Logf("cyclonus-batch --destination-type=%s: %d cases in %v (exit: %v); log %s",
			r.Destination, len(res.Cases), res.Took.Round(time.Second), res.ExitErr, res.Log)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitErr != nil {
		t.Errorf("cyclonus-batch: %v (see %s)", res.ExitErr, res.Log)
	}
	return res
}

// Result is what one Generate ran.
type Result struct {
	Cases   []Case
	ExitErr error
	Took    time.Duration
	Log     string
}

// Report makes every case a subtest of t, failing with cyclonus's account
// of the case where the case failed.
func (res *Result) Report(t *testing.T) {
	t.Helper()
	for _, c := range res.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Failure != nil {
				t.Errorf("%s\n%s", c.Failure.Message, lastLines(c.Failure.Text, 30))
			}
		})
	}
}

// Case is one test case of cyclonus's JUnit report.
type Case struct {
	Name    string `xml:"name,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
}

// ReadJUnit reads the test cases of cyclonus's JUnit report (names with
// their blanks turned to underscores, as subtest names).
func ReadJUnit(path string) ([]Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cyclonus wrote no JUnit report: %w", err)
	}
	var doc struct {
		Suites []struct {
			Cases []Case `xml:"testcase"`
		} `xml:"testsuite"`
		Cases []Case `xml:"testcase"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cases := doc.Cases
	for _, s := range doc.Suites {
		cases = append(cases, s.Cases...)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s has no test case", path)
	}
	for i := range cases {
		cases[i].Name = strings.Join(strings.Fields(cases[i].Name), "_")
	}
	return cases, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
