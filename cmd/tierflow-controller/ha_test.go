package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/manifests"
	"github.com/tierflow/tierflow/pkg/controller/leaderendpoints"
	"github.com/tierflow/tierflow/pkg/queryapi"
	"github.com/tierflow/tierflow/test/kubeapi"
)

const serverName = "tierflow-controller.kube-system.svc"

// TestTwoReplicas runs two controller binaries with leader election as the
// manifests configure them (leaderService, addresses, forwarding), with
// exactly the manifests' RBAC (the controller's service account,
// impersonated) and Service, against a real API server: both are Ready;
// the Service's EndpointSlices hold exactly the leader's addresses (one
// slice per family) and ports; the follower's query API answers a tierctl
// request with the leader's answer and refuses a bad token as the leader
// does; when the leader is killed the follower takes over and rewrites the
// slices (dropping the family it has no address of), and a restarted
// replica forwards to the new leader.
func TestTwoReplicas(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "tierflow-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building tierflow-controller: %v\n%s", err, out)
	}
	applyFromManifests(t, c, "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service")
	kubeconfig := impersonating(t, c, "system:serviceaccount:kube-system:tierflow-controller")
	token := tierctlToken(t, c)
	certFile, keyFile := writeServingCert(t)
	query := queryClient(t, certFile) // self-signed: its own CA
	common := []string{"--kubeconfig=" + kubeconfig, "--leader-elect-namespace=kube-system",
		"--leader-service=kube-system/tierflow-controller",
		"--tls-cert-file=" + certFile, "--tls-key-file=" + keyFile, "--tls-ca-file=" + certFile,
		"--crd-poll-interval=200ms",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}

	// EndpointSlices refuse loopback addresses: the replicas advertise the
	// host's own. ctl-a is dual-stack when the host is, and listens on
	// every address; ctl-b has the IPv4 address only and listens there
	// only. They share the address, so their ports (and the slices'
	// targetRef) tell them apart.
	v4, v6 := hostAddresses(t)
	portOf := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	aPorts := freePortsOn(t, "", 3)
	a := replica{id: "ctl-a", metrics: net.JoinHostPort(v4, portOf(aPorts[0])), query: net.JoinHostPort(v4, portOf(aPorts[1])),
		args: []string{"--advertise-addresses=" + strings.Trim(v4+","+v6, ","), "--metrics-address=" + aPorts[0],
			"--query-address=" + aPorts[1], "--agent-listen-address=" + aPorts[2]}}
	a.agentsPort, a.queryPort = portOf(aPorts[2]), portOf(aPorts[1])
	aSlices := map[string]string{"tierflow-controller-ipv4": v4}
	if v6 != "" {
		aSlices["tierflow-controller-ipv6"] = v6
	}
	bPorts := freePortsOn(t, v4, 3)
	b := replica{id: "ctl-b", metrics: bPorts[0], query: bPorts[1],
		args: []string{"--advertise-addresses=" + v4, "--metrics-address=" + bPorts[0],
			"--query-address=" + bPorts[1], "--agent-listen-address=" + bPorts[2]}}
	b.agentsPort, b.queryPort = portOf(bPorts[2]), portOf(bPorts[1])
	bSlices := map[string]string{"tierflow-controller-ipv4": v4}

	// ctl-a first, so that it leads.
	a.start(t, bin, common)
	waitUntil(t, "ctl-a leads and is ready", func() error { return a.ready("leading") })
	b.start(t, bin, common)
	waitUntil(t, "ctl-b stands by and is ready", func() error { return b.ready(`standing by (leader "ctl-a")`) })
	if err := a.ready("leading"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the Service's slices point at ctl-a", func() error {
		return slicesAre(ctx, c, "ctl-a", aSlices, a.agentsPort, a.queryPort)
	})

	anp := &v1alpha1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "ha-one"},
		Spec: v1alpha1.AdminNetworkPolicySpec{
			Priority: 7,
			Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
		},
	}
	if _, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the leader lists the policy", func() error {
		code, _, body := query(a.query, "/v1/policies", token)
		if code != http.StatusOK || !strings.Contains(body, `"ha-one"`) {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	// The follower answers with the leader's answer, and refuses what the
	// leader refuses, in the same words.
	for _, tc := range []struct {
		what, path, token string
		code              int // 0: whatever the leader says
	}{
		{"policies", "/v1/policies", token, http.StatusOK},
		{"explain", "/v1/explain?src=10.0.0.1&dst=10.0.0.2&port=TCP/80", token, 0},
		{"bad token", "/v1/policies", "not-a-token", http.StatusUnauthorized},
		{"no token", "/v1/snapshot", "", http.StatusUnauthorized},
	} {
		lc, _, lb := query(a.query, tc.path, tc.token)
		fc, fh, fb := query(b.query, tc.path, tc.token)
		if fc != lc || fb != lb || fh.Get(queryapi.LeaderHeader) != "ctl-a" {
			t.Errorf("%s: the follower answered %d %s (leader header %q), the leader %d %s", tc.what, fc, fb, fh.Get(queryapi.LeaderHeader), lc, lb)
		}
		if tc.code != 0 && lc != tc.code {
			t.Errorf("%s: the leader answered %d %s, want %d", tc.what, lc, lb, tc.code)
		}
	}
	// tierctl's own client, pointed at the follower.
	client, err := queryapi.NewClient(queryapi.ClientConfig{Address: b.query, Token: token, CAFile: certFile, ServerName: serverName})
	if err != nil {
		t.Fatal(err)
	}
	pols, err := client.Policies(ctx)
	if err != nil || len(pols.Policies) != 1 || pols.Policies[0].Source.Name != "ha-one" {
		t.Fatalf("tierctl's client through the follower: %+v, %v", pols, err)
	}
	// tierctl as `kubectl exec deploy/tierflow-controller -- tierctl get
	// policies` runs it in a follower's pod: the Deployment's TIERCTL_*
	// environment and the pod's service account token (bound to
	// tierflow-query by the manifests).
	tierctl := filepath.Join(t.TempDir(), "tierctl")
	if out, err := exec.Command("go", "build", "-o", tierctl, "../tierctl").CombinedOutput(); err != nil {
		t.Fatalf("building tierctl: %v\n%s", err, out)
	}
	saToken, err := c.Kube.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "tierflow-controller", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tierctl, "get", "policies")
	cmd.Env = append(os.Environ(), "TIERCTL_CONTROLLER="+b.query, "TIERCTL_CONTROLLER_CA_FILE="+certFile,
		"TIERCTL_CONTROLLER_SERVER_NAME="+serverName, "TIERCTL_TOKEN="+saToken.Status.Token)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "ha-one") {
		t.Errorf("tierctl get policies in the follower's pod: %v\n%s", err, out)
	}

	// The leader crashes (no release: its lease expires). The follower
	// takes over and points the Service at itself; it has no IPv6
	// address, so an IPv6 slice goes.
	a.kill(t, syscall.SIGKILL)
	waitUntil(t, "ctl-b leads and is ready", func() error { return b.ready("leading") })
	waitUntil(t, "the Service's slices point at ctl-b", func() error {
		return slicesAre(ctx, c, "ctl-b", bSlices, b.agentsPort, b.queryPort)
	})
	waitUntil(t, "the new leader lists the policy", func() error {
		code, h, body := query(b.query, "/v1/policies", token)
		if code != http.StatusOK || !strings.Contains(body, `"ha-one"`) || h.Get(queryapi.LeaderHeader) != "" {
			return fmt.Errorf("%d %v %s", code, h, body)
		}
		return nil
	})

	// ctl-a comes back (the kubelet restarts the container): it follows
	// and forwards to ctl-b.
	a.start(t, bin, common)
	waitUntil(t, "ctl-a stands by", func() error { return a.ready(`standing by (leader "ctl-b")`) })
	lc, _, lb := query(b.query, "/v1/policies", token)
	fc, fh, fb := query(a.query, "/v1/policies", token)
	if lc != http.StatusOK || fc != lc || fb != lb || fh.Get(queryapi.LeaderHeader) != "ctl-b" {
		t.Errorf("restarted ctl-a answered %d %s (leader header %q), the leader %d %s", fc, fb, fh.Get(queryapi.LeaderHeader), lc, lb)
	}
	if err := slicesAre(ctx, c, "ctl-b", bSlices, b.agentsPort, b.queryPort); err != nil {
		t.Errorf("a follower changed the slices: %v", err)
	}

	// Both stop cleanly.
	for _, r := range []*replica{&a, &b} {
		r.kill(t, syscall.SIGTERM)
		if r.exitErr != nil {
			t.Errorf("%s exited with %v after SIGTERM", r.id, r.exitErr)
		}
	}
}

