package ovsenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierflow/tierflow/pkg/cni/hostguard"
)

// SchemaPath is the OVSDB schema of the Debian openvswitch-switch package.
const SchemaPath = "/usr/share/openvswitch/vswitch.ovsschema"

// startTimeout bounds waiting for a daemon or bridge to come up; generous
// because tests share a small, busy machine (it only matters on failure).
const startTimeout = 60 * time.Second

// nsPrefix starts the name of every namespace this package creates; the
// creating process's pid follows, so stale namespaces of dead test processes
// can be found and removed.
const nsPrefix = "tfenv-"

// Env is a private Open vSwitch: one ovsdb-server and one ovs-vswitchd.
type Env struct {
	t testing.TB
	// ID is random and part of every name this Env creates.
	ID string
	// Dir is the run directory: database, sockets, pidfiles, logs and the
	// bridges' management sockets (Dir/BRIDGE.mgmt).
	Dir string

	lock   *os.File    // the host-wide lock (see HostLockPath)
	launch chan func() // runs functions on the launcher thread
	// netns is the Env's own network namespace (WithOwnNetns); empty: the
	// test process's.
	netns string

	mu         sync.Mutex
	ovsdb      *exec.Cmd
	vswitchd   *exec.Cmd
	bridges    []*Bridge
	namespaces []string
	podCount   int
}

// Option changes how Start runs OVS.
type Option func(*startOptions)

type startOptions struct{ ownNetns bool }

// WithOwnNetns runs the daemons inside a network namespace of their own
// (Env.Netns), so ovs-vswitchd's "ovs-netdev" tap and the bridges' and
// internal ports' devices live there, not in the host namespace. Such an
// Env does not take the host lock: several of them (one per simulated
// node, joined by veth pairs as the node network) run at once, and beside
// the one root-namespace Env of another test. Pods' host-side veth ends
// are moved into the Env's namespace too.
func WithOwnNetns() Option { return func(o *startOptions) { o.ownNetns = true } }

// Start runs ovsdb-server and ovs-vswitchd in a fresh temporary directory and
// registers their shutdown (and the removal of everything Env created) with
// t.Cleanup.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var so startOptions
	for _, o := range opts {
		o(&so)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("ovsenv: must run as root (network namespaces, veths, OVS)")
	}
	for _, bin := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl", "ip", "ethtool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("ovsenv: %s not found (run test/tools/install-deps.sh): %v", bin, err)
		}
	}
	if _, err := os.Stat(SchemaPath); err != nil {
		t.Fatalf("ovsenv: OVSDB schema: %v", err)
	}
	if !so.ownNetns {
		lock := acquireHostLock(t)
		// Registered first, so it runs last: after the daemons and the
		// devices are gone.
		t.Cleanup(func() {
			_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
			_ = lock.Close()
		})
	}
	removeStaleNamespaces(t)

	// A short path under /tmp: unix socket paths are limited to 108 bytes
	// and t.TempDir() paths contain the (possibly long) test name.
	dir, err := os.MkdirTemp("", "tfovs-")
	if err != nil {
		t.Fatalf("ovsenv: %v", err)
	}
	e := &Env{t: t, ID: randomID(), Dir: dir, launch: make(chan func())}
	go e.launcher()
	t.Cleanup(e.cleanup)
	if so.ownNetns {
		e.netns = fmt.Sprintf("%s%d-%s-host", nsPrefix, os.Getpid(), e.ID)
		if out, err := exec.Command("ip", "netns", "add", e.netns).CombinedOutput(); err != nil {
			t.Fatalf("ovsenv: ip netns add %s: %v: %s", e.netns, err, out)
		}
		e.mu.Lock()
		e.namespaces = append(e.namespaces, e.netns)
		e.mu.Unlock()
		if out, err := exec.Command("ip", "-n", e.netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ovsenv: %s: lo up: %v: %s", e.netns, err, out)
		}
	}

	if out, err := exec.Command("ovsdb-tool", "create", e.DBPath(), SchemaPath).CombinedOutput(); err != nil {
		t.Fatalf("ovsenv: ovsdb-tool create: %v: %s", err, out)
	}
	if err := e.StartOVSDB(); err != nil {
		t.Fatalf("ovsenv: %v", err)
	}
	if _, err := e.Vsctl("--no-wait", "init"); err != nil {
		t.Fatalf("ovsenv: %v", err)
	}
	if err := e.StartVswitchd(); err != nil {
		t.Fatalf("ovsenv: %v", err)
	}
	return e
}

