package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/conformance"
	"github.com/tierflow/tierflow/test/e2e/framework"
)

// sctpTests are the upstream tests that probe SCTP, by suite version:
// the manifest each applies (relative to the module's conformance/
// directory) and its subtests, in the order they run. Admin-tier tests
// run all six subtests of a kind, Baseline-tier tests the first four
// (they have no Pass action).
var sctpTests = map[string][]struct {
	file  string
	steps []sctpStep
}{
	// tests/*-experimental-egress-rules.go, node peers: the one SCTP probe
	// is expected to be denied (v0.2.0's manifests are templates).
	"v0.1.7": {
		{"base/admin_network_policy/experimental-egress-selector-rules.yaml", nodePeerSteps(9003)},
		{"base/baseline_admin_network_policy/experimental-egress-selector-rules.yaml", nodePeerSteps(9003)},
		{"base/admin_network_policy/standard-egress-sctp-rules.yaml", sctpEgressSteps},
		{"base/admin_network_policy/standard-ingress-sctp-rules.yaml", sctpIngressSteps},
		{"base/admin_network_policy/standard-gress-rules-combined.yaml", gressSteps},
		{"base/admin_network_policy/standard-egress-inline-cidr-rules.yaml", inlineCIDRSteps},
		{"base/baseline_admin_network_policy/standard-egress-sctp-rules.yaml", sctpEgressSteps[:4]},
		{"base/baseline_admin_network_policy/standard-ingress-sctp-rules.yaml", sctpIngressSteps[:4]},
		{"base/baseline_admin_network_policy/standard-gress-rules-combined.yaml", gressSteps[:4]},
		{"base/baseline_admin_network_policy/standard-egress-inline-cidr-rules.yaml", inlineCIDRSteps},
	},
	"v0.2.0": {
		{"base/admin_tier/experimental-egress-selector-rules.yaml", nodePeerSteps(hostNetworkPorts[6])},
		{"base/baseline_tier/experimental-egress-selector-rules.yaml", nodePeerSteps(hostNetworkPorts[6])},
		{"base/admin_tier/standard-egress-sctp-rules.yaml", sctpEgressSteps},
		{"base/admin_tier/standard-ingress-sctp-rules.yaml", sctpIngressSteps},
		{"base/admin_tier/standard-gress-rules-combined.yaml", gressSteps},
		{"base/admin_tier/standard-egress-inline-cidr-rules.yaml", inlineCIDRSteps},
		{"base/baseline_tier/standard-egress-sctp-rules.yaml", sctpEgressSteps[:4]},
		{"base/baseline_tier/standard-ingress-sctp-rules.yaml", sctpIngressSteps[:4]},
		{"base/baseline_tier/standard-gress-rules-combined.yaml", gressSteps[:4]},
		{"base/baseline_tier/standard-egress-inline-cidr-rules.yaml", inlineCIDRSteps},
	},
}

// sctpProbe is one SCTP PokeServer of an upstream test: client pod, server
// pod, port, whether the connection must succeed.
type sctpProbe struct {
	client, server string // NAMESPACE-SUFFIX/POD
	port           int
	allowed        bool
}

// ruleSwap swaps two rules of a direction ("egress", "ingress").
type ruleSwap struct {
	direction string
	i, j      int
}

// sctpStep is one subtest of an upstream test: how it patches the policy
// first (the patches accumulate, as in the suite, where each subtest
// patches the policy the previous one left), then its SCTP probes (its TCP
// and UDP probes ran with real packets in the suite).
type sctpStep struct {
	subtest string
	swaps   []ruleSwap
	// allowTo: an Allow (v1alpha1) / Accept (v1alpha2) egress rule to
	// these pods' addresses (/32 or /128) is put before the others.
	allowTo []string
	probes  []sctpProbe
}

func swap(direction string, i, j int) []ruleSwap { return []ruleSwap{{direction, i, j}} }

func swapBoth(i, j int) []ruleSwap { return []ruleSwap{{"egress", i, j}, {"ingress", i, j}} }

