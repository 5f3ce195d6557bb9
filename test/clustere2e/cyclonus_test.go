//go:build clustere2e

package clustere2e

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/cluster"
	"github.com/tierflow/tierflow/test/cyclonus"
)

var (
	// cyclonusInclude is the tags of the generated cases testCyclonus
	// runs: make e2e-cluster cyclonusSubset, make e2e-cluster-cyclonus
	// every case (-cyclonus-include=).
	cyclonusInclude = flag.String("cyclonus-include", cyclonusSubset,
		"cyclonus tags testCyclonus runs (comma-separated; empty: every case)")
	cyclonusDestinations = flag.String("cyclonus-destinations", "pod-ip,service-ip,service-name",
		"cyclonus destination types testCyclonus probes (comma-separated)")
)

// cyclonusSubset is make e2e-cluster's share of cyclonus's 126 cases (28
// of them, 38 steps): the cases that change the cluster between probes
// (policies created, updated and deleted; pods and namespaces created,
// relabelled and deleted), ingress and egress policies that conflict,
// ipBlocks with and without except, and namespaces chosen by their name
// label. The cases are generated, so the subset is the same every run.
const cyclonusSubset = "action,conflict,peer-ipblock,namespaces-by-default-label"

// testCyclonus runs cyclonus's generated NetworkPolicy cases against the
// cluster (test/cyclonus: namespaces x, y, z with pods a, b, c serving TCP
// and UDP on ports 80 and 81, each generated policy set probed pair by
// pair from inside the pods, through cyclonus's batch prober, and compared
// with cyclonus's model), once per destination type: pod IPs, each pod's
// Service's ClusterIP and its DNS name (kube-proxy or tierflow's Service
// proxy, and CoreDNS, in the path). Every case is a subtest. First it
// checks that the prober notices a cluster that does not do what the
// model says.
func testCyclonus(t *testing.T) {
	bin, err := cyclonus.BuildBatch(env.root)
	if err != nil {
		t.Fatal(err)
	}
	// Up builds the worker's image; only this suite needs it on the nodes.
	if err := env.c.LoadImages(context.Background(), cluster.CyclonusWorkerImage); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, r cyclonus.Run) *cyclonus.Result {
		t.Helper()
		r.Kubeconfig = env.c.Kubeconfig
		return r.GenerateInTest(t, bin, 3*time.Hour, func(ns string) error {
			return waitNamespacesGone(t, ns, 5*time.Minute)
		})
	}
	t.Run("NoticesWrongCluster", func(t *testing.T) {
		// An AdminNetworkPolicy, which cyclonus's model knows nothing of,
		// allows x's ingress from y and denies it from z: in every case
		// some connection the model denies passes or one it allows is
		// dropped, so every case must fail.
		ctx := context.Background()
		if _, err := env.c.Kubectl(ctx, bytes.NewBufferString(unknownToCyclonus), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := env.c.Kubectl(ctx, nil, "delete", "adminnetworkpolicy", "cyclonus-must-notice"); err != nil {
				t.Error(err)
			}
		}()
		res := run(t, cyclonus.Run{Destination: "pod-ip", Include: []string{"ip-block-with-except"}, Dir: filepath.Join(env.out, "cyclonus-wrong-cluster")})
		for _, c := range res.Cases {
			if c.Failure == nil {
				t.Errorf("case %s passed on a cluster that does not do what cyclonus's model says", c.Name)
			}
		}
	})
	var include []string
	if *cyclonusInclude != "" {
		include = strings.Split(*cyclonusInclude, ",")
	}
	for _, dest := range strings.Split(*cyclonusDestinations, ",") {
		t.Run(dest, func(t *testing.T) {
			run(t, cyclonus.Run{Destination: dest, Include: include, Dir: env.out}).Report(t)
		})
	}
}

// unknownToCyclonus is testCyclonus's AdminNetworkPolicy.
const unknownToCyclonus = `apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata:
  name: cyclonus-must-notice
spec:
  priority: 1
  subject:
    namespaces:
      matchLabels:
        kubernetes.io/metadata.name: "x"
  ingress:
  - name: allow-from-y
    action: Allow
    from:
    - namespaces:
        matchLabels:
          kubernetes.io/metadata.name: "y"
  - name: deny-from-z
    action: Deny
    from:
    - namespaces:
        matchLabels:
          kubernetes.io/metadata.name: "z"
`