// Netns is the Env's own network namespace (ip netns name) with
// WithOwnNetns, else empty; NetnsPath is its bind mount.
func (e *Env) Netns() string { return e.netns }

// NetnsPath is /run/netns/NAME of Netns, or empty.
func (e *Env) NetnsPath() string {
	if e.netns == "" {
		return ""
	}
	return "/run/netns/" + e.netns
}

// hostCommand is a command in the Env's "host" namespace: the test
// process's, or its own with WithOwnNetns.
func (e *Env) hostCommand(name string, args ...string) *exec.Cmd {
	if e.netns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", e.netns, name}, args...)...)
}

// DBPath is the database file.
func (e *Env) DBPath() string { return filepath.Join(e.Dir, "conf.db") }

// DBSocketPath is ovsdb-server's unix socket.
func (e *Env) DBSocketPath() string { return filepath.Join(e.Dir, "db.sock") }

// DBEndpoint is the OVSDB endpoint in OVS syntax ("unix:PATH"), as ovs-vsctl
// --db and libovsdb take it.
func (e *Env) DBEndpoint() string { return "unix:" + e.DBSocketPath() }

// VswitchdCtlPath is ovs-vswitchd's control socket (ovs-appctl -t), which an agent
// needs for traces (its --vswitchd-ctl).
func (e *Env) VswitchdCtlPath() string { return filepath.Join(e.Dir, "ovs-vswitchd.ctl") }

// env is the environment for every OVS command: all OVS directories point
// at the private run directory, so nothing touches a system OVS.
func (e *Env) env() []string {
	return append(os.Environ(),
		"OVS_RUNDIR="+e.Dir, "OVS_DBDIR="+e.Dir, "OVS_LOGDIR="+e.Dir, "OVS_SYSCONFDIR="+e.Dir)
}

// daemon starts an OVS daemon in the foreground as a child that is killed if
// this process dies.
func (e *Env) daemon(name string, args ...string) (*exec.Cmd, error) {
	// ip netns exec execs the daemon in place: the parent-death signal and
	// the pid stay the daemon's.
	cmd := e.hostCommand(name, args...)
	cmd.Env = e.env()
	cmd.Dir = e.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	res := make(chan error)
	e.launch <- func() { res <- cmd.Start() }
	if err := <-res; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	// Reap the child so that a crash is visible as ProcessState.
	go func() { _ = cmd.Wait() }()
	return cmd, nil
}

// launcher starts the daemons from one OS thread that lives as long as the
// Env: the parent-death signal fires when the *thread* that forked a child
// exits, and a thread of the Go runtime may exit at any time (e.g. after a
// goroutine that locked it returns), which would kill the daemons mid-test.
func (e *Env) launcher() {
	runtime.LockOSThread()
	// Never unlocked: when this goroutine returns, after cleanup stopped the
	// daemons, the thread exits with it.
	for fn := range e.launch {
		fn()
	}
}