// The subtests, as written in both suites' tests/*.go (v0.1.7 and v0.2.0
// make the same patches and SCTP probes).
var (
	// tests/*-standard-egress-sctp-rules.go: from ravenclaw, port 9003
	// from the first client and 9005 from the second.
	sctpEgressSteps = []sctpStep{
		{"allow-egress; rule ordering", nil, nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "gryffindor/harry-potter-0", 9003, true},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-0", 9005, true}}},
		{"allow-egress at the specified port", nil, nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "hufflepuff/cedric-diggory-1", 9003, true},
			{"ravenclaw/luna-lovegood-1", "hufflepuff/cedric-diggory-1", 9005, false}}},
		{"deny-egress; rule ordering", swap("egress", 0, 1), nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "gryffindor/harry-potter-1", 9003, false},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-1", 9005, false}}},
		{"deny-egress at the specified port", nil, nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "slytherin/draco-malfoy-0", 9003, false},
			{"ravenclaw/luna-lovegood-1", "slytherin/draco-malfoy-0", 9005, true}}},
		{"pass-egress; rule ordering", swap("egress", 0, 2), nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "gryffindor/harry-potter-1", 9003, true},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-1", 9005, true}}},
		{"pass-egress at the specified port", swap("egress", 3, 4), nil, []sctpProbe{
			{"ravenclaw/luna-lovegood-0", "slytherin/draco-malfoy-0", 9003, true},
			{"ravenclaw/luna-lovegood-1", "slytherin/draco-malfoy-0", 9005, true}}},
	}
	// tests/*-standard-ingress-sctp-rules.go: into ravenclaw.
	sctpIngressSteps = []sctpStep{
		{"allow-ingress; rule ordering", nil, nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-0", 9003, true},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-0", 9005, true}}},
		{"allow-ingress at the specified port", nil, nil, []sctpProbe{
			{"hufflepuff/cedric-diggory-0", "ravenclaw/luna-lovegood-1", 9003, true},
			{"hufflepuff/cedric-diggory-1", "ravenclaw/luna-lovegood-1", 9005, false}}},
		{"deny-ingress; rule ordering", swap("ingress", 0, 1), nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-1", 9003, false},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-1", 9005, false}}},
		{"deny-ingress at the specified port", nil, nil, []sctpProbe{
			{"slytherin/draco-malfoy-0", "ravenclaw/luna-lovegood-0", 9003, false},
			{"slytherin/draco-malfoy-1", "ravenclaw/luna-lovegood-0", 9005, true}}},
		{"pass-ingress; rule ordering", swap("ingress", 0, 2), nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-1", 9003, true},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-1", 9005, true}}},
		{"pass-ingress at the specified port", swap("ingress", 3, 4), nil, []sctpProbe{
			{"slytherin/draco-malfoy-0", "ravenclaw/luna-lovegood-0", 9003, true},
			{"slytherin/draco-malfoy-1", "ravenclaw/luna-lovegood-0", 9005, true}}},
	}
	// tests/*-standard-gress-rules.go: each subtest patches egress and
	// ingress alike and probes both ways.
	gressSteps = []sctpStep{
		{"allow-gress", nil, nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-0", 9003, true},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-0", 9003, true}}},
		{"allow-gress at the specified ports", nil, nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "hufflepuff/cedric-diggory-1", 9003, true},
			{"gryffindor/harry-potter-1", "hufflepuff/cedric-diggory-1", 9005, false},
			{"hufflepuff/cedric-diggory-0", "gryffindor/harry-potter-1", 9003, true},
			{"hufflepuff/cedric-diggory-1", "gryffindor/harry-potter-1", 9005, false}}},
		{"deny-gress", swapBoth(0, 1), nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-1", 9003, false},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-1", 9003, false}}},
		{"deny-gress at the specified ports", nil, nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "slytherin/draco-malfoy-0", 9003, false},
			{"gryffindor/harry-potter-1", "slytherin/draco-malfoy-0", 9005, true},
			{"slytherin/draco-malfoy-0", "gryffindor/harry-potter-0", 9003, false},
			{"slytherin/draco-malfoy-1", "gryffindor/harry-potter-0", 9005, true}}},
		{"pass-gress", swapBoth(0, 2), nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "ravenclaw/luna-lovegood-0", 9003, true},
			{"ravenclaw/luna-lovegood-1", "gryffindor/harry-potter-0", 9003, true}}},
		{"pass-gress at the specified ports", swapBoth(3, 4), nil, []sctpProbe{
			{"gryffindor/harry-potter-0", "slytherin/draco-malfoy-0", 9003, true},
			{"gryffindor/harry-potter-1", "slytherin/draco-malfoy-0", 9005, true},
			{"slytherin/draco-malfoy-0", "gryffindor/harry-potter-0", 9003, true},
			{"slytherin/draco-malfoy-1", "gryffindor/harry-potter-0", 9005, true}}},
	}
)