// replica is one controller process; start may be called again after
// kill (a restart, same identity and addresses).
type replica struct {
	id                    string
	metrics, query        string // host:port
	agentsPort, queryPort string
	args                  []string

	cmd     *exec.Cmd
	exited  chan error
	exitErr error
	runs    int
}

func (r *replica) start(t *testing.T, bin string, common []string) {
	t.Helper()
	r.runs++
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.log", r.id, r.runs))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, append(append([]string{"--id=" + r.id}, common...), r.args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	r.cmd, r.exited = cmd, exited
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log (run %d):\n%s", r.id, r.runs, b)
		}
	})
}

// kill signals the process and waits for it to exit.
func (r *replica) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case r.exitErr = <-r.exited:
		r.exited <- r.exitErr // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit after %v", r.id, sig)
	}
}

// ready checks /readyz: 200 and a body mentioning state.
func (r *replica) ready(state string) error {
	resp, err := http.Get("http://" + r.metrics + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), state) {
		return fmt.Errorf("%s /readyz: %s %q, want 200 mentioning %q", r.id, resp.Status, body, state)
	}
	return nil
}

// queryClient asks a query API as tierctl does: HTTPS verified with the
// CA by the Service's name (the certificate's), the token as bearer.
func queryClient(t *testing.T, caFile string) func(addr, path, token string) (int, http.Header, string) {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate")
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}}}
	return func(addr, path, token string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s from %s: %v", path, addr, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}
}

