package conformance_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/test/conformance"
	"github.com/tierflow/tierflow/test/cyclonus"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/testbed"
)

var (
	// cyclonusInclude is the cases' tags TestCyclonus runs: make test a
	// smoke (egress and ingress by the namespace name label, ipBlocks with
	// an except: through Services, policy must decide on the pod; the
	// cases whose steps create or relabel pods, probed through those pods'
	// own Services), make cyclonus every case (-cyclonus-include=).
	cyclonusInclude = flag.String("cyclonus-include", "namespaces-by-default-label,ip-block-with-except,"+strings.Join(cyclonus.MidCaseTags, ","),
		"cyclonus tags TestCyclonus runs (comma-separated; empty: every case)")
	cyclonusDestinations = flag.String("cyclonus-destinations", "service-ip,service-name",
		"cyclonus destination types TestCyclonus probes (comma-separated)")
)

// TestCyclonus runs cyclonus's generated NetworkPolicy cases (test/cyclonus)
// on the simulated cluster with tierflow, probing through Services: each
// pod's ClusterIP (service-ip) and its DNS name (service-name, resolved by
// the bed's kube-dns), TCP and UDP. The agents' Service proxy translates
// before the egress tiers, so policy decides on the pods behind the
// Services, as cyclonus's model expects. Reports in _output/conformance.
//
// It runs cmd/cyclonus-batch (cyclonus's generator, model and report with
// its batch prober: one exec of /worker per source pod and step, the
// worker entering the pod's network namespace; see
// cyclonus.InstallBedWorker) on the encap bed (the release default node
// network; it takes no host-wide OVS lock, so an hour-long make cyclonus
// does not hold up other tests). MidCasePodsReached then shows that the
// pods a case creates or relabels are probed through their own Services:
// with
// AdminNetworkPolicies cyclonus's model does not know denying ingress to
// exactly those pods, the cases that create them must fail.
func TestCyclonus(t *testing.T) {
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := cyclonus.BuildBatch(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := cyclonus.InstallBedWorker(t, root); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "_output", "conformance")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	bed := testbed.Start(t, testbed.Options{Nodes: 2, Encap: true})
	tf := framework.Start(t, bed, filepath.Join(bed.Dir, "tierflow"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tierflow logs:\n%s", tf.Logs(40))
		}
	})
	run := func(t *testing.T, r cyclonus.Run) *cyclonus.Result {
		t.Helper()
		r.Kubeconfig = bed.Cluster.Kubeconfig
		return r.GenerateInTest(t, bin, 4*time.Hour, func(ns string) error {
			return conformance.WaitNamespacesGone(bed.Cluster.Kube, ns, 5*time.Minute)
		})
	}
	var include []string
	if *cyclonusInclude != "" {
		include = strings.Split(*cyclonusInclude, ",")
	}
	destinations := strings.Split(*cyclonusDestinations, ",")
	for _, dest := range destinations {
		t.Run(dest, func(t *testing.T) {
			run(t, cyclonus.Run{Destination: dest, Include: include, Dir: out}).Report(t)
		})
	}
	t.Run("MidCasePodsReached", func(t *testing.T) {
		ctx := context.Background()
		anps := bed.Cluster.Policy.PolicyV1alpha1().AdminNetworkPolicies()
		for _, anp := range cyclonus.MidCasePodsDenied() {
			if _, err := anps.Create(ctx, anp, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := anps.Delete(ctx, anp.Name, metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
			}()
		}
		for _, dest := range destinations {
			t.Run(dest, func(t *testing.T) {
				res := run(t, cyclonus.Run{Destination: dest, Include: cyclonus.MidCaseTags,
					Dir: filepath.Join(out, "cyclonus-mid-case-pods-denied")})
				if len(res.Cases) != len(cyclonus.MidCaseTags) {
					t.Errorf("%d cases ran, want %d (one per tag %v)", len(res.Cases), len(cyclonus.MidCaseTags), cyclonus.MidCaseTags)
				}
				for _, c := range res.Cases {
					if c.Failure == nil {
						t.Errorf("case %s passed though every connection to the pods it creates is denied: its probes did not reach them", c.Name)
					}
				}
			})
		}
	})
}
