package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/pkg/queryapi"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/testbed"
)

// The agents' identity, as in manifests/: a service account in kube-system
// whose tokens, bound to the agent pod of a node, the controller accepts
// for that node.
const (
	AgentNamespace = "kube-system"
	AgentSA        = "tierflow-agent"
	TokenAudience  = "tierflow"
	// QueryUser is the service account (namespace default) whose token
	// asks the controller's query API, as an operator's tierctl would.
	QueryUser = "tierflow-operator"
)

// Tierflow is tierflow running on a test bed.
type Tierflow struct {
	Bed *testbed.Testbed
	// Dir holds binaries, TLS files, tokens, agent state and logs.
	Dir    string
	BinDir string
	// CAFile verifies the controller's certificate (for "localhost").
	CAFile       string
	AgentAddress string
	QueryAddress string
	// QueryToken is the bearer token of QueryUser; Query a client with it.
	QueryToken string
	Query      *queryapi.Client
	// AgentSockets maps a node name to its agent's query socket.
	AgentSockets map[string]string

	procs []*testbed.Process
}

// Start builds and runs the controller and one agent per node of bed; they
// stop at tb's cleanup. It returns once every agent enforces a complete
// policy state.
func Start(tb testing.TB, bed *testbed.Testbed, dir string) *Tierflow {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	tf := &Tierflow{Bed: bed, Dir: dir, BinDir: filepath.Join(dir, "bin"), AgentSockets: map[string]string{}}
	if err := os.MkdirAll(tf.BinDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := tf.build(); err != nil {
		tb.Fatal(err)
	}
	if err := tf.tls(); err != nil {
		tb.Fatal(err)
	}
	var err error
	if tf.AgentAddress, err = freeAddress(); err != nil {
		tb.Fatal(err)
	}
	if tf.QueryAddress, err = freeAddress(); err != nil {
		tb.Fatal(err)
	}
	kube := bed.Cluster.Kube
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(AgentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: AgentSA}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}

	ctrl, err := testbed.StartProcess(dir, "tierflow-controller", filepath.Join(tf.BinDir, "tierflow-controller"),
		"--kubeconfig="+bed.Cluster.Kubeconfig, "--id=testbed-controller", "--leader-elect=false",
		"--metrics-address=", "--query-address="+tf.QueryAddress, "--agent-listen-address="+tf.AgentAddress,
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-key-file="+filepath.Join(dir, "tls.key"),
		"--agent-token-audience="+TokenAudience, "--agent-service-account="+AgentNamespace+"/"+AgentSA)
	if err != nil {
		tb.Fatal(err)
	}
	tf.procs = append(tf.procs, ctrl)
	tb.Cleanup(func() { ctrl.Stop(20 * time.Second) })

	// The agents watch Services, EndpointSlices and Nodes for their
	// Service proxy (and on the encap bed Nodes for the node network), as
	// the agent's service account with the release manifest's RBAC.
	agentKubeconfig := bed.Cluster.ServiceAccountKubeconfig(tb, AgentNamespace, AgentSA, "tierflow-agent", dir)
	for i, n := range bed.Nodes {
		token, err := tf.agentToken(n.Name)
		if err != nil {
			tb.Fatalf("agent token for %s: %v", n.Name, err)
		}
		sock := filepath.Join(dir, n.Name+".sock")
		tf.AgentSockets[n.Name] = sock
		// Every node bridge of the uplink bed shares its one ovs-vswitchd
		// (and its conntrack), so each agent gets its own zone.
		args := []string{"--node-name=" + n.Name, "--bridge-name=" + n.Bridge.Name, "--datapath-type=netdev",
			"--ovsdb-socket=" + n.OVS.DBSocketPath(), "--openflow-socket=" + n.Bridge.MgmtSocketPath(),
			"--controller-address=" + tf.AgentAddress, "--controller-ca-file=" + tf.CAFile, "--controller-server-name=localhost",
			"--token-file=" + token, "--state-dir=" + filepath.Join(dir, n.Name+"-state"),
			"--metrics-address=127.0.0.1:0", "--query-socket=" + sock, fmt.Sprintf("--ct-zone=%d", 100+i),
			"--service-proxy=true", "--kubeconfig=" + agentKubeconfig,
			"--vswitchd-ctl=" + n.OVS.VswitchdCtlPath()}
		if bed.Encap {
			args = append(args, "--node-network-mode=encap", "--node-netns="+n.OVS.NetnsPath())
		}
		p, err := testbed.StartProcess(dir, "tierflow-agent-"+n.Name, filepath.Join(tf.BinDir, "tierflow-agent"), args...)
		if err != nil {
			tb.Fatal(err)
		}
		tf.procs = append(tf.procs, p)
		tb.Cleanup(func() { p.Stop(20 * time.Second) })
	}

	if tf.QueryToken, err = tf.queryUser(); err != nil {
		tb.Fatalf("query user: %v", err)
	}
	if tf.Query, err = queryapi.NewClient(queryapi.ClientConfig{Address: tf.QueryAddress, Token: tf.QueryToken, CAFile: tf.CAFile, ServerName: "localhost"}); err != nil {
		tb.Fatal(err)
	}
	if err := tf.waitAgentsReady(2 * time.Minute); err != nil {
		tb.Fatalf("%v\n%s", err, tf.Logs(20))
	}
	return tf
}