// StartVswitchd starts ovs-vswitchd (Start already did; use it after
// StopVswitchd) and waits until it has applied the current database.
func (e *Env) StartVswitchd() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.vswitchd != nil {
		return errors.New("ovs-vswitchd is already running")
	}
	_ = os.Remove(e.VswitchdCtlPath())
	cmd, err := e.daemon("ovs-vswitchd", e.DBEndpoint(),
		"--pidfile="+filepath.Join(e.Dir, "ovs-vswitchd.pid"),
		"--unixctl="+e.VswitchdCtlPath(),
		"--log-file="+filepath.Join(e.Dir, "ovs-vswitchd.log"),
		"--no-chdir",
		// No kernel datapath: tests use the userspace datapath only and must
		// not depend on (or disturb) the openvswitch kernel module.
		"--disable-system")
	if err != nil {
		return err
	}
	e.vswitchd = cmd
	if err := waitForSocket(e.VswitchdCtlPath(), startTimeout); err != nil {
		return fmt.Errorf("ovs-vswitchd: %v\n%s", err, e.log("ovs-vswitchd"))
	}
	// ovs-vsctl waits (without --no-wait) until ovs-vswitchd has applied the
	// change, i.e. caught up with the database.
	if _, err := e.vsctlTimeout(60, "set", "Open_vSwitch", ".", "other_config:tierflow-test="+e.ID); err != nil {
		return err
	}
	return nil
}

// StopVswitchd stops ovs-vswitchd without removing its datapath state, the
// way a crash or an upgrade would: bridge management sockets disappear and
// OpenFlow connections drop. Flows are lost (the userspace datapath lives in
// the process).
func (e *Env) StopVswitchd() error { return e.stop(&e.vswitchd, "ovs-vswitchd", syscall.SIGTERM) }

// stop sends sig to the daemon *daemon (named name) and waits until it
// exited; *daemon is nil from then on.
func (e *Env) stop(daemon **exec.Cmd, name string, sig syscall.Signal) error {
	e.mu.Lock()
	cmd := *daemon
	*daemon = nil
	e.mu.Unlock()
	if cmd == nil {
		return errors.New(name + " is not running")
	}
	_ = cmd.Process.Signal(sig)
	return waitExit(cmd, 10*time.Second)
}

// RestartVswitchd stops and starts ovs-vswitchd.
func (e *Env) RestartVswitchd() error {
	if err := e.StopVswitchd(); err != nil {
		return err
	}
	return e.StartVswitchd()
}

// StartOVSDB starts ovsdb-server on the Env's database (Start already
// did; use it after StopOVSDB, e.g. to change the database offline with
// ovsdb-tool in between) and waits for its socket. A new server process
// does not know its clients' last transactions: they resync from scratch.
func (e *Env) StartOVSDB() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ovsdb != nil {
		return errors.New("ovsdb-server is running")
	}
	_ = os.Remove(e.DBSocketPath())
	cmd, err := e.daemon("ovsdb-server", e.DBPath(),
		"--remote=punix:"+e.DBSocketPath(),
		"--pidfile="+filepath.Join(e.Dir, "ovsdb-server.pid"),
		"--unixctl="+filepath.Join(e.Dir, "ovsdb-server.ctl"),
		"--log-file="+filepath.Join(e.Dir, "ovsdb-server.log"),
		"--no-chdir")
	if err != nil {
		return err
	}
	e.ovsdb = cmd
	if err := waitForSocket(e.DBSocketPath(), startTimeout); err != nil {
		return fmt.Errorf("ovsdb-server: %v\n%s", err, e.log("ovsdb-server"))
	}
	return nil
}

// StopOVSDB stops ovsdb-server the way a stopping OVS container does:
// its clients lose their connection and find no server to reconnect to.
// ovs-vswitchd keeps running.
func (e *Env) StopOVSDB() error { return e.stop(&e.ovsdb, "ovsdb-server", syscall.SIGTERM) }

// KillOVSDB kills ovsdb-server (SIGKILL, which a frozen one gets too):
// its connections close under the requests it was sent.
func (e *Env) KillOVSDB() error { return e.stop(&e.ovsdb, "ovsdb-server", syscall.SIGKILL) }

