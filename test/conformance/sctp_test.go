package conformance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/agent/runtime/query"
	"github.com/tierflow/tierflow/test/conformance"
	"github.com/tierflow/tierflow/test/e2e/framework"
)

// sctpManifests are the upstream suites' SCTP policies, by suite version,
// relative to the module's conformance/ directory, and how many of the
// test's subtests (sctpEgressSteps / sctpIngressSteps, in order) run
// against each: Admin-tier tests run all six, Baseline-tier tests the
// first four (they have no Pass action).
var sctpManifests = map[string][]struct {
	file     string
	ingress  bool
	subtests int
}{
	"v0.1.7": {
		{"base/admin_network_policy/standard-egress-sctp-rules.yaml", false, 6},
		{"base/admin_network_policy/standard-ingress-sctp-rules.yaml", true, 6},
		{"base/baseline_admin_network_policy/standard-egress-sctp-rules.yaml", false, 4},
		{"base/baseline_admin_network_policy/standard-ingress-sctp-rules.yaml", true, 4},
	},
	"v0.2.0": {
		{"base/admin_tier/standard-egress-sctp-rules.yaml", false, 6},
		{"base/admin_tier/standard-ingress-sctp-rules.yaml", true, 6},
		{"base/baseline_tier/standard-egress-sctp-rules.yaml", false, 4},
		{"base/baseline_tier/standard-ingress-sctp-rules.yaml", true, 4},
	},
}

// sctpProbe is one PokeServer of an upstream SCTP test: client pod, server
// pod, port, whether the connection must succeed.
type sctpProbe struct {
	client, server string // NAMESPACE-SUFFIX/POD
	port           int
	allowed        bool
}

// sctpStep is one subtest of an upstream SCTP test: the two rules it swaps
// in the policy first (if any; the swaps accumulate, as in the suite, where
// each subtest patches the policy the previous one left), then its probes.
type sctpStep struct {
	subtest string
	swap    []int
	probes  []sctpProbe
}

// The subtests of the upstream SCTP tests, in the order they run, as
// written in both suites' tests/*-sctp-rules.go (v0.1.7 and v0.2.0 make the
// same probes and patches): egress tests probe from ravenclaw, ingress
// tests into ravenclaw, port 9003 from the first client and 9005 from the
// second.
var (
	sctpEgressSteps = []sctpStep{
		{"allow-egress; rule ordering", nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "gryffindor/harry-potter-0", 9003, true},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-0", 9005, true}}},
		{"allow-egress at the specified port", nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "hufflepuff/cedric-diggory-1", 9003, true},
			{"ravenclaw/luna-lovegood-1", "hufflepuff/cedric-diggory-1", 9005, false}}},
		{"deny-egress; rule ordering", []int{0, 1}, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "gryffindor/harry-potter-1", 9003, false},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-1", 9005, false}}},
		{"deny-egress at the specified port", nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "slytherin/draco-malfoy-0", 9003, false},
			{"ravenclaw/luna-lovegood-1", "slytherin/draco-malfoy-0", 9005, true}}},
		{"pass-egress; rule ordering", []int{0, 2}, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "gryffindor/harry-potter-1", 9003, true},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-1", 9005, true}}},
		{"pass-egress at the specified port", []int{3, 4}, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "slytherin/draco-malfoy-0", 9003, true},
			{"ravenclaw/luna-lovegood-1", "slytherin/draco-malfoy-0", 9005, true}}},
	}
	sctpIngressSteps = []sctpStep{
		{"allow-ingress; rule ordering", nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-0", 9003, true},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-0", 9005, true}}},
		{"allow-ingress at the specified port", nil, []sctpProbe{
			{"hufflepuff/cedric-diggory-0", "ravenclaw/luna-lovegood-1", 9003, true},
			{"hufflepuff/cedric-diggory-1", "ravenclaw/luna-lovegood-1", 9005, false}}},
		{"deny-ingress; rule ordering", []int{0, 1}, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-1", 9003, false},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-1", 9005, false}}},
		{"deny-ingress at the specified port", nil, []sctpProbe{
			{"slytherin/draco-malfoy-0", "ravenclaw/luna-lovegood-0", 9003, false},
			{"slytherin/draco-malfoy-1", "ravenclaw/luna-lovegood-0", 9005, true}}},
		{"pass-ingress; rule ordering", []int{0, 2}, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-1", 9003, true},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-1", 9005, true}}},
		{"pass-ingress at the specified port", []int{3, 4}, []sctpProbe{
			{"slytherin/draco-malfoy-0", "ravenclaw/luna-lovegood-0", 9003, true},
			{"slytherin/draco-malfoy-1", "ravenclaw/luna-lovegood-0", 9005, true}}},
	}
)

