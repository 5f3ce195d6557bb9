package cluster_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/test/cluster"
)

// TestRealCluster is the real-cluster smoke test of `make test`: a
// three-node cluster of its own (test/cluster), tierflow installed with the
// README's commands (its images built here, loaded into the nodes, the
// release manifest's userspace-datapath variant applied), then what a user
// relies on first: everything Running and Ready with clean logs, pods
// talking across nodes by pod IP, Service, NodePort and DNS name, the
// kubelet's probes passing under a default-deny policy, the outside reached
// through masquerade, and an uninstall as documented (the release
// manifest deleted, then the cleanup DaemonSet) that leaves nothing of
// tierflow's on the nodes.
func TestRealCluster(t *testing.T) {
	root, binDir, err := cluster.EnsurePrerequisites()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	const name = "tierflow-smoke"
	unlock, err := cluster.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	// Released after the cluster's teardown (cleanups run last in, first
	// out; a deferred unlock would run before them): the next test of
	// this name must not start while this one's containers are removed.
	t.Cleanup(unlock)
	dir := filepath.Join(root, "_output", "cluster-smoke")
	if err := cluster.RemoveStale(ctx, name, dir, t.Logf); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Up(ctx, cluster.Options{
		Name: name, Nodes: 3, Dir: dir, Subnet: "172.30.1.0/24",
		ExternalIP: "198.51.100.2", BinDir: binDir, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs at failure:\n%s", c.NodeLogs(context.Background(), 30))
		}
		if err := c.Down(context.Background(), t.Logf); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}

	// Installation, exactly as the README tells a user (on a machine
	// that cannot pull the Dockerfiles' bases).
	if err := c.InstallTierflow(ctx, root, t.Logf); err != nil {
		t.Fatal(err)
	}

	t.Run("BadInput", func(t *testing.T) { checkBadInput(ctx, t, c) })
	t.Run("Running", func(t *testing.T) { checkRunning(ctx, t, c, cs) })
	settled := time.Now() // steady state: the installation was seen Running
	t.Run("READMECheck", func(t *testing.T) {
		out, err := c.RunREADMEBlock(ctx, root, "check")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	w := deployWorkload(ctx, t, c, cs)
	t.Run("Connectivity", func(t *testing.T) { checkConnectivity(ctx, t, c, w) })
	t.Run("External", func(t *testing.T) { checkExternal(ctx, t, c, w) })
	t.Run("ProbesUnderDefaultDeny", func(t *testing.T) { checkDefaultDeny(ctx, t, c, cs, w) })
	t.Run("LogsClean", func(t *testing.T) { checkLogs(ctx, t, c, cs, settled) })
	t.Run("Uninstall", func(t *testing.T) {
		out, left, err := c.Uninstall(ctx, root)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for node, things := range left {
			for _, thing := range things {
				t.Errorf("%s still has %s", node, thing)
			}
		}
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkRunning: the controller Deployment Ready with one leader, the agent
// DaemonSet Ready on every node, CoreDNS Ready, every node Ready.
func checkRunning(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) {
	dep, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := *dep.Spec.Replicas; dep.Status.ReadyReplicas != want || want != 2 {
		t.Errorf("controller Deployment: %d of %d replicas ready, want 2 of 2", dep.Status.ReadyReplicas, want)
	}
	lease, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("leader Lease: %v", err)
	}
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
	if err != nil {
		t.Fatal(err)
	}
	holder, leaders := "", 0
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	for _, p := range pods.Items {
		if p.Name == holder {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("Lease holder %q is not one of the controller pods", holder)
	}
	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "tierflow-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Status.NumberReady != int32(len(c.Nodes)) || ds.Status.DesiredNumberScheduled != int32(len(c.Nodes)) {
		t.Errorf("agent DaemonSet: %d ready of %d desired, want %d", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, len(c.Nodes))
	}
	// Cluster DNS: CoreDNS's pods, created before there was a network,
	// start once it is up, at the kubelet's next retry of their volumes
	// (its back-off grows to two minutes), and turn Ready when synced.
	if err := eventually(4*time.Minute, func() error {
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas {
			return fmt.Errorf("CoreDNS: %d of %d replicas Ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// A node turns Ready at the kubelet's next status update after the
	// network plugin's configuration appeared (every 10 s).
	if err := eventually(time.Minute, func() error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				return fmt.Errorf("node %s is not Ready", n.Name)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// workload is what the connectivity checks run against: agnhost netexec
// servers on the two workers, a client next to the first, and a Service
// (NodePort) in front of the second.
type workload struct {
	ns               string
	client           string // on worker 1
	local, remote    *corev1.Pod
	service          *corev1.Service
	clientNode       string
	clientNodeIP     string
	remoteNodeIP     string
	nodePort         int32
	serviceName      string
	serviceClusterIP string
}

const (
	httpPort = 8080
	udpPort  = 8081
)

func deployWorkload(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) *workload {
	t.Helper()
	w := &workload{ns: "smoke", client: "client", clientNode: c.Nodes[1].Name, clientNodeIP: c.Nodes[1].IP, remoteNodeIP: c.Nodes[2].IP, serviceName: "remote"}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk := func(name, node string, labels map[string]string) *corev1.Pod {
		probe := &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromInt32(httpPort)}},
			PeriodSeconds:    2,
			TimeoutSeconds:   1,
			FailureThreshold: 2,
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: labels},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
				TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{
					Name:           "agnhost",
					Image:          cluster.AgnhostImages[2],
					Args:           []string{"netexec", fmt.Sprintf("--http-port=%d", httpPort), fmt.Sprintf("--udp-port=%d", udpPort)},
					ReadinessProbe: probe,
					LivenessProbe:  probe,
				}},
			},
		}
	}
	for _, p := range []*corev1.Pod{
		mk(w.client, c.Nodes[1].Name, map[string]string{"app": "client"}),
		mk("local", c.Nodes[1].Name, map[string]string{"app": "local"}),
		mk("remote", c.Nodes[2].Name, map[string]string{"app": "remote"}),
	} {
		if _, err := cs.CoreV1().Pods(w.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: w.serviceName, Namespace: w.ns},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "remote"},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(httpPort), Protocol: corev1.ProtocolTCP},
				{Name: "udp", Port: 81, TargetPort: intstr.FromInt32(udpPort), Protocol: corev1.ProtocolUDP},
			},
		},
	}
	svc, err := cs.CoreV1().Services(w.ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.service, w.nodePort, w.serviceClusterIP = svc, svc.Spec.Ports[0].NodePort, svc.Spec.ClusterIP
	deadline := time.Now().Add(3 * time.Minute)
	for _, name := range []string{"client", "local", "remote"} {
		for {
			p, err := cs.CoreV1().Pods(w.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && podReady(p) {
				switch name {
				case "local":
					w.local = p
				case "remote":
					w.remote = p
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s/%s not Ready within 3 minutes: %v %+v", w.ns, name, err, p.Status)
			}
			time.Sleep(time.Second)
		}
	}
	return w
}

func ptr[T any](v T) *T { return &v }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// eventually retries f for up to d: a Service's rules reach every node's
// kube-proxy a moment after its endpoints are ready.
func eventually(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

func checkConnectivity(ctx context.Context, t *testing.T, c *cluster.Cluster, w *workload) {
	port := func(ip string, p int) string { return net.JoinHostPort(ip, fmt.Sprint(p)) }
	cases := []struct{ name, target, proto string }{
		{"pod IP, same node, TCP", port(w.local.Status.PodIP, httpPort), "tcp"},
		{"pod IP, same node, UDP", port(w.local.Status.PodIP, udpPort), "udp"},
		{"pod IP, other node, TCP", port(w.remote.Status.PodIP, httpPort), "tcp"},
		{"pod IP, other node, UDP", port(w.remote.Status.PodIP, udpPort), "udp"},
		{"ClusterIP, TCP", port(w.serviceClusterIP, 80), "tcp"},
		{"ClusterIP, UDP", port(w.serviceClusterIP, 81), "udp"},
		{"DNS name, TCP", w.serviceName + "." + w.ns + ".svc.cluster.local:80", "tcp"},
		{"DNS name, UDP", w.serviceName + "." + w.ns + ".svc.cluster.local:81", "udp"},
		{"NodePort of another node, TCP", port(w.remoteNodeIP, int(w.nodePort)), "tcp"},
	}
	for _, tc := range cases {
		if err := eventually(30*time.Second, func() error { return c.Connect(ctx, w.ns, w.client, tc.target, tc.proto) }); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// From outside the cluster (this machine) to a NodePort of each node;
	// the backend is on the last node.
	for _, n := range c.Nodes {
		addr := port(n.IP, int(w.nodePort))
		if err := eventually(30*time.Second, func() error {
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err == nil {
				conn.Close()
			}
			return err
		}); err != nil {
			t.Errorf("NodePort from this machine to %s (%s): %v", n.Name, addr, err)
		}
	}
}

// checkExternal: a pod reaches an address outside the cluster, which sees
// the pod's node's address (masquerade).
func checkExternal(ctx context.Context, t *testing.T, c *cluster.Cluster, w *workload) {
	rec, err := cluster.RecordPeers(net.JoinHostPort(c.ExternalIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if err := c.Connect(ctx, w.ns, w.client, rec.Addr(), "tcp"); err != nil {
		t.Fatal(err)
	}
	peers := rec.Peers()
	if len(peers) == 0 || peers[0] != w.clientNodeIP {
		t.Errorf("the outside saw %v, want the client's node address %s (masquerade)", peers, w.clientNodeIP)
	}
}

// checkDefaultDeny: with a default-deny policy (ingress and egress) in the
// namespace, pods cannot talk, yet the kubelet's probes keep passing (the
// node reaches its pods): no pod turns unready or restarts. Lifting the
// policy restores connectivity.
func checkDefaultDeny(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, w *workload) {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny", Namespace: w.ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(w.ns).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(w.remote.Status.PodIP, fmt.Sprint(httpPort))
	if err := eventually(20*time.Second, func() error {
		if c.Connect(ctx, w.ns, w.client, target, "tcp") == nil {
			return fmt.Errorf("still connects")
		}
		return nil
	}); err != nil {
		t.Fatalf("default-deny: client → %s: %v", target, err)
	}
	udpTarget := net.JoinHostPort(w.local.Status.PodIP, fmt.Sprint(udpPort))
	if err := c.Connect(ctx, w.ns, w.client, udpTarget, "udp"); err == nil {
		t.Errorf("default-deny: client → %s (UDP, same node) connected", udpTarget)
	}
	// Probes every 2 s, unready after 2 failures, restarted after 2: 30 s
	// is many probe rounds.
	time.Sleep(30 * time.Second)
	pods, err := cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !podReady(&p) {
			t.Errorf("pod %s not Ready under default-deny: the kubelet's probes fail", p.Name)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				t.Errorf("pod %s restarted %d times under default-deny (liveness probe failed)", p.Name, s.RestartCount)
			}
		}
	}
	if err := cs.NetworkingV1().NetworkPolicies(w.ns).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := eventually(20*time.Second, func() error { return c.Connect(ctx, w.ns, w.client, target, "tcp") }); err != nil {
		t.Errorf("after the policy's deletion: %v", err)
	}
}

// errorLine matches an error in the logs of tierflow's containers: slog
// (level=ERROR), klog (E1125 ...) and OVS (|ERR| / |EMER|).
var errorLine = regexp.MustCompile(`level=ERROR|^E\d{4} |\|(ERR|EMER)\|`)

// checkLogs: every tierflow container's log is readable with kubectl logs
// and has no error line in steady state: from when its pod became Ready,
// and not before settled (when the whole installation was seen Running:
// every tierflow pod, every node and CoreDNS Ready). Errors before that are
// start-up and are shown without failing.
func checkLogs(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, settled time.Time) {
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tierflow"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		steady := settled
		if ready := readySince(&p); ready.After(steady) {
			steady = ready
		}
		var containers []corev1.Container
		containers = append(containers, p.Spec.InitContainers...)
		containers = append(containers, p.Spec.Containers...)
		for _, ctr := range containers {
			out, err := c.Kubectl(ctx, nil, "logs", "-n", "kube-system", p.Name, "-c", ctr.Name, "--timestamps")
			if err != nil {
				t.Errorf("kubectl logs %s -c %s: %v", p.Name, ctr.Name, err)
				continue
			}
			for _, line := range strings.Split(out, "\n") {
				stamp, msg, _ := strings.Cut(line, " ")
				if !errorLine.MatchString(msg) {
					continue
				}
				at, err := time.Parse(time.RFC3339Nano, stamp)
				switch {
				case err != nil:
					t.Errorf("%s/%s: a log line without kubectl's timestamp: %s", p.Name, ctr.Name, line)
				case at.Before(steady):
					t.Logf("start-up (before %s was Ready and settled at %s): %s/%s: %s", p.Name, steady.UTC().Format(time.RFC3339), p.Name, ctr.Name, msg)
				default:
					t.Errorf("%s/%s: %s", p.Name, ctr.Name, line)
				}
			}
		}
	}
}

// readySince is when p last became Ready (zero if it is not).
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
