package agentimage

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/ovsenv"
)

// ovsEnv points start-ovs and the OVS tools at private directories and
// keeps the daemons off the kernel datapath (other tests on this machine
// may use it; the container uses it for real).
func ovsEnv(t *testing.T, dir string) []string {
	t.Helper()
	for _, bin := range []string{"ovsdb-server", "ovs-vswitchd", "ovsdb-tool", "ovs-vsctl", "ovs-appctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install openvswitch-switch (test/tools/install-deps.sh)", bin)
		}
	}
	// Only one userspace-datapath ovs-vswitchd can run per host; registered
	// before the daemons' cleanup, the lock is released after they stop.
	ovsenv.LockHost(t)
	return append(os.Environ(),
		"OVS_RUNDIR="+filepath.Join(dir, "run"),
		"OVS_DBDIR="+filepath.Join(dir, "db"),
		"OVS_LOGDIR="+filepath.Join(dir, "log"),
		"OVS_SKIP_MODPROBE=1",
		"OVS_VSWITCHD_EXTRA_ARGS=--disable-system",
	)
}

type startedOVS struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func startOVS(t *testing.T, env []string) *startedOVS {
	t.Helper()
	s := &startedOVS{cmd: exec.Command("./start-ovs"), out: &bytes.Buffer{}, done: make(chan error, 1)}
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// Its own process group, so cleanup reaches the daemons even if the
	// script died first.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) })
	return s
}

func run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func waitHealthy(t *testing.T, env []string, s *startedOVS) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := run(t, env, "./start-ovs", "--check"); err == nil {
			return
		}
		select {
		case err := <-s.done:
			t.Fatalf("start-ovs exited: %v\n%s", err, s.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemons not healthy after 30s:\n%s", s.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func stopOVS(t *testing.T, s *startedOVS) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("start-ovs did not exit cleanly on SIGTERM: %v\n%s", err, s.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("start-ovs still running 30s after SIGTERM:\n%s", s.out)
	}
}

// TestStartOVS runs the OVS container's entry point: both daemons come up
// and answer, a bridge can be created, SIGTERM stops both, and a restart
// (a new container on the same hostPath) keeps the bridge.
func TestStartOVS(t *testing.T) {
	dir := t.TempDir()
	env := ovsEnv(t, dir)
	if out, err := run(t, env, "./start-ovs", "--check"); err == nil {
		t.Fatalf("--check passed with no daemons running:\n%s", out)
	}

	s := startOVS(t, env)
	waitHealthy(t, env, s)
	db := "--db=unix:" + filepath.Join(dir, "run", "db.sock")
	if out, err := run(t, env, "ovs-vsctl", db, "add-br", "br-test", "--", "set", "bridge", "br-test", "datapath_type=netdev"); err != nil {
		t.Fatalf("add-br: %v\n%s", err, out)
	}
	// The bridge's OpenFlow management socket is where the agent expects
	// it (pkg/config: BRIDGE.mgmt next to db.sock).
	// ovs-vswitchd creates it asynchronously, after ovs-vsctl returns.
	mgmt := filepath.Join(dir, "run", "br-test.mgmt")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err := run(t, env, "ovs-ofctl", "-O", "OpenFlow13", "dump-flows", "unix:"+mgmt)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dump-flows on %s: %v\n%s\n%s", mgmt, err, out, s.out)
		}
	}
	stopOVS(t, s)
	if out, err := run(t, env, "./start-ovs", "--check"); err == nil {
		t.Fatalf("--check passed after stop:\n%s", out)
	}
	if !strings.Contains(s.out.String(), "start-ovs: stopped") {
		t.Errorf("no stop message:\n%s", s.out)
	}

	s = startOVS(t, env)
	waitHealthy(t, env, s)
	out, err := run(t, env, "ovs-vsctl", db, "list-br")
	if err != nil || strings.TrimSpace(out) != "br-test" {
		t.Fatalf("bridge not kept across a restart: %q %v", out, err)
	}
	stopOVS(t, s)
}

// TestStartOVSExitsWhenADaemonDies: the container must not live on with
// half of OVS.
func TestStartOVSExitsWhenADaemonDies(t *testing.T) {
	dir := t.TempDir()
	env := ovsEnv(t, dir)
	s := startOVS(t, env)
	waitHealthy(t, env, s)
	pid, err := os.ReadFile(filepath.Join(dir, "run", "ovs-vswitchd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, env, "kill", "-KILL", strings.TrimSpace(string(pid))); err != nil {
		t.Fatalf("kill: %v %s", err, out)
	}
	select {
	case err := <-s.done:
		if err == nil {
			t.Fatalf("start-ovs exited 0 after ovs-vswitchd died:\n%s", s.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("start-ovs still running after ovs-vswitchd died:\n%s", s.out)
	}
	if out, err := run(t, env, "ovs-appctl", "-T", "2", "-t", "ovsdb-server", "version"); err == nil {
		t.Fatalf("ovsdb-server left running:\n%s", out)
	}
}

// TestStartOVSAfterKill: a container killed with SIGKILL (the kubelet
// after a failed liveness probe, the OOM killer, ctr tasks kill) leaves
// its sockets and pid files in the shared run directory; the next one
// starts over them and keeps the bridge.
func TestStartOVSAfterKill(t *testing.T) {
	dir := t.TempDir()
	env := ovsEnv(t, dir)
	s := startOVS(t, env)
	waitHealthy(t, env, s)
	db := "--db=unix:" + filepath.Join(dir, "run", "db.sock")
	if out, err := run(t, env, "ovs-vsctl", db, "add-br", "br-test", "--", "set", "bridge", "br-test", "datapath_type=netdev"); err != nil {
		t.Fatalf("add-br: %v\n%s", err, out)
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if _, err := os.Stat(filepath.Join(dir, "run", "db.sock")); err != nil {
		t.Fatalf("the killed ovsdb-server left no socket, so this test tests nothing: %v", err)
	}
	// On a busy node ovsdb-server takes a while to replace the socket:
	// here it waits a second before it starts.
	real, err := exec.LookPath("ovsdb-server")
	if err != nil {
		t.Fatal(err)
	}
	slow := t.TempDir()
	if err := os.WriteFile(filepath.Join(slow, "ovsdb-server"), []byte("#!/bin/sh\nsleep 1\nexec "+real+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s = startOVS(t, append(env, "PATH="+slow+":"+os.Getenv("PATH")))
	waitHealthy(t, env, s)
	out, err := run(t, env, "ovs-vsctl", db, "list-br")
	if err != nil || strings.TrimSpace(out) != "br-test" {
		t.Fatalf("bridge not kept across a kill: %q %v\n%s", out, err, s.out)
	}
	stopOVS(t, s)
}
