// Command tierflow-demo is `make demo`: it brings up the simulated cluster
// (test/testbed) with tierflow's controller and agents (test/e2e/framework),
// the four houses' namespaces with pods on both nodes, and walks through
// what tierflow does, saying at each step what it shows:
//
//  1. the connectivity matrix, from real probes between the pods' network
//     namespaces, with no policy;
//  2. an AdminNetworkPolicy, a NetworkPolicy and a
//     BaselineAdminNetworkPolicy (test/demo/*.yaml), each printed with a
//     one-line explanation, applied, and realized on every node;
//  3. the matrix again, every cell checked against pkg/explain;
//  4. `tierctl explain` (asking the live controller) for one denied and
//     one allowed pair;
//  5. the OpenFlow flows of the denying rule: `tierctl flows` and
//     `ovs-ofctl -O OpenFlow13 dump-flows` filtered by the rule's cookie.
//
// With --keep (DEMO_KEEP=1, the default of `make demo`) it then stays up
// in the background, writes DIR/state.json as `tierflow-testbed up` does
// (so `make testbed-down` stops it) and DIR/demo.env with the variables
// for kubectl and tierctl; without it, it tears everything down and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/testbed"
)

// DoneMarker is printed once the walk-through has finished; test/demo/demo.sh
// waits for it before leaving the demo running in the background.
const DoneMarker = "=== tierflow demo done"

// houses: two pods per house, on different nodes.
var houses = []framework.Workload{
	{Namespace: "gryffindor", Labels: map[string]string{"house": "gryffindor"}, Pods: map[string]string{"harry": "node-1", "hermione": "node-2"}},
	{Namespace: "slytherin", Labels: map[string]string{"house": "slytherin"}, Pods: map[string]string{"draco": "node-2", "pansy": "node-1"}},
	{Namespace: "hufflepuff", Labels: map[string]string{"house": "hufflepuff"}, Pods: map[string]string{"cedric": "node-1", "nymphadora": "node-2"}},
	{Namespace: "ravenclaw", Labels: map[string]string{"house": "ravenclaw"}, Pods: map[string]string{"luna": "node-2", "cho": "node-1"}},
}

// The demo's policies, in the order they are applied, and the pairs it
// explains.
var (
	policyFiles = []string{"1-admin-slytherin-keep-out.yaml", "2-networkpolicy-hufflepuff.yaml", "3-baseline-ravenclaw.yaml"}
	deniedPair  = [2]string{"slytherin/draco", "gryffindor/harry"}
	allowedPair = [2]string{"gryffindor/harry", "slytherin/draco"}
	denyPolicy  = "AdminNetworkPolicy/slytherin-keep-out"
	// The matrix shows TCP/80 and UDP/80; every pod serves both.
	demoPorts = []explain.PortSpec{{Protocol: model.ProtocolTCP, Port: 80}, {Protocol: model.ProtocolUDP, Port: 80}}
)

func main() {
	dir := flag.String("dir", "_output/testbed", "directory of the test bed and the demo's state")
	nodes := flag.Int("nodes", 2, "number of nodes")
	keep := flag.Bool("keep", true, "leave the cluster up after the walk-through (stop it with make testbed-down)")
	flag.Parse()
	abs, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	os.Exit(run(abs, *nodes, *keep))
}

func run(dir string, nodes int, keep bool) int {
	logger := log.New(os.Stderr, "tierflow-demo ", log.LstdFlags)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logger.Print(err)
		return 1
	}
	runner := testbed.NewRunner(logger)
	// The directory goes after everything in it has stopped, as with
	// tierflow-testbed: a later demo or test bed starts clean.
	defer os.RemoveAll(dir)
	defer runner.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)

	var tf *framework.Tierflow
	done := make(chan bool, 1)
	go func() {
		done <- runner.Run(func(tb testing.TB) { tf = walkThrough(tb, dir, nodes) })
	}()
	select {
	case ok := <-done:
		if !ok {
			logger.Print("the demo failed; tearing down")
			return 1
		}
	case s := <-sig:
		logger.Printf("%v: tearing down", s)
		return 1
	}
	if !keep {
		fmt.Println(DoneMarker)
		step("Tearing down (DEMO_KEEP=0)")
		return 0
	}
	if err := writeState(dir, tf); err != nil {
		logger.Print(err)
		return 1
	}
	printUsage(dir, tf)
	fmt.Println(DoneMarker)
	s := <-sig
	logger.Printf("%v: tearing down", s)
	_ = os.Remove(filepath.Join(dir, "state.json"))
	return 0
}

