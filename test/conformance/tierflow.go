package conformance

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/testbed"
)

// The agents' identity, as in manifests/: the controller accepts tokens of
// this service account with this audience.
const (
	agentNamespace = "kube-system"
	agentSA        = "tierflow-agent"
	tokenAudience  = "tierflow"
)

// Tierflow is the controller and the agents running on a test bed.
type Tierflow struct {
	Dir        string
	Controller *Process
	Agents     map[string]*Process // by node name
}

// Process is a daemon started by StartTierflow, logging to Log.
type Process struct {
	Name   string
	Log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Alive reports whether the process still runs.
func (p *Process) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// LogTail returns the last lines of the process's log.
func (p *Process) LogTail(lines int) string {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	parts := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

func (p *Process) stop(grace time.Duration) {
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func start(dir, name, bin string, args ...string) (*Process, error) {
	p := &Process{Name: name, Log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

// StartTierflow builds and starts tierflow-controller and one
// tierflow-agent per node of bed; everything stops at tb's cleanup (before
// the bed, whose cleanups were registered first). It returns once every
// agent is connected and has programmed its bridge.
func StartTierflow(tb testing.TB, bed *testbed.Testbed) *Tierflow {
	tb.Helper()
	tf := &Tierflow{Dir: filepath.Join(bed.Dir, "tierflow"), Agents: map[string]*Process{}}
	binDir := filepath.Join(tf.Dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	root, err := kubeapi.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", binDir+"/", "./cmd/tierflow-controller", "./cmd/tierflow-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building tierflow: %v\n%s", err, out)
	}

	// A self-signed serving certificate is its own CA.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	caFile, certFile, keyFile := filepath.Join(tf.Dir, "ca.crt"), filepath.Join(tf.Dir, "tls.crt"), filepath.Join(tf.Dir, "tls.key")
	for f, b := range map[string][]byte{caFile: certPEM, certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	agentAddr, queryAddr := freeAddress(tb), freeAddress(tb)

	kube := bed.Cluster.Kube
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentSA}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}

	ctrl, err := start(tf.Dir, "tierflow-controller", filepath.Join(binDir, "tierflow-controller"),
		"--kubeconfig="+bed.Cluster.Kubeconfig, "--id=conformance", "--leader-elect=false",
		"--metrics-address=", "--query-address="+queryAddr, "--agent-listen-address="+agentAddr,
		"--tls-cert-file="+certFile, "--tls-key-file="+keyFile, "--crd-poll-interval=1s",
		"--agent-token-audience="+tokenAudience, "--agent-service-account="+agentNamespace+"/"+agentSA)
	if err != nil {
		tb.Fatal(err)
	}
	tf.Controller = ctrl
	tb.Cleanup(func() {
		ctrl.stop(10 * time.Second)
		if tb.Failed() {
			tb.Logf("controller log tail (%s):\n%s", ctrl.Log, ctrl.LogTail(40))
		}
	})

	for i, n := range bed.Nodes {
		token := agentToken(tb, bed, n.Name)
		tokenFile := filepath.Join(tf.Dir, n.Name+".token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			tb.Fatal(err)
		}
		a, err := start(tf.Dir, "tierflow-agent-"+n.Name, filepath.Join(binDir, "tierflow-agent"),
			"--node-name="+n.Name, "--bridge-name="+n.Bridge.Name, "--datapath-type=netdev",
			"--ovsdb-socket="+bed.OVS.DBSocketPath(), "--openflow-socket="+n.Bridge.MgmtSocketPath(),
			"--ct-zone="+strconv.Itoa(i+1),
			"--controller-address="+agentAddr, "--controller-ca-file="+caFile, "--controller-server-name=localhost",
			"--token-file="+tokenFile, "--state-dir="+filepath.Join(tf.Dir, n.Name+"-state"),
			"--metrics-address=", "--query-socket="+filepath.Join(tf.Dir, n.Name+".sock"))
		if err != nil {
			tb.Fatal(err)
		}
		tf.Agents[n.Name] = a
		tb.Cleanup(func() {
			a.stop(10 * time.Second)
			if tb.Failed() {
				tb.Logf("agent %s log tail (%s):\n%s", n.Name, a.Log, a.LogTail(40))
			}
		})
	}
	if err := tf.waitProgrammed(bed, 2*time.Minute); err != nil {
		tb.Fatalf("tierflow did not come up: %v\ncontroller log:\n%s", err, ctrl.LogTail(30))
	}
	return tf
}

// agentToken creates the agent pod of node (hostNetwork, as the DaemonSet's)
// and returns a token of the agents' service account bound to it: what the
// kubelet would project into the agent's pod.
func agentToken(tb testing.TB, bed *testbed.Testbed, node string) string {
	tb.Helper()
	ctx := context.Background()
	kube := bed.Cluster.Kube
	pod, err := kube.CoreV1().Pods(agentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-agent-" + node, Labels: map[string]string{"app": "tierflow-agent"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentSA, HostNetwork: true,
			Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	exp := int64(24 * 3600)
	tr, err := kube.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, agentSA, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{tokenAudience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return tr.Status.Token
}

// waitProgrammed waits until every agent has installed its pipeline: the
// node bridge holds more than a handful of flows (the test bed installs
// none when NormalFlows is off).
func (tf *Tierflow) waitProgrammed(bed *testbed.Testbed, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pending := []string{}
		for _, n := range bed.Nodes {
			if a := tf.Agents[n.Name]; !a.Alive() {
				return fmt.Errorf("agent %s exited:\n%s", n.Name, a.LogTail(30))
			}
			out, err := n.Bridge.Ofctl("dump-flows", "--no-stats")
			if err != nil || strings.Count(out, "\n") < 5 {
				pending = append(pending, n.Name)
			}
		}
		if !tf.Controller.Alive() {
			return fmt.Errorf("controller exited:\n%s", tf.Controller.LogTail(30))
		}
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bridges of %v not programmed after %v", pending, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func freeAddress(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