// slicesAre checks that the Service's EndpointSlices are exactly want
// (name → address), the holder's, with its ports.
func slicesAre(ctx context.Context, c *kubeapi.Cluster, holder string, want map[string]string, agentsPort, queryPort string) error {
	list, err := c.Kube.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=tierflow-controller"})
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, s := range list.Items {
		if len(s.Endpoints) != 1 || s.Endpoints[0].TargetRef == nil || s.Endpoints[0].TargetRef.Name != holder || len(s.Endpoints[0].Addresses) != 1 {
			return fmt.Errorf("%s: endpoints %+v, want one of %s", s.Name, s.Endpoints, holder)
		}
		got[s.Name] = s.Endpoints[0].Addresses[0]
		ports := map[string]string{}
		for _, p := range s.Ports {
			ports[*p.Name] = fmt.Sprint(*p.Port)
		}
		if ports[leaderendpoints.PortAgents] != agentsPort || ports[leaderendpoints.PortQuery] != queryPort || len(ports) != 2 {
			return fmt.Errorf("%s: ports %v, want agents %s, query %s", s.Name, ports, agentsPort, queryPort)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("slices %v, want %v", got, want)
	}
	return nil
}

// applyFromManifests applies the objects of manifests/tierflow.yaml of
// the given kinds with kubectl.
func applyFromManifests(t *testing.T, c *kubeapi.Cluster, kinds ...string) {
	t.Helper()
	data, err := os.ReadFile("../../manifests/tierflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked, err := manifests.Check(data)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, obj := range checked.Objects {
		for _, k := range kinds {
			if obj.GetKind() == k {
				b, err := yaml.Marshal(obj.Object)
				if err != nil {
					t.Fatal(err)
				}
				out.WriteString("---\n")
				out.Write(b)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "subset.yaml")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Kubectl(t, "apply", "-f", path)
}

// impersonating writes a kubeconfig of the cluster's admin impersonating a
// service account, so that the manifests' RBAC decides what it may do.
func impersonating(t *testing.T, c *kubeapi.Cluster, user string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = user
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "controller.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tierctlToken is a token of a service account bound to the manifests'
// tierflow-query ClusterRole, as tierctl's user would have.
func tierctlToken(t *testing.T, c *kubeapi.Cluster) string {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tierctl"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tierctl"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "tierflow-query"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tierctl", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.Kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, "tierctl", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// hostAddresses returns an IPv4 and (if any) an IPv6 address of this
// host that EndpointSlices accept (not loopback, not link-local): the
// source address of the default route of each family (stable, unlike the
// interfaces other tests create), else the first such address of an
// interface that is up.
func hostAddresses(t *testing.T) (v4, v6 string) {
	t.Helper()
	usable := func(ip net.IP) bool { return ip != nil && ip.IsGlobalUnicast() }
	for _, probe := range []string{"192.0.2.1:9", "[2001:db8::1]:9"} {
		// A UDP "connection" sends nothing: it only picks the route.
		conn, err := net.Dial("udp", probe)
		if err != nil {
			continue
		}
		ip := conn.LocalAddr().(*net.UDPAddr).IP
		conn.Close()
		switch {
		case !usable(ip):
		case ip.To4() != nil:
			v4 = ip.String()
		default:
			v6 = ip.String()
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !usable(ipn.IP) {
				continue
			}
			if ipn.IP.To4() != nil && v4 == "" {
				v4 = ipn.IP.String()
			} else if ipn.IP.To4() == nil && v6 == "" {
				v6 = ipn.IP.String()
			}
		}
	}
	if v4 == "" {
		t.Fatal("this host has no IPv4 address other than loopback and link-local: the replicas need one to advertise (EndpointSlices refuse loopback)")
	}
	t.Logf("advertising %s %s", v4, v6)
	return v4, v6
}

// freePortsOn is freePorts on another address ("": every address).
func freePortsOn(t *testing.T, ip string, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range ls {
		ln.Close()
	}
	return out
}