var stepNo int

func step(title string, explanation ...string) {
	stepNo++
	fmt.Printf("\n==> %d. %s\n", stepNo, title)
	for _, l := range explanation {
		fmt.Println("    " + l)
	}
}

func walkThrough(tb testing.TB, dir string, nodes int) *framework.Tierflow {
	root, err := kubeapi.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	step("Starting the simulated cluster",
		"kube-apiserver, controller-manager and scheduler on etcd; kwok keeps the nodes Ready;",
		fmt.Sprintf("one OVS bridge per node (%d nodes) joined by a fabric bridge; every pod is a real network namespace.", nodes))
	bed := testbed.Start(tb, testbed.Options{Nodes: nodes, Dir: dir})
	for _, n := range bed.Nodes {
		fmt.Printf("    %s  InternalIP %s  bridge %s  pods %s\n", n.Name, n.IP, n.Bridge.Name, strings.Join(n.PodCIDRs, ","))
	}

	step("Starting tierflow",
		"tierflow-controller watches the API server; one tierflow-agent per node programs that node's bridge.")
	tf := framework.Start(tb, bed, filepath.Join(dir, "tierflow"))
	fmt.Printf("    controller: agents on %s, query API on https://%s; agents ready on every node\n", tf.AgentAddress, tf.QueryAddress)

	step("Creating the four houses",
		"namespaces gryffindor, slytherin, hufflepuff, ravenclaw; two pods each, on different nodes,",
		"each serving TCP and UDP on ports 80 and 81.")
	pods, err := tf.Deploy(houses...)
	if err != nil {
		tb.Fatalf("%v\n%s", err, tf.Logs(20))
	}
	for _, p := range pods {
		fmt.Printf("    %-22s %-7s %s\n", p, p.Node, p.IP)
	}

	step("Connectivity with no policy",
		"every ordered pair of pods, from real connections made inside the source pod's network namespace:",
		"allow = connected and answered, DENY = no answer within "+framework.ProbeTimeout.String()+".")
	showMatrix(tb, tf, pods)

	step("The policies",
		"one per tier: Admin (evaluated first, final), NetworkPolicy (namespace owners), Baseline (last, overridable).")
	for _, f := range policyFiles {
		data, err := os.ReadFile(filepath.Join(root, "test", "demo", f))
		if err != nil {
			tb.Fatal(err)
		}
		fmt.Printf("\n--- test/demo/%s\n%s", f, data)
	}
	step("Applying them with kubectl and waiting until every node enforces them",
		"(the controller's query API reports each policy's generation realized on every node of its span)")
	for _, f := range policyFiles {
		out, err := tf.Kubectl("", "apply", "-f", filepath.Join(root, "test", "demo", f))
		if err != nil {
			tb.Fatal(err)
		}
		fmt.Print("    " + out)
	}
	start := time.Now()
	if _, err := tf.WaitRealized(2 * time.Minute); err != nil {
		tb.Fatalf("%v\n%s", err, tf.Logs(20))
	}
	fmt.Printf("    realized on every node in %v\n", time.Since(start).Round(time.Millisecond))

	step("Connectivity with the policies",
		"the same probes again; each cell is also checked against tierctl's evaluator (pkg/explain) over the live objects.")
	showMatrix(tb, tf, pods)

	tierctl := filepath.Join(tf.BinDir, "tierctl")
	for _, pair := range [][2]string{deniedPair, allowedPair} {
		step(fmt.Sprintf("Why %s -> %s on TCP/80?", pair[0], pair[1]),
			"tierctl explain asks the running controller which tier, policy and rule decide each direction.")
		args := append(tf.TierctlArgs(), "explain", "--src", pair[0], "--dst", pair[1], "--port", "TCP/80")
		show(tb, tierctl, args, "tierctl explain --src "+pair[0]+" --dst "+pair[1]+" --port TCP/80", nil)
	}

	node := podNode(pods, deniedPair[1])
	step("The flows of the rule that denies it, on "+node+" (the destination's node: ingress is enforced there)",
		"tierctl flows lists them by table with counters (the probes above hit them);",
		"every flow's cookie names its rule, so ovs-ofctl can select them by cookie too.")
	show(tb, tierctl, append(tf.TierctlArgs(), "flows", "--node", node, "--policy", denyPolicy, "--direction", "ingress", "--rule", "0"),
		"tierctl flows --node "+node+" --policy "+denyPolicy+" --direction ingress --rule 0", nil)
	rule := 0
	flows, err := agentquery.NewClient(tf.AgentSockets[node]).Flows(context.Background(), agentquery.FlowFilter{Policy: denyPolicy, Direction: string(model.DirectionIn), Rule: &rule})
	if err != nil {
		tb.Fatal(err)
	}
	cookies := map[string]bool{}
	for _, f := range flows.Flows {
		cookies[f.Cookie] = true
	}
	if len(cookies) == 0 {
		tb.Fatalf("node %s has no flows for %s ingress rule 0", node, denyPolicy)
	}
	var sorted []string
	for c := range cookies {
		sorted = append(sorted, c)
	}
	sort.Strings(sorted)
	var bridge string
	for _, n := range tf.Bed.Nodes {
		if n.Name == node {
			bridge = n.Bridge.Name
		}
	}
	for _, c := range sorted {
		show(tb, "ovs-ofctl", []string{"-O", "OpenFlow13", "dump-flows", bridge, "cookie=" + c + "/-1"},
			"OVS_RUNDIR="+tf.Bed.OVS.Dir+" ovs-ofctl -O OpenFlow13 dump-flows "+bridge+" cookie="+c+"/-1",
			[]string{"OVS_RUNDIR=" + tf.Bed.OVS.Dir})
	}
	return tf
}

