//go:build clustere2e

package clustere2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/test/conformance"
)

// testConformance runs both upstream suites, unmodified and with the
// features claimed on the simulated bed, against the real cluster. Each
// upstream case is a subtest: a pass passes, a failure whose only failed
// probes are SCTP ones (this kernel has no SCTP) is a skip saying so, any
// other failure fails. The suites' own tally must equal the bed's.
func testConformance(t *testing.T) {
	var all []conformance.Case
	for _, s := range conformance.Suites {
		s.KeepBaseResources = false
		if err := waitNamespacesGone(t, "network-policy-conformance-", 5*time.Minute); err != nil {
			t.Fatalf("before suite %s: %v", s.Name(), err)
		}
		started := time.Now()
		res, err := s.Run(context.Background(), env.c.Kubeconfig, filepath.Join(env.out, "suites"),
			filepath.Join(env.out, "conformance-report-"+s.Version+".yaml"), filepath.Join(env.out, "conformance-"+s.Version+".jsonl"), nil)
		if err != nil {
			t.Errorf("suite %s: %v", s.Name(), err)
			if res == nil {
				continue
			}
		}
		p, f, k := conformance.Tally(res.Cases)
		t.Logf("suite %s: %d passed, %d failed, %d skipped in %v", s.Name(), p, f, k, time.Since(started).Round(time.Second))
		for _, c := range res.Cases {
			c := c
			t.Run(s.Version+"/"+strings.TrimPrefix(c.Name, "TestConformanceProfiles/"), func(t *testing.T) {
				switch {
				case c.Outcome == conformance.Pass:
				case c.Outcome == conformance.Skip:
					t.Skip("skipped by the suite")
				case c.FailedOnSCTPOnly():
					t.Skip("failed on SCTP probes only: this kernel has no SCTP (as on the simulated bed)")
				default:
					t.Errorf("failed:\n%s", lastLines(c.Output, 25))
				}
			})
		}
		all = append(all, res.Cases...)
	}
	p, f, k := conformance.Tally(all)
	got := fmt.Sprintf("%d passed, %d failed, %d skipped", p, f, k)
	if err := os.WriteFile(filepath.Join(env.out, "conformance-results.txt"), []byte(conformance.Summary(all)+got+"\n"), 0o644); err != nil {
		t.Error(err)
	}
	if got != conformance.BedTally {
		t.Errorf("upstream tally on the real cluster: %s; on the simulated bed: %s", got, conformance.BedTally)
	}
}

// waitNamespacesGone waits until no namespace with the prefix exists: a
// suite's cleanup deletes its namespaces asynchronously, and the next
// suite cannot create its workloads in a terminating one.
func waitNamespacesGone(t *testing.T, prefix string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list, err := env.cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var left []string
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, prefix) {
				left = append(left, ns.Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespaces still there after %v: %v", timeout, left)
		}
		time.Sleep(2 * time.Second)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