const housePrefix = "network-policy-conformance-"

// checkSCTPByTrace replays each upstream SCTP test against the houses the
// last suite left in place: it applies the test's manifest, unmodified,
// then runs its subtests in order — the rule swaps each subtest patches
// into the policy, then its probes — waiting until every change is
// realized, and checks every probe with the agents' ofproto/trace of the
// connection's first packet: dropped by the client node's bridge (egress)
// or, when the server is elsewhere, by the server node's bridge (ingress),
// or delivered (see traceSCTP). Every probe must agree with what the
// upstream test expects. It returns how many probes it traced and how many
// agreed.
func checkSCTPByTrace(t *testing.T, tf *framework.Tierflow) (traced, agreed int) {
	for _, s := range conformance.Suites {
		dir, err := s.ModuleDir(context.Background())
		if err != nil {
			t.Errorf("SCTP trace: %v", err)
			continue
		}
		for _, m := range sctpManifests[s.Version] {
			name := s.Version + "/" + filepath.Base(filepath.Dir(m.file)) + "/" + filepath.Base(m.file)
			path := filepath.Join(dir, "conformance", m.file)
			if _, err := tf.Kubectl("", "apply", "-f", path); err != nil {
				t.Errorf("SCTP trace %s: %v", name, err)
				continue
			}
			steps := sctpEgressSteps
			direction := "egress"
			if m.ingress {
				steps, direction = sctpIngressSteps, "ingress"
			}
		subtests:
			for _, step := range steps[:m.subtests] {
				if step.swap != nil {
					if err := swapRules(tf, path, direction, step.swap[0], step.swap[1]); err != nil {
						t.Errorf("SCTP trace %s, %s: %v", name, step.subtest, err)
						break subtests
					}
				}
				if _, err := tf.WaitRealized(90 * time.Second); err != nil {
					t.Errorf("SCTP trace %s, %s: %v", name, step.subtest, err)
					break subtests
				}
				for _, p := range step.probes {
					traced++
					allowed, detail, err := traceSCTP(tf, p)
					switch {
					case err != nil:
						t.Errorf("SCTP trace %s, %s: %s -> %s:%d: %v", name, step.subtest, p.client, p.server, p.port, err)
					case allowed != p.allowed:
						t.Errorf("SCTP trace %s, %s: %s -> %s:%d allowed=%v, upstream test wants %v\n%s", name, step.subtest, p.client, p.server, p.port, allowed, p.allowed, detail)
					default:
						agreed++
						t.Logf("SCTP trace %s, %s: %s -> %s:%d allowed=%v as the upstream test wants", name, step.subtest, p.client, p.server, p.port, allowed)
					}
				}
			}
			if _, err := tf.Kubectl("", "delete", "-f", path, "--wait"); err != nil {
				t.Errorf("SCTP trace %s: %v", name, err)
			}
			if _, err := tf.WaitRealized(90 * time.Second); err != nil {
				t.Errorf("SCTP trace %s: after delete: %v", name, err)
			}
		}
	}
	return traced, agreed
}

