//go:build clustere2e

package clustere2e

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

// cyclonusVersion is the release whose generator and prober run against
// the cluster (the same one pkg/explain/crosscheck compares with).
const cyclonusVersion = "v0.5.6"

// testCyclonus runs cyclonus's generated NetworkPolicy cases against the
// cluster (`cyclonus generate`: it creates namespaces x, y, z with pods a,
// b, c serving TCP and UDP on ports 80 and 81, applies each generated
// policy set, probes every pair with agnhost through `kubectl exec` and
// compares with its own model), once with pod IPs and once through
// Service names (kube-proxy and CoreDNS in the path). Every case is a
// subtest.
//
// Flags: SCTP is left out (this kernel has none); loopback is ignored
// (KEP-2091 and the NetworkPolicy documentation leave a pod's traffic to
// itself unspecified; tierflow never blocks it); end ports and the
// kubernetes.io/metadata.name namespace label, which cyclonus excludes by
// default for old clusters, are included (v1.31 has both).
func testCyclonus(t *testing.T) {
	bin, err := buildCyclonus()
	if err != nil {
		t.Fatal(err)
	}
	for _, dest := range []string{"pod-ip", "service-name"} {
		t.Run(dest, func(t *testing.T) {
			junit := filepath.Join(env.out, "cyclonus-"+dest+".xml")
			log := filepath.Join(env.out, "cyclonus-"+dest+".log")
			_ = os.Remove(junit)
			logf, err := os.Create(log)
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "generate",
				"--server-protocol=tcp,udp", "--destination-type="+dest,
				"--exclude=multi-peer,upstream-e2e,example",
				"--ignore-loopback", "--cleanup-namespaces",
				"--perturbation-wait-seconds=3", "--job-timeout-seconds=2", "--retries=1",
				"--junit-results-file="+junit)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+env.c.Kubeconfig)
			cmd.Stdout, cmd.Stderr = logf, logf
			started := time.Now()
			runErr := cmd.Run()
			t.Logf("cyclonus generate --destination-type=%s: %v (exit: %v); log %s", dest, time.Since(started).Round(time.Second), runErr, log)
			cases, err := readJUnit(junit)
			if err != nil {
				t.Fatalf("%v (cyclonus: %v; see %s)", err, runErr, log)
			}
			for _, c := range cases {
				c := c
				t.Run(c.Name, func(t *testing.T) {
					if c.Failure != nil {
						t.Errorf("%s\n%s", c.Failure.Message, lastLines(c.Failure.Text, 30))
					}
				})
			}
		})
	}
}

// buildCyclonus installs cyclonus's command from its own module (its
// dependencies are its own, not tierflow's) into _output/bin.
func buildCyclonus() (string, error) {
	bin := filepath.Join(env.root, "_output", "bin", "cyclonus")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "install", "github.com/mattfenwick/cyclonus/cmd/cyclonus@"+cyclonusVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(bin), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install cyclonus@%s: %v\n%s", cyclonusVersion, err, out)
	}
	return bin, nil
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
}

// readJUnit reads the test cases of cyclonus's JUnit report.
func readJUnit(path string) ([]junitCase, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cyclonus wrote no JUnit report: %w", err)
	}
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
		Cases []junitCase `xml:"testcase"`
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
