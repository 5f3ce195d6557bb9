//go:build clustere2e

package clustere2e

import (
	"context"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/cyclonus"
)

// testCyclonus runs cyclonus's generated NetworkPolicy cases against the
// cluster (test/cyclonus: namespaces x, y, z with pods a, b, c serving TCP
// and UDP on ports 80 and 81, each generated policy set probed pair by
// pair through `kubectl exec` and compared with cyclonus's model), once
// with pod IPs and once through Service names (the Service proxy, or
// kube-proxy, and CoreDNS in the path). Every case is a subtest.
func testCyclonus(t *testing.T) {
	bin, err := cyclonus.Build(env.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dest := range []string{"pod-ip", "service-name"} {
		t.Run(dest, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
			defer cancel()
			res, err := cyclonus.Run{Kubeconfig: env.c.Kubeconfig, Destination: dest, Dir: env.out}.Generate(ctx, bin)
			if res != nil {
				t.Logf("cyclonus generate --destination-type=%s: %v (exit: %v); log %s", dest, res.Took.Round(time.Second), res.ExitErr, res.Log)
			}
			if err != nil {
				t.Fatal(err)
			}
			res.Report(t)
		})
	}
}
