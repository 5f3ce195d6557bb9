package livecluster

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
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
	"github.com/tierflow/tierflow/pkg/queryapi"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// The agents' service account and token audience.
const (
	AgentNamespace = "kube-system"
	AgentSA        = "tierflow-agent"
	TokenAudience  = "tierflow"
)

// Cluster is the control plane: a kube-apiserver, the controller's TLS
// material and addresses.
type Cluster struct {
	Kube *kubeapi.Cluster
	Dir  string
	// CAFile verifies the controller's certificate (self-signed, for
	// "localhost" and 127.0.0.1); CertFile and KeyFile are it.
	CAFile, CertFile, KeyFile string
	// AgentAddress is where agents reach the controller, QueryAddress its
	// query API; both fixed across controller restarts.
	AgentAddress, QueryAddress string

	controllerBin  string
	controllerRuns int
}

// New starts a kube-apiserver with the policy CRDs and prepares the
// controller's certificate, addresses and the agents' service account.
func New(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{Kube: kubeapi.Start(t, kubeapi.WithCRDs()), Dir: t.TempDir()}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A self-signed serving certificate is its own CA.
	c.CAFile = filepath.Join(c.Dir, "ca.crt")
	c.CertFile = filepath.Join(c.Dir, "tls.crt")
	c.KeyFile = filepath.Join(c.Dir, "tls.key")
	for f, b := range map[string][]byte{c.CAFile: certPEM, c.CertFile: certPEM, c.KeyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.AgentAddress, c.QueryAddress = freeAddress(t), freeAddress(t)
	ctx := context.Background()
	if _, err := c.Kube.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.Kube.Kube.CoreV1().ServiceAccounts(AgentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: AgentSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func freeAddress(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// AddNode creates a Node and the agent pod of that node, and writes a
// service account token bound to that pod (what the kubelet projects into
// the agent's pod) to a file.
func (c *Cluster) AddNode(t testing.TB, name string) (tokenFile string) {
	t.Helper()
	ctx := context.Background()
	kube := c.Kube.Kube
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods(AgentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-agent-" + name},
		Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: AgentSA, HostNetwork: true,
			Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, AgentSA, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{TokenAudience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile = filepath.Join(c.Dir, name+".token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile
}

// AddPod creates the API object of a pod ovsenv attached on node, with a
// named container port "web" (TCP 80), and records its UID on the pod's
// OVS interface, as tierflow-cni does (the agent admits the port only for
// the pod of that UID).
func (c *Cluster) AddPod(t testing.TB, p *ovsenv.Pod, node string, labels map[string]string) {
	t.Helper()
	obj := c.CreatePod(t, p.Name, node, labels)
	if err := p.SetExternalID(ovsdb.KeyPodUID, string(obj.UID)); err != nil {
		t.Fatal(err)
	}
	c.SetPodRunning(t, obj, p.Addrs)
}

// CreatePod creates a pod scheduled on node, without status (what the
// kubelet finds before it starts the pod's sandbox), with a named
// container port "web" (TCP 80).
func (c *Cluster) CreatePod(t testing.TB, name, node string, labels map[string]string) *corev1.Pod {
	t.Helper()
	obj, err := c.Kube.Kube.CoreV1().Pods(ovsenv.PodNamespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "agnhost",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// SetPodRunning writes what the kubelet reports once the pod's sandbox is
// up: phase Running and its addresses.
func (c *Cluster) SetPodRunning(t testing.TB, obj *corev1.Pod, addrs []netip.Prefix) {
	t.Helper()
	obj = obj.DeepCopy()
	obj.Status.Phase = corev1.PodRunning
	obj.Status.PodIPs = nil
	for _, a := range addrs {
		obj.Status.PodIPs = append(obj.Status.PodIPs, corev1.PodIP{IP: a.Addr().String()})
	}
	obj.Status.PodIP = obj.Status.PodIPs[0].IP
	if _, err := c.Kube.Kube.CoreV1().Pods(obj.Namespace).UpdateStatus(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// SetNode gives a Node its pod CIDRs and InternalIPs, as
// kube-controller-manager and the kubelet do.
func (c *Cluster) SetNode(t testing.TB, name string, podCIDRs []string, ips ...netip.Addr) {
	t.Helper()
	ctx := context.Background()
	nodes := c.Kube.Kube.CoreV1().Nodes()
	n, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs[0], podCIDRs
	if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = nil
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// QueryUser creates a service account in namespace default, bound (when
// allowed) to a ClusterRole granting get on the query API's resource, and
// writes a kubeconfig with its token (and no other credential) for the
// API server: what an operator's kubeconfig for tierctl looks like.
func (c *Cluster) QueryUser(t testing.TB, name string, allowed bool) (kubeconfig, token string) {
	t.Helper()
	ctx := context.Background()
	kube := c.Kube.Kube
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if allowed {
		role := "tierflow-query-" + name
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{queryapi.AuthGroup}, Resources: []string{queryapi.AuthResource}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exp := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(c.Kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var server *clientcmdapi.Cluster
	for _, cl := range admin.Clusters {
		server = cl
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = server
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "test", AuthInfo: name, Namespace: ovsenv.PodNamespace}
	cfg.CurrentContext = name
	kubeconfig = filepath.Join(c.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, tr.Status.Token
}

// Controller is a running tierflow-controller binary.
type Controller struct {
	cmd    *exec.Cmd
	exited chan error
	Log    string
}

func (c *Cluster) buildController(t testing.TB) {
	t.Helper()
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c.controllerBin = filepath.Join(c.Dir, "tierflow-controller")
	cmd := exec.Command("go", "build", "-o", c.controllerBin, "./cmd/tierflow-controller")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tierflow-controller: %v\n%s", err, out)
	}
}

// StartController runs the controller binary against the API server,
// serving agents on AgentAddress and the query API on QueryAddress.
func (c *Cluster) StartController(t testing.TB) *Controller {
	t.Helper()
	if c.controllerBin == "" {
		c.buildController(t)
	}
	c.controllerRuns++
	p := &Controller{exited: make(chan error, 1), Log: filepath.Join(c.Dir, fmt.Sprintf("controller-%d.log", c.controllerRuns))}
	logFile, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	p.cmd = exec.Command(c.controllerBin, "--kubeconfig="+c.Kube.Kubeconfig, "--id=test-controller", "--leader-elect=false",
		"--metrics-address=", "--query-address="+c.QueryAddress, "--agent-listen-address="+c.AgentAddress,
		"--tls-cert-file="+c.CertFile, "--tls-key-file="+c.KeyFile, "--crd-poll-interval=500ms",
		"--agent-token-audience="+TokenAudience, "--agent-service-account="+AgentNamespace+"/"+AgentSA)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			t.Logf("controller log (%s):\n%s", p.Log, b)
		}
	})
	return p
}

// Kill kills the controller (SIGKILL: no goodbye to the agents).
func (p *Controller) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// Agent is one in-process tierflow-agent.
type Agent struct {
	Node   string
	Opts   runtime.Options
	Q      *agentquery.Client
	cancel context.CancelFunc
	done   chan error
}

// AgentOptions configures an agent of node on bridge br, with its query
// socket in the cluster's directory.
func (c *Cluster) AgentOptions(env *ovsenv.Env, br *ovsenv.Bridge, node, tokenFile string, zone uint16) runtime.Options {
	cfg := config.DefaultAgent()
	cfg.NodeName = node
	cfg.BridgeName = br.Name
	cfg.DatapathType = config.DatapathNetdev
	cfg.OVSDBSocket = env.DBSocketPath()
	cfg.OpenFlowSocket = br.MgmtSocketPath()
	cfg.ControllerAddress = c.AgentAddress
	cfg.ControllerCAFile = c.CAFile
	cfg.ControllerServerName = "localhost"
	cfg.TokenFile = tokenFile
	cfg.StateDir = filepath.Join(c.Dir, node+"-state")
	cfg.MetricsAddress = "127.0.0.1:0"
	return runtime.Options{Config: &cfg, QuerySocket: filepath.Join(c.Dir, node+".sock"), CtZone: zone,
		// The private OVS's control socket: traces run by the agent.
		VswitchdCtl:   env.VswitchdCtlPath(),
		RetryInterval: 500 * time.Millisecond, CheckInterval: time.Second}
}

// StartAgent runs an agent until the test ends.
func StartAgent(t testing.TB, node string, opts runtime.Options) *Agent {
	t.Helper()
	a, err := runtime.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Agent{Node: node, Opts: opts, cancel: cancel, done: make(chan error, 1), Q: agentquery.NewClient(opts.QuerySocket)}
	go func() { p.done <- a.Run(ctx) }()
	t.Cleanup(p.Stop)
	return p
}

// Stop stops the agent.
func (p *Agent) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	<-p.done
}

// Eventually polls cond until it returns nil or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
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

// RealizedOn waits until the agent enforces exactly the policies named by
// want (KIND/[NS/]NAME), each at the generation it holds, and is ready.
func (p *Agent) RealizedOn(t testing.TB, want ...string) {
	t.Helper()
	Eventually(t, 60*time.Second, "agent "+p.Node+" realization", func() error {
		r, err := p.Q.Realization(context.Background())
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
		st, err := p.Q.Status(context.Background())
		if err != nil {
			return err
		}
		if !st.Ready {
			return errors.New("not ready")
		}
		return nil
	})
}