// FreezeOVSDB stops ovsdb-server's process (SIGSTOP) without closing its
// connections: requests sent to it get no answer, as from a server that
// hangs. thaw (SIGCONT) lets it run again; cleanup thaws it too.
func (e *Env) FreezeOVSDB() (thaw func(), err error) {
	e.mu.Lock()
	cmd := e.ovsdb
	e.mu.Unlock()
	if cmd == nil {
		return nil, errors.New("ovsdb-server is not running")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("freezing ovsdb-server: %w", err)
	}
	var once sync.Once
	thaw = func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGCONT) }) }
	e.t.Cleanup(thaw)
	return thaw, nil
}

func waitExit(cmd *exec.Cmd, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cmd.Process.Signal(syscall.Signal(0)) != nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("%s did not exit in %v; killed", filepath.Base(cmd.Path), timeout)
}

// waitForSocket waits until a unix socket accepts connections (the file
// appears at bind(), before the daemon listens).
func waitForSocket(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		var c net.Conn
		if c, err = net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("socket %s not accepting connections after %v: %v", path, timeout, err)
}

func (e *Env) log(daemon string) string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, daemon+".log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Log returns the tail of a daemon's log ("ovs-vswitchd" or "ovsdb-server"),
// for failure messages.
func (e *Env) Log(daemon string) string { return e.log(daemon) }

// run runs an OVS tool with the private environment.
func (e *Env) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = e.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Vsctl runs ovs-vsctl against the private database.
func (e *Env) Vsctl(args ...string) (string, error) {
	return e.vsctlTimeout(60, args...)
}

func (e *Env) vsctlTimeout(seconds int, args ...string) (string, error) {
	full := append([]string{"--db=" + e.DBEndpoint(), "--timeout=" + strconv.Itoa(seconds)}, args...)
	return e.run(time.Duration(seconds+5)*time.Second, "ovs-vsctl", full...)
}

// Appctl runs ovs-appctl against the private ovs-vswitchd.
func (e *Env) Appctl(args ...string) (string, error) {
	return e.run(60*time.Second, "ovs-appctl", append([]string{"-t", e.VswitchdCtlPath()}, args...)...)
}

// Ofctl runs ovs-ofctl -O OpenFlow13 with the given arguments; bridge names
// resolve to the private management sockets.
func (e *Env) Ofctl(args ...string) (string, error) {
	return e.run(60*time.Second, "ovs-ofctl", append([]string{"-O", "OpenFlow13"}, args...)...)
}

func (e *Env) cleanup() {
	e.mu.Lock()
	vswitchd, ovsdb := e.vswitchd, e.ovsdb
	e.vswitchd, e.ovsdb = nil, nil
	namespaces := e.namespaces
	bridges := e.bridges
	e.mu.Unlock()

	if vswitchd != nil {
		// exit --cleanup deletes the datapaths and so the bridges' tap devices.
		_, _ = e.run(10*time.Second, "ovs-appctl", "-t", e.VswitchdCtlPath(), "exit", "--cleanup")
		if err := waitExit(vswitchd, 10*time.Second); err != nil {
			e.t.Logf("ovsenv: %v", err)
		}
	}
	if ovsdb != nil {
		_ = ovsdb.Process.Signal(syscall.SIGTERM)
		if err := waitExit(ovsdb, 10*time.Second); err != nil {
			e.t.Logf("ovsenv: %v", err)
		}
	}
	for _, ns := range namespaces {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			e.t.Logf("ovsenv: ip netns delete %s: %v: %s", ns, err, out)
		}
	}
	// A tap left behind by a killed ovs-vswitchd, or a host-side veth whose
	// namespace deletion failed; and the host guards of the pods' veths,
	// which the kernel keeps after the device is gone (those in an own
	// namespace went with it).
	for _, br := range bridges {
		for _, link := range append([]string{br.Name}, br.hostLinks()...) {
			if exec.Command("ip", "link", "show", link).Run() == nil {
				_ = exec.Command("ip", "link", "delete", link).Run()
			}
		}
		if e.netns == "" {
			for _, link := range br.hostLinks() {
				if err := hostguard.Remove("", link); err != nil {
					e.t.Logf("ovsenv: %v", err)
				}
			}
		}
	}
	if e.t.Failed() {
		e.t.Logf("ovsenv: ovs-vswitchd log tail:\n%s", e.log("ovs-vswitchd"))
	}
	_ = os.RemoveAll(e.Dir)
	close(e.launch)
}

