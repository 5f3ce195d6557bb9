package testbed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/test/testbed"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.53"

func TestSimulatedCluster(t *testing.T) {
	var dir string
	var netnsSeen, linksSeen []string
	t.Run("cluster", func(t *testing.T) {
		tb := testbed.Start(t, testbed.Options{Nodes: 3, IPv6: true, NormalFlows: true})
		dir = tb.Dir
		linksSeen = append(linksSeen, tb.NodeInterface, tb.Fabric.Name)
		for _, n := range tb.Nodes {
			linksSeen = append(linksSeen, n.Bridge.Name)
		}
		pods := exerciseCluster(t, tb)
		for _, p := range pods {
			netnsSeen = append(netnsSeen, noderuntime.NetnsName(p.UID))
			linksSeen = append(linksSeen, cni.HostVethName(string(p.UID), "eth0"))
		}
	})
	// The subtest's cleanup stopped the test bed: nothing may be left.
	if dir == "" {
		t.Fatal("test bed did not start")
	}
	assertNothingLeft(t, dir, netnsSeen, linksSeen)
}

// exerciseCluster runs the checks and returns every pod it saw.
func exerciseCluster(t *testing.T, tb *testbed.Testbed) []corev1.Pod {
	ctx := context.Background()
	kube := tb.Cluster.Kube
	tb.Cluster.CreateNamespace(t, "x", nil)

	replicas := int32(3)
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "x"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					// Spread so that probes cross nodes.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					}},
					Containers: []corev1.Container{
						{Name: "tcp-80", Image: agnhostImage, Command: []string{"/agnhost", "serve-hostname"}, Args: []string{"--tcp", "--http=false", "--port", "80"},
							Ports: []corev1.ContainerPort{{ContainerPort: 80, Name: "serve-80-tcp"}}},
						{Name: "udp-81", Image: agnhostImage, Command: []string{"/agnhost", "serve-hostname"}, Args: []string{"--udp", "--http=false", "--port", "81"},
							Ports: []corev1.ContainerPort{{ContainerPort: 81, Protocol: corev1.ProtocolUDP}}},
						{Name: "porter", Image: agnhostImage, Args: []string{"porter"},
							Env: []corev1.EnvVar{{Name: "SERVE_PORT_8000", Value: "porter-8000"}}},
					},
				},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments("x").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services("x").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "x"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "client"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	client := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "x"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &two, ServiceName: "client", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "client"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					// A declared port no command serves still answers.
					{Name: "main", Image: agnhostImage, Args: []string{"pause"}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}},
					// As the network-policy-api conformance manifests write
					// them: shell-wrapped agnhost, and an SCTP porter the test
					// bed cannot serve (the pod must still become Ready).
					{Name: "wrapped-8081", Image: agnhostImage, Command: []string{"/bin/bash", "-c", "/agnhost serve-hostname --tcp --http=false --port 8081"}},
					{Name: "sctp-9003", Image: agnhostImage, Command: []string{"/bin/bash", "-c", "/agnhost porter"},
						Env: []corev1.EnvVar{{Name: "SERVE_SCTP_PORT_9003", Value: "foo"}}},
				}},
			},
		},
	}
	if _, err := kube.AppsV1().StatefulSets("x").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	webPods := waitRunning(t, tb, "x", "app=web", 3)
	clientPods := waitRunning(t, tb, "x", "app=client", 2)
	all := append(append([]corev1.Pod(nil), webPods...), clientPods...)
	nodesUsed := map[string]bool{}
	for _, p := range all {
		nodesUsed[p.Spec.NodeName] = true
		assertStatusMatchesNetns(t, tb, &p)
		assertOVSPort(t, tb, &p)
	}
	if len(nodesUsed) < 2 {
		t.Fatalf("pods all on %v; want them spread over nodes", nodesUsed)
	}

	client0 := podByName(t, clientPods, "client-0")
	client1 := podByName(t, clientPods, "client-1")

	// The upstream probe, unchanged, through kubectl exec.
	for _, w := range webPods {
		for _, probe := range []struct{ port, proto string }{{"80", "tcp"}, {"81", "udp"}, {"8000", "tcp"}} {
			res := tb.Exec("x", "client-0", "/agnhost", "connect", net.JoinHostPort(w.Status.PodIP, probe.port), "--timeout=3s", "--protocol="+probe.proto)
			if res.ExitCode != 0 || res.Stdout != "" || res.Stderr != "" {
				t.Errorf("client-0 (%s) → %s %s:%s/%s: exit %d, stdout %q, stderr %q",
					client0.Spec.NodeName, w.Name, w.Spec.NodeName, probe.port, probe.proto, res.ExitCode, res.Stdout, res.Stderr)
			}
		}
	}
	for _, w := range webPods {
		if len(w.Status.PodIPs) != 2 {
			t.Fatalf("pod %s: podIPs %v, want IPv4 and IPv6", w.Name, w.Status.PodIPs)
		}
		v6 := net.JoinHostPort(w.Status.PodIPs[1].IP, "80")
		if res := tb.Exec("x", "client-0", "/agnhost", "connect", v6, "--timeout=3s", "--protocol=tcp"); res.ExitCode != 0 || res.Stderr != "" {
			t.Errorf("client-0 → %s %s: exit %d, stderr %q", w.Name, v6, res.ExitCode, res.Stderr)
		}
	}
	if res := tb.Exec("x", "client-0", "/agnhost", "connect", client1.Status.PodIP+":8080", "--timeout=3s", "--protocol=tcp"); res.ExitCode != 0 {
		t.Errorf("client-0 → client-1:8080 (declared port): exit %d: %s", res.ExitCode, res.Stderr)
	}

	// What the servers answer, read over real connections from client-0's
	// namespace.
	w0 := webPods[0]
	if got := readTCP(t, client0, w0.Status.PodIP+":80"); got != w0.Name {
		t.Errorf("serve-hostname --tcp answered %q, want %q", got, w0.Name)
	}
	if got := readTCP(t, client0, client1.Status.PodIP+":8080"); got != "client-1" {
		t.Errorf("declared port answered %q, want client-1", got)
	}
	if got := readTCP(t, client0, client1.Status.PodIP+":8081"); got != "client-1" {
		t.Errorf("shell-wrapped serve-hostname answered %q, want client-1", got)
	}
	if got := httpGet(t, client0, w0.Status.PodIP+":8000"); got != "porter-8000" {
		t.Errorf("porter answered %q, want porter-8000", got)
	}

	// The way cyclonus probes: client-go exec with a TTY.
	if out, err := execTTY(tb, "x", "client-0", "main", "/agnhost", "connect", w0.Status.PodIP+":80", "--timeout=3s", "--protocol=tcp"); err != nil || out != "" {
		t.Errorf("TTY exec connect: output %q, err %v", out, err)
	}
	if out, err := execTTY(tb, "x", "client-0", "main", "/agnhost", "connect", w0.Status.PodIP+":9999", "--timeout=3s", "--protocol=tcp"); err == nil || !strings.HasPrefix(out, "REFUSED") {
		t.Errorf("TTY exec connect to closed port: output %q, err %v", out, err)
	}

	// REFUSED: nothing listens on the port.
	res := tb.Exec("x", "client-0", "/agnhost", "connect", w0.Status.PodIP+":9999", "--timeout=3s", "--protocol=tcp")
	if res.ExitCode != 1 || !strings.HasPrefix(res.Stderr, "REFUSED\n") || res.Stdout != "" {
		t.Errorf("connect to closed port: exit %d, stdout %q, stderr %q; want exit 1, stderr REFUSED", res.ExitCode, res.Stdout, res.Stderr)
	}
	t.Logf("REFUSED probe: exit %d, stderr %q", res.ExitCode, res.Stderr)
	// TIMEOUT: the destination's bridge drops the SYN.
	dstNode := nodeOf(t, tb, w0.Spec.NodeName)
	flow := fmt.Sprintf("priority=100,tcp,nw_dst=%s,tp_dst=80,actions=drop", w0.Status.PodIP)
	if _, err := dstNode.Bridge.Ofctl("add-flow", flow); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res = tb.Exec("x", "client-0", "/agnhost", "connect", w0.Status.PodIP+":80", "--timeout=2s", "--protocol=tcp")
	if res.ExitCode != 1 || !strings.HasPrefix(res.Stderr, "TIMEOUT\n") {
		t.Errorf("connect through a drop flow: exit %d, stderr %q; want exit 1, stderr TIMEOUT", res.ExitCode, res.Stderr)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("TIMEOUT after %v, before the 2s timeout", d)
	}
	if _, err := dstNode.Bridge.Ofctl("del-flows", "--strict", "priority=100,tcp,nw_dst="+w0.Status.PodIP+",tp_dst=80"); err != nil {
		t.Fatal(err)
	}
	// Bad arguments fail like agnhost's.
	if res := tb.Exec("x", "client-0", "/agnhost", "connect", "no-port", "--timeout=1s"); res.ExitCode != 1 || !strings.HasPrefix(res.Stderr, "UNKNOWN: ") {
		t.Errorf("connect without port: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}

	// A pod's servers that die are restarted, as a kubelet restarts a
	// crashed container.
	pids, err := exec.Command("pgrep", "-f", "serve --pod-file .*"+string(w0.UID)).Output()
	if err != nil {
		t.Fatalf("find the servers of %s: %v", w0.Name, err)
	}
	for _, pid := range strings.Fields(string(pids)) {
		_ = exec.Command("kill", "-9", pid).Run()
	}
	waitFor(t, 30*time.Second, "servers of "+w0.Name+" restarted", func() bool {
		res := tb.Exec("x", "client-0", "/agnhost", "connect", w0.Status.PodIP+":80", "--timeout=1s")
		return res.ExitCode == 0
	}, func() string { return runtimeLogs(tb) })

	// kwok is restarted if it dies, and exec works again.
	_ = exec.Command("kill", "-9", fmt.Sprint(tb.KwokPID())).Run()
	waitFor(t, 60*time.Second, "kwok restarted and serving exec", func() bool {
		return tb.KwokRestarts() == 1 && tb.Exec("x", "client-0", "/agnhost", "connect", w0.Status.PodIP+":80", "--timeout=1s").ExitCode == 0
	}, func() string { return runtimeLogs(tb) })

	// A hostNetwork pod runs with the node's address; exec runs on the node.
	hostPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "host", Namespace: "x"},
		Spec: corev1.PodSpec{HostNetwork: true, NodeName: tb.Nodes[0].Name,
			Containers: []corev1.Container{{Name: "c", Image: agnhostImage, Args: []string{"pause"}}}},
	}
	if _, err := kube.CoreV1().Pods("x").Create(ctx, hostPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hp := waitRunning(t, tb, "x", "", 6)
	for _, p := range hp {
		if p.Name == "host" && p.Status.PodIP != tb.Nodes[0].IP {
			t.Errorf("hostNetwork pod IP %s, want the node's %s", p.Status.PodIP, tb.Nodes[0].IP)
		}
	}
	// kwok listens on the node's loopback: reachable from the hostNetwork
	// pod, refused inside a pod's own namespace.
	kwokLocal := fmt.Sprintf("127.0.0.1:%d", tb.KwokPort)
	if res := tb.Exec("x", "host", "/agnhost", "connect", kwokLocal, "--timeout=2s"); res.ExitCode != 0 {
		t.Errorf("hostNetwork pod → %s: exit %d, stderr %q", kwokLocal, res.ExitCode, res.Stderr)
	}
	if res := tb.Exec("x", "client-0", "/agnhost", "connect", kwokLocal, "--timeout=2s"); res.ExitCode != 1 || !strings.HasPrefix(res.Stderr, "REFUSED\n") {
		t.Errorf("client-0 → %s (its own loopback): exit %d, stderr %q", kwokLocal, res.ExitCode, res.Stderr)
	}
	if err := kube.CoreV1().Pods("x").Delete(ctx, "host", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Scaling down removes the pods' namespaces and OVS ports.
	one := int32(1)
	if _, err := kube.AppsV1().Deployments("x").Patch(ctx, "web", "application/merge-patch+json",
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	remaining := waitPodCount(t, tb, "x", "app=web", int(one))
	gone := map[string]bool{}
	for _, p := range webPods {
		gone[string(p.UID)] = true
	}
	for _, p := range remaining {
		delete(gone, string(p.UID))
	}
	for uid := range gone {
		name := noderuntime.NetnsName(uidT(uid))
		waitFor(t, 30*time.Second, "netns "+name+" removed", func() bool {
			_, err := os.Stat("/var/run/netns/" + name)
			return os.IsNotExist(err)
		})
	}
	if n := countPodPorts(t, tb); n != 3 {
		t.Errorf("OVS pod ports after scale-down: %d, want 3", n)
	}
	return all
}

func uidT(s string) types.UID { return types.UID(s) }

// execTTY runs a command in a pod through client-go with a TTY, as
// cyclonus does, and returns the terminal's output.
func execTTY(tb *testbed.Testbed, namespace, pod, container string, cmd ...string) (string, error) {
	req := tb.Cluster.Kube.CoreV1().RESTClient().Post().Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true, TTY: true}, scheme.ParameterCodec)
	executor, err := remotecommand.NewSPDYExecutor(tb.Cluster.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	err = executor.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &out, Tty: true})
	return out.String(), err
}

