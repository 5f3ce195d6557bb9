//go:build clustere2e

package clustere2e

import (
	"context"
	"testing"
	"time"
)

// testUninstall deletes tierflow as manifests/README.md documents (its
// block "uninstall", run verbatim: the release manifest, then the cleanup
// DaemonSet) and checks that no node keeps an OVS device, route, nat rule,
// nftables table, CNI configuration, CNI binary or directory of
// tierflow's.
func testUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, left, err := env.c.Uninstall(ctx, env.root)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for node, things := range left {
		for _, thing := range things {
			t.Errorf("%s still has %s", node, thing)
		}
	}
}