// Logs returns the tail of every tierflow process's log, for failures.
func (tf *Tierflow) Logs(lines int) string {
	var b strings.Builder
	for _, p := range tf.procs {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", p.Name, p.LogPath, p.LogTail(lines))
	}
	return b.String()
}

// Kubectl runs the test bed's kubectl with its kubeconfig.
func (tf *Tierflow) Kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(tf.Bed.Cluster.BinDir, "kubectl"), append([]string{"--kubeconfig=" + tf.Bed.Cluster.Kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// TierctlArgs are the flags that point tierctl at this controller and,
// on the uplink bed, at the agents' sockets and the one OVS (tierctl then
// runs OVS's tools itself). The encap bed's nodes each have their own OVS:
// tierctl asks the agents through the controller, each running the tools
// on its own node, as on a real cluster.
func (tf *Tierflow) TierctlArgs() []string {
	args := []string{"--kubeconfig=" + tf.Bed.Cluster.Kubeconfig, "--controller=" + tf.QueryAddress,
		"--controller-ca-file=" + tf.CAFile, "--controller-server-name=localhost", "--token=" + tf.QueryToken}
	if tf.Bed.OVS == nil {
		return args
	}
	args = append(args, "--ovs-rundir="+tf.Bed.OVS.Dir)
	for _, n := range tf.Bed.Nodes {
		args = append(args, "--agent-socket="+n.Name+"="+tf.AgentSockets[n.Name])
	}
	return args
}

func (tf *Tierflow) build() error {
	root, err := kubeapi.RepoRoot()
	if err != nil {
		return err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(goBin, "build", "-o", tf.BinDir+"/", "./cmd/tierflow-controller", "./cmd/tierflow-agent", "./cmd/tierctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build tierflow commands: %v\n%s", err, out)
	}
	return nil
}

// tls writes a self-signed serving certificate for "localhost" and
// 127.0.0.1; being self-signed it is its own CA.
func (tf *Tierflow) tls() error {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return err
	}
	tf.CAFile = filepath.Join(tf.Dir, "ca.crt")
	for f, b := range map[string][]byte{tf.CAFile: certPEM, filepath.Join(tf.Dir, "tls.crt"): certPEM, filepath.Join(tf.Dir, "tls.key"): keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// agentToken creates the agent pod of node (host network, as the
// DaemonSet's) and writes a token bound to it, what the kubelet projects.
func (tf *Tierflow) agentToken(node string) (string, error) {
	ctx := context.Background()
	kube := tf.Bed.Cluster.Kube
	pod, err := kube.CoreV1().Pods(AgentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-agent-" + node, Labels: map[string]string{"app": "tierflow-agent"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: AgentSA, HostNetwork: true,
			Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent", Command: []string{"/agnhost", "pause"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	exp := int64(24 * 3600)
	tr, err := kube.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, AgentSA, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{TokenAudience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	file := filepath.Join(tf.Dir, node+".token")
	return file, os.WriteFile(file, []byte(tr.Status.Token+"\n"), 0o600)
}

// queryUser creates QueryUser, allowed to get the query API's resource,
// and returns a token of it.
func (tf *Tierflow) queryUser() (string, error) {
	ctx := context.Background()
	kube := tf.Bed.Cluster.Kube
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: QueryUser}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	role := "tierflow-query-" + QueryUser
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{queryapi.AuthGroup}, Resources: []string{queryapi.AuthResource}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: QueryUser}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	exp := int64(24 * 3600)
	tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, QueryUser, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

func (tf *Tierflow) waitAgentsReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		for _, n := range tf.Bed.Nodes {
			st, err := agentquery.NewClient(tf.AgentSockets[n.Name]).Status(context.Background())
			switch {
			case err != nil:
				notReady = append(notReady, fmt.Sprintf("%s: %v", n.Name, err))
			case !st.Ready:
				notReady = append(notReady, n.Name+": not ready")
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		for _, p := range tf.procs {
			if err := p.ExitErr(); err != nil {
				return fmt.Errorf("%s exited: %v", p.Name, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agents not ready after %v: %s", timeout, strings.Join(notReady, "; "))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func freeAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Record adds where tierflow listens to st (written by `tierflow-testbed
// up` and `make demo`); envFile is the file WriteEnv wrote, if any.
func (tf *Tierflow) Record(st *testbed.State, envFile string) {
	sockets := map[string]string{}
	for n, s := range tf.AgentSockets {
		sockets[n] = s
	}
	st.Tierflow = &testbed.TierflowState{QueryAddress: tf.QueryAddress, CAFile: tf.CAFile, BinDir: tf.BinDir, AgentSockets: sockets, EnvFile: envFile}
}

// WriteEnv writes a shell file that points kubectl, tierctl and ovs-ofctl
// at this cluster: KUBECONFIG, PATH (kubectl, tierctl), OVS_RUNDIR and the
// TIERCTL_* variables tierctl reads for its connection flags (the
// controller's address, CA and server name, the query token, the agents'
// sockets, the vswitchd control socket). Plain exports, so scripts that
// source it work as well as shells.
func (tf *Tierflow) WriteEnv(path, kubeconfig string) error {
	var sockets []string
	for _, n := range tf.Bed.Nodes {
		sockets = append(sockets, n.Name+"="+tf.AgentSockets[n.Name])
	}
	vars := [][2]string{
		{"KUBECONFIG", kubeconfig},
		{"TIERCTL_CONTROLLER", tf.QueryAddress},
		{"TIERCTL_CONTROLLER_CA_FILE", tf.CAFile},
		{"TIERCTL_CONTROLLER_SERVER_NAME", "localhost"},
		{"TIERCTL_TOKEN", tf.QueryToken},
		{"TIERCTL_AGENT_SOCKETS", strings.Join(sockets, ",")},
	}
	// One OVS for every node (uplink bed): local OVS tools reach all of
	// them. Encap bed nodes each have their own: tierctl goes through the
	// controller, whose agents trace their own node.
	if tf.Bed.OVS != nil {
		vars = append(vars, [2]string{"OVS_RUNDIR", tf.Bed.OVS.Dir}, [2]string{"TIERCTL_VSWITCHD_CTL", tf.Bed.OVS.VswitchdCtlPath()})
	}
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "export %s=%q\n", v[0], v[1])
	}
	fmt.Fprintf(&b, "export PATH=%q:%q:\"$PATH\"\n", tf.Bed.Cluster.BinDir, tf.BinDir)
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