func waitRunning(t *testing.T, tb *testbed.Testbed, namespace, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, 120*time.Second, fmt.Sprintf("%d pods %s Running and Ready", n, selector), func() bool {
		list, err := tb.Cluster.Kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false
		}
		pods = nil
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && isReady(&p) && p.Status.PodIP != "" {
				pods = append(pods, p)
			}
		}
		return len(pods) == n
	}, func() string { return runtimeLogs(tb) })
	return pods
}

func waitPodCount(t *testing.T, tb *testbed.Testbed, namespace, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, 90*time.Second, fmt.Sprintf("exactly %d pods %s", n, selector), func() bool {
		list, err := tb.Cluster.Kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false
		}
		pods = list.Items
		return len(pods) == n
	}, func() string { return runtimeLogs(tb) })
	return pods
}

func runtimeLogs(tb *testbed.Testbed) string {
	var b strings.Builder
	for _, n := range tb.Nodes {
		fmt.Fprintf(&b, "--- %s runtime:\n%s\n", n.Name, n.RuntimeLog(15))
	}
	fmt.Fprintf(&b, "--- kwok:\n%s\n", tb.KwokLog(15))
	return b.String()
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// assertStatusMatchesNetns checks that the API's pod IPs are the addresses
// of eth0 in the pod's real namespace, and hostIP the node's address.
func assertStatusMatchesNetns(t *testing.T, tb *testbed.Testbed, p *corev1.Pod) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", noderuntime.NetnsName(p.UID), "ip", "-j", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		t.Fatalf("pod %s: addresses of its namespace: %v", p.Name, err)
	}
	var links []struct {
		AddrInfo []struct {
			Local string `json:"local"`
			Scope string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("pod %s: ip -j addr: %v: %s", p.Name, err, out)
	}
	var netnsIPs []string
	for _, a := range links[0].AddrInfo {
		if a.Scope == "global" {
			netnsIPs = append(netnsIPs, a.Local)
		}
	}
	var statusIPs []string
	for _, ip := range p.Status.PodIPs {
		statusIPs = append(statusIPs, ip.IP)
	}
	if strings.Join(statusIPs, ",") != strings.Join(netnsIPs, ",") || p.Status.PodIP != statusIPs[0] {
		t.Errorf("pod %s: status podIP %s podIPs %v, namespace has %v", p.Name, p.Status.PodIP, statusIPs, netnsIPs)
	}
	if n := nodeOf(t, tb, p.Spec.NodeName); p.Status.HostIP != n.IP {
		t.Errorf("pod %s: hostIP %s, node %s has %s", p.Name, p.Status.HostIP, n.Name, n.IP)
	}
}

