//go:build clustere2e

package clustere2e

import (
	"context"
	"testing"
	"time"
)

// testUninstall deletes tierflow as manifests/README.md documents (its
// block "uninstall", run verbatim) and checks that no node keeps a gateway,
// route, nat rule, nftables table, CNI configuration, CNI binary or state
// directory of tierflow's.
func testUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := env.c.RunDocBlock(ctx, env.root, "manifests/README.md", "uninstall")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	left, err := env.c.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for node, things := range left {
		for _, thing := range things {
			t.Errorf("%s still has %s", node, thing)
		}
	}
}
