package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/tierflow/tierflow/test/kubeapi"
)

// EnsurePrerequisites runs `make cluster-prereqs` in the repository (Debian
// packages, the Kubernetes, agnhost, CoreDNS and pause binaries; cached)
// and returns the repository root and the directory of the binaries.
// Concurrent test processes serialize on the same lock as the Kubernetes
// binaries' build.
func EnsurePrerequisites() (root, binDir string, err error) {
	if root, err = kubeapi.RepoRoot(); err != nil {
		return "", "", err
	}
	binDir = filepath.Join(root, "_output", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, "_output", ".kube-binaries.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", fmt.Errorf("locking the binaries' build: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cmd := exec.Command("make", "--no-print-directory", "cluster-prereqs")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TIERFLOW_KUBE_LOCK_HELD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("`make cluster-prereqs` failed (it installs Debian packages and builds from the Go module proxy the first time): %w\n%s", err, tail(string(out), 40))
	}
	if m := Missing(binDir); len(m) > 0 {
		return "", "", fmt.Errorf("after `make cluster-prereqs`, still missing: %v", m)
	}
	return root, binDir, nil
}
