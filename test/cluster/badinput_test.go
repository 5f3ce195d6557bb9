package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/test/cluster"
)

// TestMissing: a machine without the tools or the binaries gets each
// named, with what to do.
func TestMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	missing := strings.Join(cluster.Missing(t.TempDir()), "\n")
	for _, want := range []string{
		"docker: not found (make cluster-prereqs installs",
		"mmdebstrap: not found",
		"kubelet: not in ",
		"agnhost-wrapper: not in ",
		"(make cluster-prereqs builds it)",
	} {
		if !strings.Contains(missing, want) {
			t.Errorf("Missing does not say %q:\n%s", want, missing)
		}
	}
}

// checkBadInput (run while the smoke cluster is up): Up refuses a cluster
// whose name is taken, and an Up that fails half-way (its network's subnet
// is the running cluster's) removes everything it had started and leaves
// the running cluster alone.
func checkBadInput(ctx context.Context, t *testing.T, running *cluster.Cluster) {
	dir := t.TempDir()
	_, err := cluster.Up(ctx, cluster.Options{Name: running.Name, Nodes: 2, Dir: filepath.Join(dir, "same-name"), BinDir: running.BinDir, Subnet: "172.30.9.0/24", ExternalIP: "198.51.100.9"})
	if err == nil || !strings.Contains(err.Error(), "containers of a cluster named") {
		t.Errorf("a second cluster of the same name: %v", err)
	}
	if _, err := cluster.Up(ctx, cluster.Options{Name: "tierflow-bad", Nodes: 1, Dir: filepath.Join(dir, "one"), BinDir: running.BinDir}); err == nil || !strings.Contains(err.Error(), "at least 2 nodes") {
		t.Errorf("one node: %v", err)
	}
	badDir := filepath.Join(dir, "overlap")
	_, err = cluster.Up(ctx, cluster.Options{Name: "tierflow-bad", Nodes: 2, Dir: badDir, BinDir: running.BinDir, Subnet: running.Subnet, ExternalIP: "198.51.100.9"})
	if err == nil {
		t.Fatal("a cluster on the running cluster's subnet came up")
	}
	t.Logf("cluster on a taken subnet: %v", lastLine(err.Error()))
	if _, err := os.Stat(badDir); !os.IsNotExist(err) {
		t.Errorf("the failed cluster's directory is still there (%v)", err)
	}
	if left, err := running.DockerObjects(ctx, "tierflow-bad"); err != nil || len(left) > 0 {
		t.Errorf("the failed cluster left %v (%v)", left, err)
	}

	// Half-started: the first node runs when the second cannot start
	// (a container of someone else's has its name).
	squatter := "tierflow-bad-node-2"
	if err := running.Docker(ctx, "create", "--name", squatter, cluster.PauseImage); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = running.Docker(context.Background(), "rm", "--force", squatter) }()
	_, err = cluster.Up(ctx, cluster.Options{Name: "tierflow-bad", Nodes: 2, Dir: badDir, BinDir: running.BinDir, Subnet: "172.30.9.0/24", ExternalIP: "198.51.100.9"})
	if err == nil || !strings.Contains(err.Error(), squatter) {
		t.Fatalf("with a node's name taken: %v", err)
	}
	t.Logf("half-started cluster: %v", lastLine(err.Error()))
	if left, err := running.DockerObjects(ctx, "tierflow-bad"); err != nil || len(left) > 0 {
		t.Errorf("the half-started cluster left %v (%v)", left, err)
	}
	if err := running.Docker(ctx, "inspect", squatter); err != nil {
		t.Errorf("the teardown removed a container that was not the cluster's: %v", err)
	}
	if err := running.NodesRunning(ctx); err != nil {
		t.Errorf("the running cluster was disturbed: %v", err)
	}
}

// lastLine is docker's reason in a failed command's error: the line of
// the daemon's answer, else the last one.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.Contains(l, "Error response from daemon") {
			return l
		}
	}
	return lines[len(lines)-1]
}
