package kubeapi

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// binaryNames are the commands `make kube-binaries` builds.
var binaryNames = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// BinDirEnv, when set, names a directory holding prebuilt Kubernetes
// binaries; the harness then uses them as they are and never builds.
const BinDirEnv = "TIERFLOW_KUBE_BIN_DIR"

// RepoRoot finds the tierflow repository root by walking up from the working
// directory (go test runs in the package directory) to the go.mod of module
// github.com/tierflow/tierflow.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isTierflowModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module github.com/tierflow/tierflow above the working directory")
		}
		dir = parent
	}
}

func isTierflowModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == "github.com/tierflow/tierflow"
		}
	}
	return false
}

// EnsureBinaries returns the directory holding kube-apiserver,
// kube-controller-manager, kube-scheduler and kubectl, running `make
// kube-binaries` first when they are missing or older than build/kube's
// module files. Concurrent test processes serialize on a lock file so the
// (slow) build runs once.
func EnsureBinaries() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		for _, b := range binaryNames {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", BinDirEnv, dir, err)
			}
		}
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(root, "_output", "bin")
	if binariesFresh(root, binDir) {
		return binDir, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, "_output", ".kube-binaries.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking the kube-binaries build: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	// Another process may have built them while this one waited.
	if binariesFresh(root, binDir) {
		return binDir, nil
	}
	cmd := exec.Command("make", "kube-binaries")
	cmd.Dir = root
	// The Makefile takes the same lock unless told this process holds it.
	cmd.Env = append(os.Environ(), "TIERFLOW_KUBE_LOCK_HELD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("`make kube-binaries` in %s failed (it builds k8s.io/kubernetes v1.31.4 from build/kube and needs the Go module proxy the first time): %w\n%s", root, err, tail(string(out), 40))
	}
	if !binariesFresh(root, binDir) {
		return "", fmt.Errorf("`make kube-binaries` succeeded but %s still lacks fresh binaries", binDir)
	}
	return binDir, nil
}

func binariesFresh(root, binDir string) bool {
	var newestInput int64
	for _, f := range []string{"go.mod", "go.sum"} {
		st, err := os.Stat(filepath.Join(root, "build", "kube", f))
		if err != nil {
			return false
		}
		if t := st.ModTime().UnixNano(); t > newestInput {
			newestInput = t
		}
	}
	for _, b := range binaryNames {
		st, err := os.Stat(filepath.Join(binDir, b))
		if err != nil || st.ModTime().UnixNano() < newestInput || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