// swapRules swaps two rules of a direction (egress, ingress) in the policy
// a manifest defines, as the upstream subtests patch it.
func swapRules(tf *framework.Tierflow, manifest, direction string, i, j int) error {
	out, err := tf.Kubectl("", "get", "-f", manifest, "-o", "json")
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		return fmt.Errorf("policy of %s: %v", manifest, err)
	}
	spec, _ := obj["spec"].(map[string]any)
	rules, _ := spec[direction].([]any)
	if i >= len(rules) || j >= len(rules) {
		return fmt.Errorf("policy %v has %d %s rules, cannot swap %d and %d", obj["metadata"], len(rules), direction, i, j)
	}
	rules[i], rules[j] = rules[j], rules[i]
	patched, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = tf.Kubectl(string(patched), "replace", "-f", "-")
	return err
}

// traceSCTP traces the first packet of an SCTP connection from client to
// server:port and says whether it reaches the server.
//
// Same node: the client node's bridge decides both directions; the packet
// is allowed when that trace does not drop it.
//
// Across nodes the packet must pass two bridges. The client node's trace
// follows the packet out of its uplink (a patch port) into the fabric
// bridge and on, flooded by NORMAL (a trace learns no MACs), into every
// other node's bridge, so its last "Datapath actions" line is whichever
// flooded copy ovs-vswitchd traced last, not a verdict. The client node's
// egress verdict is instead whether the packet left that bridge at all:
// its only way out to another node is the uplink, and the trace shows the
// fabric bridge exactly when it did (a denied packet ends in the
// ConntrackCommit table's drop before any output). The server node's
// verdict (ingress policy, delivery to the pod) comes from a second trace
// on the server node's bridge of the same packet arriving by its uplink,
// which ends in that bridge (the output is the local pod's port).
func traceSCTP(tf *framework.Tierflow, p sctpProbe) (allowed bool, detail string, err error) {
	client, err := housePod(tf, p.client)
	if err != nil {
		return false, "", err
	}
	server, err := housePod(tf, p.server)
	if err != nil {
		return false, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	egress, err := agentClient(tf, client.Spec.NodeName).Trace(ctx, query.TraceRequest{
		Src: client.Namespace + "/" + client.Name, Dst: server.Status.PodIP, Protocol: "SCTP", Port: p.port})
	if err != nil {
		return false, "", fmt.Errorf("trace on %s: %w", client.Spec.NodeName, err)
	}
	detail = fmt.Sprintf("%s: %s\n%s", client.Spec.NodeName, egress.Flow, egress.Output)
	if client.Spec.NodeName == server.Spec.NodeName {
		return !egress.Dropped, detail, nil
	}
	if !leftByUplink(egress, tf.Bed.Fabric.Name) {
		return false, "dropped on the client's node " + detail, nil
	}
	ingress, err := agentClient(tf, server.Spec.NodeName).Trace(ctx, query.TraceRequest{
		Src: client.Status.PodIP, Dst: server.Status.PodIP, Protocol: "SCTP", Port: p.port})
	if err != nil {
		return false, detail, fmt.Errorf("trace on %s: %w", server.Spec.NodeName, err)
	}
	detail += fmt.Sprintf("\n%s: %s\n%s", server.Spec.NodeName, ingress.Flow, ingress.Output)
	return !ingress.Dropped, detail, nil
}

// leftByUplink reports whether a trace through a node bridge sent the
// packet out of the node's uplink: ofproto/trace follows a patch port into
// its peer, so the fabric bridge's section appears exactly then.
func leftByUplink(tr *query.Trace, fabric string) bool {
	return strings.Contains(tr.Output, fmt.Sprintf("bridge(%q)", fabric))
}

func housePod(tf *framework.Tierflow, ref string) (*corev1.Pod, error) {
	ns, name := filepath.Split(ref)
	ns = housePrefix + filepath.Clean(ns)
	pod, err := tf.Bed.Cluster.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName == "" || pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s/%s not running (node %q, IP %q)", ns, name, pod.Spec.NodeName, pod.Status.PodIP)
	}
	return pod, nil
}

func agentClient(tf *framework.Tierflow, node string) *query.Client {
	return query.NewClient(tf.AgentSockets[node])
}
