package testbed_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/testbed"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

// TestCommandUpDown runs what `make testbed-up` and `make testbed-down` run:
// the test bed comes up in the background with tierflow on it (controller
// and one agent per node, recorded in state.json), a NetworkPolicy applied
// with the bed's kubectl is enforced on real packets between pods on two
// of its three nodes and lifted when deleted, tierctl (through the
// tierflow.env the bed writes) lists it, checks the flows and traces the
// verdict across nodes, and `down` leaves no namespace, interface or
// process behind.
func TestCommandUpDown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tierflow-testbed")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/tierflow/tierflow/test/testbed/cmd/tierflow-testbed").CombinedOutput(); err != nil {
		t.Fatalf("build tierflow-testbed: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "bed")
	down := func() (string, error) {
		out, err := exec.Command(bin, "down", "--dir", dir).CombinedOutput()
		return string(out), err
	}
	up := exec.Command(bin, "up", "--dir", dir, "--nodes", "3")
	out, err := up.CombinedOutput()
	if err != nil {
		_, _ = down()
		t.Fatalf("tierflow-testbed up: %v\n%s", err, out)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_, _ = down()
		}
	})
	if !strings.Contains(string(out), "export KUBECONFIG="+filepath.Join(dir, "kubeconfig")) || !strings.Contains(string(out), "tierflow: controller query API") {
		t.Errorf("up does not print the kubeconfig and tierflow's address:\n%s", out)
	}

	st, err := testbed.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tierflow == nil || len(st.Tierflow.AgentSockets) != 3 {
		t.Fatalf("state.json does not record tierflow with 3 agents: %+v", st.Tierflow)
	}
	for node, sock := range st.Tierflow.AgentSockets {
		status, err := agentquery.NewClient(sock).Status(context.Background())
		if err != nil || !status.Ready {
			t.Errorf("agent of %s: ready=%v, %v", node, status != nil && status.Ready, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	server := runPod(t, kube, "server", st.Nodes[0].Name, map[string]string{"app": "server"}, "serve-hostname", "--tcp", "--http=false", "--port=80")
	client := runPod(t, kube, "client", st.Nodes[2].Name, nil, "pause")
	connect := func() error {
		cmd := exec.Command(st.Kubectl, "--kubeconfig="+filepath.Join(dir, "kubeconfig"), "exec", client.Name, "--",
			"/agnhost", "connect", net.JoinHostPort(server.Status.PodIP, "80"), "--timeout=2s", "--protocol=tcp")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	waitFor(t, 60*time.Second, "client reaches server across nodes", func() bool { return connect() == nil })

	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-server-ingress", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	if _, err := kube.NetworkingV1().NetworkPolicies("default").Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the NetworkPolicy cuts client -> server", func() bool { return connect() != nil })
	if err := connect(); err == nil || !strings.Contains(err.Error(), "TIMEOUT") {
		t.Errorf("denied probe: want a TIMEOUT (silent drop), got %v", err)
	}
	// What the operator does next: source tierflow.env and ask tierctl.
	tierctl := func(args string) (string, error) {
		out, err := exec.Command("bash", "-c", "source \"$1\" && "+args, "bash", st.Tierflow.EnvFile).CombinedOutput()
		return string(out), err
	}
	if out, err := tierctl("tierctl get policies && tierctl flows --node " + st.Nodes[0].Name + " --check"); err != nil || !strings.Contains(out, "deny-server-ingress") {
		t.Errorf("tierctl with tierflow.env: %v\n%s", err, out)
	}
	// The trace crosses the fabric, which floods the packet to the third
	// node too: the verdict is the server node's.
	trace := "tierctl trace --src default/client --dst default/server --port TCP/80 -o json"
	if out, err := tierctl(trace); err != nil || !strings.Contains(out, `"verdict": "Deny"`) {
		t.Errorf("tierctl trace while denied: %v\n%s", err, out)
	}
	if err := kube.NetworkingV1().NetworkPolicies("default").Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "client reaches server again after the delete", func() bool { return connect() == nil })
	if out, err := tierctl(trace); err != nil || !strings.Contains(out, `"verdict": "Allow"`) {
		t.Errorf("tierctl trace once allowed: %v\n%s", err, out)
	}

	out2, err := down()
	stopped = true
	if err != nil || !strings.Contains(out2, "no namespace, interface or process left") {
		t.Fatalf("tierflow-testbed down: %v\n%s", err, out2)
	}
	var netns, links []string
	for _, p := range []*corev1.Pod{server, client} {
		netns = append(netns, noderuntime.NetnsName(p.UID))
		links = append(links, cni.HostVethName(string(p.UID), "eth0"))
	}
	links = append(links, st.Fabric)
	for _, n := range st.Nodes {
		links = append(links, n.Bridge)
	}
	assertNothingLeft(t, dir, netns, links)
	if st.OVSDir != "" {
		assertNothingLeft(t, st.OVSDir, nil, nil)
	}
}

// runPod creates an agnhost pod on node and returns it once Running with
// an IP.
func runPod(t *testing.T, kube kubernetes.Interface, name, node string, labels map[string]string, args ...string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: agnhostImage, Args: args}}},
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	waitFor(t, 90*time.Second, "pod "+name+" Running", func() bool {
		p, err := kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			running = p
			return true
		}
		return false
	})
	if _, err := os.Stat("/var/run/netns/" + noderuntime.NetnsName(running.UID)); err != nil {
		t.Fatalf("pod %s namespace: %v", name, err)
	}
	return running
}