func assertOVSPort(t *testing.T, tb *testbed.Testbed, p *corev1.Pod) {
	t.Helper()
	n := nodeOf(t, tb, p.Spec.NodeName)
	out, err := tb.OVS.Vsctl("--format=csv", "--no-headings", "--columns=name", "find", "Interface",
		fmt.Sprintf(`external_ids:"tierflow.io/pod-name"=%q`, p.Name), fmt.Sprintf(`external_ids:"tierflow.io/pod-namespace"=%q`, p.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	port := strings.Trim(strings.TrimSpace(out), `"`)
	if port == "" {
		t.Fatalf("pod %s: no OVS interface with its external_ids", p.Name)
	}
	br, err := tb.OVS.Vsctl("port-to-br", port)
	if err != nil || strings.TrimSpace(br) != n.Bridge.Name {
		t.Errorf("pod %s: port %s on bridge %q (%v), want %s", p.Name, port, strings.TrimSpace(br), err, n.Bridge.Name)
	}
}

func countPodPorts(t *testing.T, tb *testbed.Testbed) int {
	t.Helper()
	out, err := tb.OVS.Vsctl("--format=csv", "--no-headings", "--columns=name", "find", "Interface", `external_ids:"tierflow.io/pod-namespace"="x"`)
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(out))
}

func nodeOf(t *testing.T, tb *testbed.Testbed, name string) *testbed.Node {
	t.Helper()
	for _, n := range tb.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}

func podByName(t *testing.T, pods []corev1.Pod, name string) *corev1.Pod {
	t.Helper()
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	t.Fatalf("no pod %s", name)
	return nil
}

// dialFrom opens a TCP connection from inside pod's namespace.
func dialFrom(t *testing.T, pod *corev1.Pod, addr string) net.Conn {
	t.Helper()
	var conn net.Conn
	err := ns.WithNetNSPath("/var/run/netns/"+noderuntime.NetnsName(pod.UID), func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, pod.Name, err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn
}

func readTCP(t *testing.T, from *corev1.Pod, addr string) string {
	t.Helper()
	conn := dialFrom(t, from, addr)
	defer conn.Close()
	data, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return string(data)
}

func httpGet(t *testing.T, from *corev1.Pod, addr string) string {
	t.Helper()
	conn := dialFrom(t, from, addr)
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	data, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("HTTP GET %s: %v", addr, err)
	}
	_, body, _ := strings.Cut(string(data), "\r\n\r\n")
	return body
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, diag ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			for _, d := range diag {
				msg += d()
			}
			t.Fatalf("timed out after %v waiting for %s\n%s", timeout, what, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// assertNothingLeft checks that a stopped test bed left no namespace, veth,
// bridge, dummy interface or process behind.
func assertNothingLeft(t *testing.T, dir string, netns, links []string) {
	t.Helper()
	for _, n := range netns {
		if _, err := os.Stat("/var/run/netns/" + n); err == nil {
			t.Errorf("namespace %s left behind", n)
		}
	}
	for _, l := range links {
		if exec.Command("ip", "link", "show", "dev", l).Run() == nil {
			t.Errorf("interface %s left behind", l)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(cmd, dir) {
			t.Errorf("process left behind: %s (%s)", cmd, p)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("test bed directory %s left behind", dir)
	}
	// Only this bed's /agnhost counts: another test bed on the host (waiting
	// for the OVS lock) may have installed its own.
	if target, err := os.Readlink(testbed.AgnhostPath); err == nil && strings.HasPrefix(target, dir) {
		t.Errorf("%s -> %s left behind", testbed.AgnhostPath, target)
	}
}