// HostLockPath serializes Envs across test processes. ovs-vswitchd's
// userspace datapath creates a tap device named "ovs-netdev" in the host
// network namespace, so two ovs-vswitchd processes cannot run netdev
// bridges at the same time: the second fails with "creating tap device
// failed: Device or resource busy". Each Env therefore holds an exclusive
// flock on this file from Start to cleanup (the kernel releases it if the
// process dies).
const HostLockPath = "/run/tierflow-ovsenv.lock"

// hostLockWait bounds waiting for other test processes' Envs. `make test`
// runs every package at once, so a package may wait for the whole of
// another's real-OVS tests (the simulated-cluster and conformance suites
// hold the lock for many minutes).
const hostLockWait = 50 * time.Minute

// LockHost takes the host-wide OVS lock for a test that runs its own
// ovs-vswitchd outside an Env (e.g. a container entry point under test),
// and releases it at the test's cleanup. Never call it in a test that also
// starts an Env: the Env would wait for the test itself.
func LockHost(t testing.TB) {
	t.Helper()
	lock := acquireHostLock(t)
	t.Cleanup(func() {
		_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		_ = lock.Close()
	})
}

func acquireHostLock(t testing.TB) *os.File {
	t.Helper()
	f, err := os.OpenFile(HostLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("ovsenv: %v", err)
	}
	deadline := time.Now().Add(hostLockWait)
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			t.Fatalf("ovsenv: lock %s: %v", HostLockPath, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("ovsenv: another ovsenv.Env (test process) held %s for %v; only one private OVS can run per host", HostLockPath, hostLockWait)
		}
		if !logged {
			t.Logf("ovsenv: waiting for another test process's OVS to finish (%s)", HostLockPath)
			logged = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	// With the lock held no other ovsenv ovs-vswitchd runs; an "ovs-netdev"
	// tap left by a killed one would make ours fail.
	if exec.Command("ip", "link", "show", "ovs-netdev").Run() == nil && !vswitchdRunning() {
		_ = exec.Command("ip", "link", "delete", "ovs-netdev").Run()
	}
	return f
}

// vswitchdRunning reports whether an ovs-vswitchd runs in this process's
// network namespace (those of WithOwnNetns Envs have their own taps).
func vswitchdRunning() bool {
	self, _ := os.Readlink("/proc/self/ns/net")
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == "ovs-vswitchd" {
			ns, err := os.Readlink(filepath.Join(filepath.Dir(c), "ns", "net"))
			if err != nil || ns == self {
				return true
			}
		}
	}
	return false
}

// WaitRevalidated waits until ovs-vswitchd's revalidators have re-checked
// the datapath flow cache against the current OpenFlow tables (ovs-appctl
// revalidator/wait). Flow changes reach packets of existing datapath flows
// (e.g. an established connection) only after revalidation; tests that
// assert "blocked right after the change" call this first.
func (e *Env) WaitRevalidated() error {
	_, err := e.Appctl("revalidator/wait")
	return err
}

// removeStaleNamespaces deletes namespaces created by ovsenv in test
// processes that have exited.
func removeStaleNamespaces(t testing.TB) {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, ent := range entries {
		name := ent.Name()
		if !strings.HasPrefix(name, nsPrefix) {
			continue
		}
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(name, nsPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil {
			continue
		}
		if syscall.Kill(pid, 0) == nil || pid == os.Getpid() {
			continue
		}
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Logf("ovsenv: removing stale namespace %s: %v: %s", name, err, out)
		}
	}
}

func randomID() string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)[:5]
}
