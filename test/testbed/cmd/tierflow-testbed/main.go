// Command tierflow-testbed runs the tierflow test bed (package
// test/testbed) outside of tests, for demos and manual work:
//
//	tierflow-testbed up   [--dir D] [--nodes N] [--ipv6] [--normal-flows | --encap]
//	    starts the test bed in the background with tierflow on it (the
//	    tierflow-controller and one tierflow-agent per node, as
//	    test/e2e/framework runs them) and returns once the nodes are Ready
//	    and every agent enforces a complete policy state; D/state.json and
//	    D/kubeconfig describe it, D/tierflow.env points kubectl and tierctl
//	    at it. --normal-flows starts no tierflow: node bridges switch with
//	    NORMAL flows instead. --encap brings the bed up for the encap
//	    node network (every node its own namespace and OVS, behind a
//	    router; see test/testbed/encap.go) with the agents in encap mode.
//	tierflow-testbed down [--dir D]
//	    stops it (pods torn down, daemons stopped), then checks that no
//	    namespace, interface or process is left, removes any it finds and
//	    fails if it had to
//
// `make testbed-up` and `make testbed-down` run these with D=_output/testbed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/testbed"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tierflow-testbed up|down [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "_output/testbed", "test bed directory")
	nodes := fs.Int("nodes", 3, "number of nodes")
	ipv6 := fs.Bool("ipv6", false, "give pods IPv6 addresses too")
	normal := fs.Bool("normal-flows", false, "run no tierflow controller or agents; node bridges switch with NORMAL flows")
	encap := fs.Bool("encap", false, "every node its own network namespace and OVS behind a router; the agents in encap mode")
	foreground := fs.Bool("foreground", false, "run in the foreground until SIGTERM (up)")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	switch os.Args[1] {
	case "up":
		if *foreground {
			os.Exit(runForeground(abs, testbed.Options{Nodes: *nodes, IPv6: *ipv6, NormalFlows: *normal, Encap: *encap, Dir: abs}))
		}
		os.Exit(upDetached(abs, os.Args[2:]))
	case "down":
		os.Exit(down(abs))
	default:
		fmt.Fprintf(os.Stderr, "tierflow-testbed: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func logPath(dir string) string { return dir + ".log" }

func upDetached(dir string, args []string) int {
	if st, err := testbed.ReadState(dir); err == nil && processAlive(st.PID) {
		fmt.Fprintf(os.Stderr, "a test bed is already running (pid %d, %s); run `tierflow-testbed down` first\n", st.PID, dir)
		return 1
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		log.Print(err)
		return 1
	}
	logFile, err := os.Create(logPath(dir))
	if err != nil {
		log.Print(err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		log.Print(err)
		return 1
	}
	cmd := exec.Command(self, append([]string{"up", "--foreground"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		log.Print(err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Minute)
	for {
		select {
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "test bed failed to start (%v); log %s:\n%s\n", err, logPath(dir), tail(logPath(dir), 30))
			return 1
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			fmt.Fprintf(os.Stderr, "test bed not ready after 10 minutes; log %s:\n%s\n", logPath(dir), tail(logPath(dir), 30))
			return 1
		case <-time.After(500 * time.Millisecond):
		}
		st, err := testbed.ReadState(dir)
		if err != nil || st.PID != cmd.Process.Pid {
			continue
		}
		fmt.Printf("test bed up (pid %d, log %s)\n", st.PID, logPath(dir))
		fmt.Printf("  export KUBECONFIG=%s\n  kubectl: %s\n", filepath.Join(dir, "kubeconfig"), st.Kubectl)
		if st.OVSDBSocket != "" {
			fmt.Printf("  OVSDB: unix:%s\n", st.OVSDBSocket)
		}
		for _, n := range st.Nodes {
			if n.Netns != "" {
				fmt.Printf("  %s  ip %s (netns %s)  bridge %s  OVSDB unix:%s  pods %s\n", n.Name, n.IP, n.Netns, n.Bridge, n.OVSDBSocket, strings.Join(n.PodCIDRs, ","))
				continue
			}
			fmt.Printf("  %s  ip %s  bridge %s  uplink %s  pods %s\n", n.Name, n.IP, n.Bridge, n.UplinkPort, strings.Join(n.PodCIDRs, ","))
		}
		if tf := st.Tierflow; tf != nil {
			fmt.Printf("tierflow: controller query API https://%s, %d agents (binaries in %s)\n", tf.QueryAddress, len(tf.AgentSockets), tf.BinDir)
			fmt.Printf("  source %s   # KUBECONFIG, PATH (kubectl, tierctl), TIERCTL_* for tierctl\n", tf.EnvFile)
		} else {
			fmt.Println("tierflow: not running (--normal-flows): node bridges switch with NORMAL flows")
		}
		return 0
	}
}

func runForeground(dir string, opts testbed.Options) int {
	logger := log.New(os.Stderr, "tierflow-testbed ", log.LstdFlags)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logger.Print(err)
		return 1
	}
	runner := testbed.NewRunner(logger)
	defer os.RemoveAll(dir)
	defer runner.Close()
	var tb *testbed.Testbed
	if !runner.Run(func(t testing.TB) { tb = testbed.Start(t, opts) }) {
		logger.Print("start failed; cleaning up")
		return 1
	}
	st := tb.State(os.Getpid())
	if !opts.NormalFlows {
		// The controller and agents stop (gracefully, before the bed) at
		// runner.Close, like a test's cleanups.
		var tf *framework.Tierflow
		if !runner.Run(func(t testing.TB) { tf = framework.Start(t, tb, filepath.Join(dir, "tierflow")) }) {
			logger.Print("starting tierflow failed; cleaning up")
			return 1
		}
		env := filepath.Join(dir, "tierflow.env")
		if err := tf.WriteEnv(env, filepath.Join(dir, "kubeconfig")); err != nil {
			logger.Print(err)
			return 1
		}
		tf.Record(&st, env)
	}
	if err := testbed.WriteState(dir, st); err != nil {
		logger.Print(err)
		return 1
	}
	logger.Printf("ready: %d nodes", len(tb.Nodes))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	logger.Printf("%v: stopping", s)
	_ = os.Remove(testbed.StatePath(dir))
	return 0
}

func down(dir string) int {
	st, err := testbed.ReadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no test bed state in", dir)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if st != nil && processAlive(st.PID) {
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
		deadline := time.Now().Add(3 * time.Minute)
		for processAlive(st.PID) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if processAlive(st.PID) {
			fmt.Fprintf(os.Stderr, "test bed (pid %d) did not stop in 3 minutes; killing it\n", st.PID)
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
		}
	}
	leftovers := removeLeftovers(dir, st)
	if len(leftovers) > 0 {
		fmt.Fprintf(os.Stderr, "test bed left these behind (now removed):\n  %s\n", strings.Join(leftovers, "\n  "))
		return 1
	}
	fmt.Println("test bed down; no namespace, interface or process left")
	return 0
}

// removeLeftovers finds and removes what a stopped test bed should not have
// left: pod namespaces and veths (from the node runtimes' records and the
// namespace prefix), the state's bridges and dummy interface, processes
// running from the test bed's directory, /agnhost if dangling.
func removeLeftovers(dir string, st *testbed.State) []string {
	// The pods this bed's node runtimes still recorded (a runtime killed
	// before its teardown); a pod's veth goes with its namespace. Other pod
	// namespaces belong to another test bed, which may be starting right
	// now on the OVS this one released: left alone.
	var found []string
	dirs, _ := filepath.Glob(filepath.Join(dir, "nodes", "*", "pods"))
	for _, d := range dirs {
		found = append(found, noderuntime.RemoveRecorded(d)...)
	}
	entries, _ := os.ReadDir("/var/run/netns")
	orphans := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), noderuntime.NetnsPrefix) {
			orphans++
		}
	}
	if orphans > 0 {
		fmt.Printf("note: %d pod namespaces (%s*) of another test bed exist; left alone\n", orphans, noderuntime.NetnsPrefix)
	}
	if st != nil {
		links := []string{st.Fabric, st.NodeIface}
		for _, n := range st.Nodes {
			if n.Netns == "" { // an encap bed's node bridges go with their namespaces
				links = append(links, n.Bridge)
			}
		}
		for _, l := range links {
			if l != "" && exec.Command("ip", "link", "show", "dev", l).Run() == nil {
				found = append(found, "interface "+l)
				_ = exec.Command("ip", "link", "del", l).Run()
			}
		}
		namespaces := []string{st.Router}
		for _, n := range st.Nodes {
			namespaces = append(namespaces, n.Netns)
		}
		for _, ns := range namespaces {
			if _, err := os.Stat("/var/run/netns/" + ns); ns != "" && err == nil {
				found = append(found, "namespace "+ns)
				_ = exec.Command("ip", "netns", "del", ns).Run()
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	self := os.Getpid()
	for _, p := range procs {
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		if pid == self {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(data), "\x00"), "\x00", " ")
		if strings.Contains(cmd, dir+"/") || (st != nil && ownsOVS(st, cmd)) {
			found = append(found, fmt.Sprintf("process %d: %s", pid, cmd))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if target, err := os.Readlink(testbed.AgnhostPath); err == nil && strings.HasPrefix(target, dir+"/") {
		found = append(found, testbed.AgnhostPath+" -> "+target)
		_ = os.Remove(testbed.AgnhostPath)
	}
	if _, err := os.Stat(dir); err == nil {
		_ = os.RemoveAll(dir)
	}
	return found
}

// ownsOVS reports whether a command line belongs to one of the bed's OVS
// daemons.
func ownsOVS(st *testbed.State, cmd string) bool {
	dirs := []string{st.OVSDir}
	for _, n := range st.Nodes {
		dirs = append(dirs, n.OVSDir)
	}
	for _, d := range dirs {
		if d != "" && strings.Contains(cmd, d) {
			return true
		}
	}
	return false
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie is not alive.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(data), ") Z ")
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	parts := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
