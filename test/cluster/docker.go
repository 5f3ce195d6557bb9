package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// command runs name with args and returns its trimmed stdout; a failure
// carries the command line and the tail of its stderr.
func command(ctx context.Context, stdin io.Reader, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func docker(ctx context.Context, args ...string) (string, error) {
	return command(ctx, nil, "docker", args...)
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// dockerReachable reports whether a Docker daemon answers.
func dockerReachable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := docker(ctx, "info", "--format", "{{.ServerVersion}}")
	return err == nil
}

// startDockerd starts Debian's dockerd in the background (this machine has
// no init system to do it) with its log in logPath, waits until it answers
// and returns its PID. The daemon outlives the process that started it:
// the image store it keeps is the cluster's cache.
func startDockerd(ctx context.Context, logPath string) (int, error) {
	if _, err := exec.LookPath("dockerd"); err != nil {
		return 0, fmt.Errorf("no Docker daemon reachable and no dockerd to start: install docker.io (make cluster-prereqs does)")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("dockerd")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting dockerd: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if dockerReachable(ctx) {
			return pid, nil
		}
		if syscall.Kill(pid, 0) != nil {
			return 0, fmt.Errorf("dockerd exited at start; see %s:\n%s", logPath, fileTail(logPath, 15))
		}
		time.Sleep(500 * time.Millisecond)
	}
	return pid, fmt.Errorf("dockerd (pid %d) did not answer within 60s; see %s", pid, logPath)
}

func fileTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), lines)
}

// dockerHold is this process's shared lock on dockerLockPath, taken the
// first time it uses Docker and kept until it exits: Down stops a dockerd
// only if no other process holds one (it may be building images, with no
// container yet).
var dockerHold struct {
	once sync.Once
	f    *os.File
}

const dockerLockPath = "/run/tierflow-cluster-dockerd.lock"

func holdDocker() {
	dockerHold.once.Do(func() {
		f, err := os.OpenFile(dockerLockPath, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_SH) != nil {
			f.Close()
			return
		}
		dockerHold.f = f
	})
}

// dockerUsedByOthers reports whether another process holds Docker (see
// holdDocker). It turns this process's hold exclusive to find out, and
// back to shared.
func dockerUsedByOthers() bool {
	holdDocker()
	f := dockerHold.f
	if f == nil {
		return true // unknown: assume someone does
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
	return false
}