// v0.2.0's manifests are templates ({{ index .HostNetworkPorts N }}); its
// suite fills them with HostNetworkPorts, by default the eight ports from
// 34345 (utils/suite: HostNetworkPortRangeStart, hostNetworkPortsAmount),
// which tierflow runs it with.
var hostNetworkPorts = []int{34345, 34346, 34347, 34348, 34349, 34350, 34351, 34352}

// nodePeerSteps is the SCTP probe of the node-peer tests
// (tests/*-experimental-egress-rules.go): gryffindor to the hostNetwork
// pod centaur-1, i.e. to its node's address, denied.
func nodePeerSteps(port int) []sctpStep {
	return []sctpStep{{"deny-egress to node peers", nil, nil, []sctpProbe{
		{"gryffindor/harry-potter-1", "forbidden-forrest/centaur-1", port, false}}}}
}

var (
	// tests/*-standard-egress-inline-cidr-rules.go: from gryffindor.
	inlineCIDRSteps = []sctpStep{
		{"deny-egress to CIDR peers", nil, nil, []sctpProbe{
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-0", 9003, false},
			{"gryffindor/harry-potter-1", "hufflepuff/cedric-diggory-0", 9003, false},
			{"gryffindor/harry-potter-1", "slytherin/draco-malfoy-0", 9003, true}}},
		{"allow-egress to CIDR peers", nil, []string{"ravenclaw/luna-lovegood-0", "hufflepuff/cedric-diggory-0"}, []sctpProbe{
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-0", 9003, true},
			{"gryffindor/harry-potter-1", "hufflepuff/cedric-diggory-0", 9003, true},
			{"gryffindor/harry-potter-1", "ravenclaw/luna-lovegood-1", 9003, false},
			{"gryffindor/harry-potter-1", "hufflepuff/cedric-diggory-1", 9003, false}}},
	}
)

