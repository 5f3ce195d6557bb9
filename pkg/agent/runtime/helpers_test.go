package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/agent/runtime/query"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/ovsenv"
)

const (
	agentNS       = "kube-system"
	agentSA       = "tierflow-agent"
	tokenAudience = "tierflow"
)

// cluster is the test's control plane: a real kube-apiserver, the
// controller's TLS material and the address agents dial.
type cluster struct {
	kube     *kubeapi.Cluster
	dir      string
	caFile   string
	certFile string
	keyFile  string
	addr     string // fixed across controller restarts

	controllerBin  string
	controllerRuns int
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{kube: kubeapi.Start(t, kubeapi.WithCRDs()), dir: t.TempDir()}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A self-signed serving certificate is its own CA.
	c.caFile = filepath.Join(c.dir, "ca.crt")
	c.certFile = filepath.Join(c.dir, "tls.crt")
	c.keyFile = filepath.Join(c.dir, "tls.key")
	for f, b := range map[string][]byte{c.caFile: certPEM, c.certFile: certPEM, c.keyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	ln.Close()

	ctx := context.Background()
	if _, err := c.kube.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.kube.Kube.CoreV1().ServiceAccounts(agentNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// addNode creates a Node and the agent pod of that node, and writes a
// service account token bound to that pod (what the kubelet projects into
// the agent's pod) to a file.
func (c *cluster) addNode(t *testing.T, name string) (tokenFile string) {
	t.Helper()
	ctx := context.Background()
	kube := c.kube.Kube
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-agent-" + name},
		Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: agentSA, HostNetwork: true,
			Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, agentSA, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{tokenAudience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile = filepath.Join(c.dir, name+".token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile
}

// addPod creates the API object of a pod ovsenv attached on node.
func (c *cluster) addPod(t *testing.T, p *ovsenv.Pod, node string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	pods := c.kube.Kube.CoreV1().Pods(ovsenv.PodNamespace)
	obj, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "agnhost",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Status.Phase = corev1.PodRunning
	for _, a := range p.Addrs {
		obj.Status.PodIPs = append(obj.Status.PodIPs, corev1.PodIP{IP: a.Addr().String()})
	}
	obj.Status.PodIP = obj.Status.PodIPs[0].IP
	if _, err := pods.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// controllerProc is a running tierflow-controller binary.
type controllerProc struct {
	cmd    *exec.Cmd
	exited chan error
	log    string
}

// buildController builds the tierflow-controller binary once per test.
func (c *cluster) buildController(t *testing.T) {
	t.Helper()
	c.controllerBin = filepath.Join(c.dir, "tierflow-controller")
	if out, err := exec.Command("go", "build", "-o", c.controllerBin, "../../../cmd/tierflow-controller").CombinedOutput(); err != nil {
		t.Fatalf("building tierflow-controller: %v\n%s", err, out)
	}
}

// startController runs the controller binary against the API server,
// serving agents on c.addr (the same address every time, as a Service
// would give).
func (c *cluster) startController(t *testing.T) *controllerProc {
	t.Helper()
	if c.controllerBin == "" {
		c.buildController(t)
	}
	c.controllerRuns++
	p := &controllerProc{exited: make(chan error, 1), log: filepath.Join(c.dir, fmt.Sprintf("controller-%d.log", c.controllerRuns))}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	p.cmd = exec.Command(c.controllerBin, "--kubeconfig="+c.kube.Kubeconfig, "--id=test-controller", "--leader-elect=false",
		"--metrics-address=", "--query-address=", "--agent-listen-address="+c.addr,
		"--tls-cert-file="+c.certFile, "--tls-key-file="+c.keyFile, "--crd-poll-interval=500ms",
		"--agent-token-audience="+tokenAudience, "--agent-service-account="+agentNS+"/"+agentSA)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("controller log (%s):\n%s", p.log, b)
		}
	})
	return p
}

// kill kills the controller (SIGKILL: no goodbye to the agents).
func (p *controllerProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// agentProc is one in-process tierflow-agent.
type agentProc struct {
	node   string
	opts   runtime.Options
	cancel context.CancelFunc
	done   chan error
	q      *query.Client
}

func (c *cluster) agentOptions(t *testing.T, env *ovsenv.Env, br *ovsenv.Bridge, node, tokenFile string, zone uint16) runtime.Options {
	cfg := config.DefaultAgent()
	cfg.NodeName = node
	cfg.BridgeName = br.Name
	cfg.DatapathType = config.DatapathNetdev
	cfg.OVSDBSocket = env.DBSocketPath()
	cfg.OpenFlowSocket = br.MgmtSocketPath()
	cfg.ControllerAddress = c.addr
	cfg.ControllerCAFile = c.caFile
	cfg.ControllerServerName = "localhost"
	cfg.TokenFile = tokenFile
	cfg.StateDir = filepath.Join(c.dir, node+"-state")
	cfg.MetricsAddress = "127.0.0.1:0"
	return runtime.Options{Config: &cfg, QuerySocket: filepath.Join(c.dir, node+".sock"), CtZone: zone,
		VswitchdCtl:   filepath.Join(env.Dir, "ovs-vswitchd.ctl"),
		RetryInterval: 500 * time.Millisecond, CheckInterval: time.Second}
}

func startAgent(t *testing.T, node string, opts runtime.Options) *agentProc {
	t.Helper()
	a, err := runtime.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &agentProc{node: node, opts: opts, cancel: cancel, done: make(chan error, 1), q: query.NewClient(opts.QuerySocket)}
	go func() { p.done <- a.Run(ctx) }()
	t.Cleanup(p.stop)
	return p
}

func (p *agentProc) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	<-p.done
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// realizedOn waits until the agent enforces exactly the policies named by
// want (source ref → minimum generation of the API object is not known to
// the agent, so the check is on the set and on realized == wanted).
func (p *agentProc) realizedOn(t *testing.T, want ...string) {
	t.Helper()
	eventually(t, 60*time.Second, "agent "+p.node+" realization", func() error {
		r, err := p.q.Realization(context.Background())
		if err != nil {
			return err
		}
		got := map[string]bool{}
		for _, pr := range r.Policies {
			if pr.Error != "" {
				return fmt.Errorf("policy %s: %s", pr.Source, pr.Error)
			}
			if pr.Generation != pr.Wanted {
				return fmt.Errorf("policy %s realized at generation %d, holds %d", pr.Source, pr.Generation, pr.Wanted)
			}
			got[pr.Source.String()] = true
		}
		for _, w := range want {
			if !got[w] {
				return fmt.Errorf("policy %s not held (holds %v)", w, got)
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("holds %v, want %v", got, want)
		}
		st, err := p.q.Status(context.Background())
		if err != nil {
			return err
		}
		if !st.Ready {
			return errors.New("not ready")
		}
		return nil
	})
}

// connection is one expected verdict.
type connection struct {
	src     *ovsenv.Pod
	dst     *ovsenv.Pod
	port    uint16
	allowed bool
}

// checkConnections probes each connection with real TCP. Allowed ones are
// retried for a while (a first SYN may race ARP); denied ones must fail
// every time.
func checkConnections(t *testing.T, env *ovsenv.Env, step string, conns ...connection) {
	t.Helper()
	if err := env.WaitRevalidated(); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		dst := netip.AddrPortFrom(c.dst.IPv4(), c.port)
		var err error
		if c.allowed {
			for i := 0; i < 3; i++ {
				if err = c.src.ProbeTCP(dst, 2*time.Second); err == nil {
					break
				}
			}
			if err != nil {
				t.Errorf("%s: %s -> %s %s: blocked (%v), want allowed", step, c.src.Name, c.dst.Name, dst, err)
			}
			continue
		}
		if err = c.src.ProbeTCP(dst, 700*time.Millisecond); err == nil {
			t.Errorf("%s: %s -> %s %s: allowed, want blocked", step, c.src.Name, c.dst.Name, dst)
		} else if !errors.Is(err, ovsenv.ErrNoReply) {
			t.Errorf("%s: %s -> %s %s: %v, want no reply", step, c.src.Name, c.dst.Name, dst, err)
		}
	}
}