func podNode(pods []framework.Pod, name string) string {
	for _, p := range pods {
		if p.String() == name {
			return p.Node
		}
	}
	return ""
}

// showMatrix probes, prints the grid and checks it against explain.
func showMatrix(tb testing.TB, tf *framework.Tierflow, pods []framework.Pod) {
	built, err := tf.WaitRealized(2 * time.Minute)
	if err != nil {
		tb.Fatal(err)
	}
	probed := tf.Probe(pods, demoPorts, framework.ProbeNetns)
	expected, err := framework.Expected(built, pods, demoPorts)
	if err != nil {
		tb.Fatal(err)
	}
	// An answer slower than the probe timeout on a busy machine is not a
	// deny: such cells are probed again with a longer timeout.
	rechecked := tf.Recheck(pods, probed, expected, framework.ProbeNetns)
	fmt.Println()
	fmt.Print(framework.Grid(pods, demoPorts, probed))
	for _, c := range rechecked {
		fmt.Println("    rechecked (slow answer): " + c)
	}
	if diffs := framework.Compare(probed, expected); len(diffs) > 0 {
		tb.Fatalf("the datapath and explain disagree on %d cells:\n  %s", len(diffs), strings.Join(diffs, "\n  "))
	}
	fmt.Printf("\n    all %d cells agree with tierctl explain\n", len(probed))
}

// show prints a command line and its output.
func show(tb testing.TB, bin string, args []string, display string, env []string) {
	fmt.Printf("\n    $ %s\n", display)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("    " + l)
	}
	if err != nil {
		tb.Fatalf("%s: %v", display, err)
	}
}

// writeState writes DIR/state.json in tierflow-testbed's format, so that
// `make testbed-down` finds and stops this process, and DIR/demo.env.
func writeState(dir string, tf *framework.Tierflow) error {
	env := filepath.Join(dir, "demo.env")
	if err := tf.WriteEnv(env, filepath.Join(dir, "kubeconfig")); err != nil {
		return err
	}
	st := tf.Bed.State(os.Getpid())
	tf.Record(&st, env)
	return testbed.WriteState(dir, st)
}

func printUsage(dir string, tf *framework.Tierflow) {
	step("The cluster stays up (pid "+fmt.Sprint(os.Getpid())+")",
		"use it from a shell:",
		"  source "+filepath.Join(dir, "demo.env")+"   # KUBECONFIG, PATH (kubectl, tierctl), OVS_RUNDIR, TIERCTL_* for tierctl",
		"  kubectl get pods -A -o wide",
		"  kubectl exec -n gryffindor harry -- /agnhost connect "+"<POD-IP>:80 --timeout=2s --protocol=tcp",
		"  tierctl explain --src ravenclaw/luna --dst hufflepuff/cedric --port UDP/80",
		"  tierctl flows --node node-1 --policy NetworkPolicy/hufflepuff/friends-only",
		"  ovs-ofctl -O OpenFlow13 dump-flows "+tf.Bed.Nodes[0].Bridge.Name,
		"stop it with: make testbed-down")
}