// checkSCTPByTrace replays each upstream test that probes SCTP against the
// houses the last suite left in place: it applies the test's manifest,
// unmodified, then runs its subtests in order — the changes each subtest
// patches into the policy, then its SCTP probes — waiting until every
// change is realized, and checks every probe with the agents' ofproto/trace of the
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
		for _, m := range sctpTests[s.Version] {
			name := s.Version + "/" + filepath.Base(filepath.Dir(m.file)) + "/" + filepath.Base(m.file)
			path, err := renderManifest(filepath.Join(dir, "conformance", m.file), t.TempDir())
			if err != nil {
				t.Errorf("SCTP trace %s: %v", name, err)
				continue
			}
			if _, err := tf.Kubectl("", "apply", "-f", path); err != nil {
				t.Errorf("SCTP trace %s: %v", name, err)
				continue
			}
		subtests:
			for _, step := range m.steps {
				if err := patchPolicy(tf, path, step); err != nil {
					t.Errorf("SCTP trace %s, %s: %v", name, step.subtest, err)
					break subtests
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

// renderManifest returns the manifest's path, or for a template (v0.2.0's
// node-peer manifests) the path of a copy rendered into dir as the suite
// renders it (utils/kubernetes.Applier: text/template with
// HostNetworkPorts).
func renderManifest(path, dir string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if !strings.Contains(string(data), "{{") {
		return path, nil
	}
	tmpl, err := template.New(filepath.Base(path)).Parse(string(data))
	if err != nil {
		return "", fmt.Errorf("template %s: %v", path, err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, struct{ HostNetworkPorts []int }{hostNetworkPorts}); err != nil {
		return "", fmt.Errorf("template %s: %v", path, err)
	}
	rendered := filepath.Join(dir, filepath.Base(path))
	return rendered, os.WriteFile(rendered, out.Bytes(), 0o644)
}

// patchPolicy makes a subtest's changes to the policy a manifest defines:
// rule swaps, then an allow rule to given pods' addresses put first. Like
// upstream's own patches it sends a merge patch of the spec without a
// resourceVersion: the controller writes the policy's status at any time,
// and a replace of the object read before would then fail with Conflict.
func patchPolicy(tf *framework.Tierflow, manifest string, step sctpStep) error {
	if step.swaps == nil && step.allowTo == nil {
		return nil
	}
	out, err := tf.Kubectl("", "get", "-f", manifest, "-o", "json")
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		return fmt.Errorf("policy of %s: %v", manifest, err)
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return fmt.Errorf("policy of %s has no spec", manifest)
	}
	for _, sw := range step.swaps {
		rules, _ := spec[sw.direction].([]any)
		if sw.i >= len(rules) || sw.j >= len(rules) {
			return fmt.Errorf("policy %v has %d %s rules, cannot swap %d and %d", obj["metadata"], len(rules), sw.direction, sw.i, sw.j)
		}
		rules[sw.i], rules[sw.j] = rules[sw.j], rules[sw.i]
	}
	if step.allowTo != nil {
		action := "Allow" // v1alpha1 AdminNetworkPolicy, BaselineAdminNetworkPolicy
		if strings.HasSuffix(fmt.Sprint(obj["apiVersion"]), "/v1alpha2") {
			action = "Accept" // v1alpha2 ClusterNetworkPolicy
		}
		var networks []any
		for _, ref := range step.allowTo {
			pod, err := housePod(tf, ref)
			if err != nil {
				return err
			}
			mask := "/32"
			if strings.Contains(pod.Status.PodIP, ":") {
				mask = "/128"
			}
			networks = append(networks, pod.Status.PodIP+mask)
		}
		rule := map[string]any{"name": "allow-egress-to-specific-podIPs", "action": action,
			"to": []any{map[string]any{"networks": networks}}}
		rules, _ := spec["egress"].([]any)
		spec["egress"] = append([]any{rule}, rules...)
	}
	patch, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	_, err = tf.Kubectl("", "patch", "-f", manifest, "--type=merge", "-p", string(patch))
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
// its only way out to another node is the uplink, and the agent's trace
// reports LeftBridge exactly when it did (a denied packet ends in the
// ConntrackCommit table's drop before any output), so it is dropped when
// it did not leave and was output nowhere. On the encap bed the packet
// leaves through the tunnel (or, for a node address, the gateway): the
// trace ends there, and it is dropped exactly when it was output nowhere.
// The server node's verdict (ingress policy, delivery to the pod) comes
// from a second trace on the server node's bridge of the same packet
// arriving by its uplink (or its tunnel, from the client node's tunnel
// endpoint), which ends in that bridge (the output is the local pod's
// port). A hostNetwork server (node peers) sits in the host: the client
// node's egress verdict is the whole verdict.
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
	egress, err := agentClient(tf, client.Spec.NodeName).Trace(ctx, agentquery.TraceRequest{
		Src: client.Namespace + "/" + client.Name, Dst: server.Status.PodIP, Protocol: "SCTP", Port: p.port})
	if err != nil {
		return false, "", fmt.Errorf("trace on %s: %w", client.Spec.NodeName, err)
	}
	detail = fmt.Sprintf("%s: %s\n%s", client.Spec.NodeName, egress.Flow, egress.Output)
	if server.Spec.HostNetwork {
		// A node address: the packet leaves by the uplink (or the
		// gateway) for the host, where no bridge of ours decides anything.
		return !egress.Dropped, detail, nil
	}
	if client.Spec.NodeName == server.Spec.NodeName {
		return !egress.Dropped, detail, nil
	}
	if egress.Dropped {
		return false, "dropped on the client's node " + detail, nil
	}
	ingress, err := agentClient(tf, server.Spec.NodeName).Trace(ctx, agentquery.TraceRequest{
		Src: client.Status.PodIP, Dst: server.Status.PodIP, Protocol: "SCTP", Port: p.port})
	if err != nil {
		return false, detail, fmt.Errorf("trace on %s: %w", server.Spec.NodeName, err)
	}
	detail += fmt.Sprintf("\n%s: %s\n%s", server.Spec.NodeName, ingress.Flow, ingress.Output)
	return !ingress.Dropped, detail, nil
}

func housePod(tf *framework.Tierflow, ref string) (*corev1.Pod, error) {
	ns, name := filepath.Split(ref)
	ns = conformance.HousePrefix + filepath.Clean(ns)
	pod, err := tf.Bed.Cluster.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName == "" || pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s/%s not running (node %q, IP %q)", ns, name, pod.Spec.NodeName, pod.Status.PodIP)
	}
	return pod, nil
}

func agentClient(tf *framework.Tierflow, node string) *agentquery.Client {
	return agentquery.NewClient(tf.AgentSockets[node])
}
