//go:build clustere2e

package clustere2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/test/cluster"
)

// env is the cluster every test of the package runs against.
var env struct {
	c    *cluster.Cluster
	cs   kubernetes.Interface
	root string // the repository
	out  string // _output/e2e-cluster: reports
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, binDir, err := cluster.EnsurePrerequisites()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.root = root
	env.out = filepath.Join(root, "_output", "e2e-cluster")
	if err := os.MkdirAll(env.out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	logf := func(format string, args ...any) { fmt.Printf("e2e-cluster: "+format+"\n", args...) }
	if dir := os.Getenv("TIERFLOW_E2E_CLUSTER_DIR"); dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(root, dir) // as make, in the repository
		}
		c, err := cluster.Load(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "TIERFLOW_E2E_CLUSTER_DIR=%s: %v\n", dir, err)
			return 1
		}
		env.c = c
		logf("using the cluster in %s (left running)", dir)
	} else {
		const name = "tierflow-e2e"
		unlock, err := cluster.Lock(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer unlock()
		dir := filepath.Join(root, "_output", "cluster-e2e")
		if err := cluster.RemoveStale(ctx, name, dir, logf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c, err := cluster.Up(ctx, cluster.Options{
			Name: name, Nodes: 3, Dir: dir, Subnet: "172.30.2.0/24",
			ExternalIP: "198.51.100.3", BinDir: binDir, Logf: logf,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		env.c = c
		defer func() {
			if os.Getenv("TIERFLOW_E2E_KEEP") == "1" {
				logf("keeping the cluster: %s", c.EnvFile)
				return
			}
			if err := c.Down(context.Background(), logf); err != nil {
				fmt.Fprintln(os.Stderr, "cluster down:", err)
			}
		}()
		ictx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		err = c.InstallTierflow(ictx, root, logf)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if env.cs, err = env.c.Client(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestRealCluster runs the parts in order: the cluster's state matters
// (faults restart components; uninstall removes tierflow).
func TestRealCluster(t *testing.T) {
	t.Run("Tierctl", testTierctl)
	t.Run("Conformance", testConformance)
	t.Run("Cyclonus", testCyclonus)
	t.Run("Faults", testFaults)
	t.Run("Uninstall", testUninstall)
}
