package conformance_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/conformance"
	"github.com/tierflow/tierflow/test/cyclonus"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/testbed"
)

var (
	// cyclonusInclude is the cases' tags TestCyclonus runs: make test a
	// smoke (egress and ingress by the namespace name label, ipBlocks with
	// an except: through Services, policy must decide on the pod), make
	// cyclonus every case (-cyclonus-include=).
	cyclonusInclude = flag.String("cyclonus-include", "namespaces-by-default-label,ip-block-with-except",
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
func TestCyclonus(t *testing.T) {
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := cyclonus.Build(root)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "_output", "conformance")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	bed := testbed.Start(t, testbed.Options{Nodes: 2})
	tf := framework.Start(t, bed, filepath.Join(bed.Dir, "tierflow"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tierflow logs:\n%s", tf.Logs(40))
		}
	})
	var include []string
	if *cyclonusInclude != "" {
		include = strings.Split(*cyclonusInclude, ",")
	}
	for _, dest := range strings.Split(*cyclonusDestinations, ",") {
		t.Run(dest, func(t *testing.T) {
			// The run before cleaned up its namespaces; deletion finishes
			// asynchronously, and cyclonus cannot create its pods in a
			// terminating namespace.
			for _, ns := range []string{"x", "y", "z"} {
				if err := conformance.WaitNamespacesGone(bed.Cluster.Kube, ns, 5*time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Hour)
			defer cancel()
			res, err := cyclonus.Run{Kubeconfig: bed.Cluster.Kubeconfig, Destination: dest, Include: include, Dir: out}.Generate(ctx, bin)
			if res != nil {
				t.Logf("cyclonus generate --destination-type=%s: %d cases in %v (exit: %v); log %s",
					dest, len(res.Cases), res.Took.Round(time.Second), res.ExitErr, res.Log)
			}
			if err != nil {
				t.Fatal(err)
			}
			res.Report(t)
		})
	}
}
