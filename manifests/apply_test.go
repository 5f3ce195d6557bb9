package manifests

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/pkg/config/cniinstall"
	"github.com/tierflow/tierflow/test/kubeapi"
)

const fieldManager = "tierflow-install-test"

// TestApplyToRealAPIServer installs manifests/tierflow.yaml into a real
// kube-apiserver with server-side apply, reads every object back, applies
// again (no change), applies with kubectl as the README says, creates the
// TLS Secret with create-tls-secret.sh, checks the RBAC grants exactly what
// the components need, and runs tierflow-install-cni with the agent's
// permissions.
func TestApplyToRealAPIServer(t *testing.T) {
	data, err := os.ReadFile("tierflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked, err := Check(data)
	if err != nil {
		t.Fatal(err)
	}
	c := kubeapi.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))
	resource := func(obj *unstructured.Unstructured) dynamic.ResourceInterface {
		t.Helper()
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset() // a CRD applied just now
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
			}
		}
		if obj.GetNamespace() != "" {
			return c.Dynamic.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		return c.Dynamic.Resource(m.Resource)
	}
	apply := func(obj *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		live, err := resource(obj).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager})
		if err != nil {
			t.Fatalf("server-side apply of %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		return live
	}

	// version identifies an object's content: its generation when it has
	// one (the API server's own status updates, such as a CRD becoming
	// Established, change the resourceVersion but not the generation), its
	// resourceVersion otherwise.
	version := func(u *unstructured.Unstructured) string {
		if g := u.GetGeneration(); g != 0 {
			return fmt.Sprintf("generation %d", g)
		}
		return "resourceVersion " + u.GetResourceVersion()
	}
	// CRDs first, then everything else once they are Established.
	versions := map[string]string{}
	for _, obj := range checked.Objects {
		if obj.GetKind() == "CustomResourceDefinition" {
			versions[key(obj)] = version(apply(obj))
			waitEstablished(t, ctx, c.Dynamic, obj.GetName())
		}
	}
	for _, obj := range checked.Objects {
		if obj.GetKind() != "CustomResourceDefinition" {
			versions[key(obj)] = version(apply(obj))
		}
	}

	// Every object reads back with every field of the manifest.
	for _, obj := range checked.Objects {
		live, err := resource(obj).Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading back %s: %v", key(obj), err)
		}
		if path, ok := subset(obj.Object, live.Object, ""); !ok {
			t.Errorf("%s read back differs from the manifest at %s", key(obj), path)
		}
		if v := version(live); v != versions[key(obj)] {
			t.Errorf("%s changed after apply (%s → %s)", key(obj), versions[key(obj)], v)
		}
	}

	// Applying again changes nothing.
	for _, obj := range checked.Objects {
		if v := version(apply(obj)); v != versions[key(obj)] {
			t.Errorf("re-applying %s changed it (%s → %s)", key(obj), versions[key(obj)], v)
		}
	}

	// The README's way: kubectl apply -f.
	out := c.Kubectl(t, "apply", "-f", "tierflow.yaml")
	if strings.Count(out, "tierflow") < 10 {
		t.Errorf("kubectl apply output:\n%s", out)
	}
	for _, o := range []string{"deployment.apps/tierflow-controller", "daemonset.apps/tierflow-agent", "configmap/tierflow-config", "service/tierflow-controller"} {
		c.Kubectl(t, "-n", Namespace, "get", o)
	}

	// The uninstall step's manifest is valid for the API server too.
	if out := c.Kubectl(t, "apply", "--dry-run=server", "-f", "tierflow-cleanup.yaml"); !strings.Contains(out, "daemonset.apps/tierflow-cleanup") {
		t.Errorf("kubectl apply --dry-run=server -f tierflow-cleanup.yaml:\n%s", out)
	}

	t.Run("tls secret", func(t *testing.T) { testTLSSecret(t, ctx, c) })
	t.Run("rbac", func(t *testing.T) { testRBAC(t, ctx, c, checked) })
	t.Run("install-cni with the agent's permissions", func(t *testing.T) { testInstallCNI(t, ctx, c, checked) })
}

func key(obj *unstructured.Unstructured) string {
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

func waitEstablished(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string) {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not Established: %v", name, err)
	}
}

// subset reports whether every field of want is in got with the same value
// (numbers compared by value, since YAML and JSON decode them differently);
// got may have more (defaults, status, metadata). It returns the first
// differing path.
func subset(want, got any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		for k, wv := range w {
			if path == "" && k == "status" {
				continue // the server owns status
			}
			gv, ok := g[k]
			if !ok {
				if wv == nil {
					continue
				}
				return path + "." + k, false
			}
			if p, ok := subset(wv, gv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	case int64, float64, int:
		return path, fmt.Sprint(toFloat(want)) == fmt.Sprint(toFloat(got))
	default:
		return path, reflect.DeepEqual(want, got)
	}
}

func toFloat(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	}
	return v
}

// testTLSSecret runs create-tls-secret.sh with the cluster's kubectl and
// checks the Secret: a serving certificate for the Service's DNS names that
// chains to the ca.crt the agents are given.
func testTLSSecret(t *testing.T, ctx context.Context, c *kubeapi.Cluster) {
	// Twice: running it again replaces the Secret.
	for _, args := range [][]string{{"--days", "30"}, nil} {
		cmd := exec.Command("./create-tls-secret.sh", args...)
		cmd.Env = append(os.Environ(), "KUBECTL="+filepath.Join(c.BinDir, "kubectl")+" --kubeconfig="+c.Kubeconfig)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("create-tls-secret.sh %v: %v\n%s", args, err, out)
		}
	}
	s, err := c.Kube.CoreV1().Secrets(Namespace).Get(ctx, TLSSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %s", s.Type)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tierflow-controller.kube-system.svc", "tierflow-controller.kube-system.svc.cluster.local"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}
	if block, _ := pem.Decode(s.Data["tls.key"]); block == nil {
		t.Error("tls.key holds no key")
	}
}

// testRBAC asks the API server's authorizer what each service account may
// do: what the components need is allowed, a sample of what they do not
// need is denied.
func testRBAC(t *testing.T, ctx context.Context, c *kubeapi.Cluster, checked *Checked) {
	type check struct {
		verb, group, resource, sub, ns, name string
		allowed                              bool
	}
	lease := checked.Controller.LeaderElection
	for sa, checks := range map[string][]check{
		ControllerName: {
			{"watch", "", "pods", "", "", "", true},
			{"list", "", "namespaces", "", "", "", true},
			{"watch", "", "nodes", "", "", "", true},
			{"list", "networking.k8s.io", "networkpolicies", "", "", "", true},
			{"watch", "policy.networking.k8s.io", "adminnetworkpolicies", "", "", "", true},
			{"list", "policy.networking.k8s.io", "baselineadminnetworkpolicies", "", "", "", true},
			{"watch", "policy.networking.k8s.io", "clusternetworkpolicies", "", "", "", true},
			{"patch", "policy.networking.k8s.io", "adminnetworkpolicies", "status", "", "x", true},
			{"update", "policy.networking.k8s.io", "clusternetworkpolicies", "status", "", "x", true},
			{"watch", "apiextensions.k8s.io", "customresourcedefinitions", "", "", "", true},
			{"create", "", "events", "", "team-a", "", true},
			{"create", "authentication.k8s.io", "tokenreviews", "", "", "", true},
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", "", true},
			{"create", "coordination.k8s.io", "leases", "", lease.LeaseNamespace, "", true},
			{"update", "coordination.k8s.io", "leases", "", lease.LeaseNamespace, lease.LeaseName, true},
			{"get", "coordination.k8s.io", "leases", "", lease.LeaseNamespace, lease.LeaseName, true},
			// The leader points its Service at itself; followers read it.
			{"get", "", "services", "", Namespace, ControllerName, true},
			{"create", "discovery.k8s.io", "endpointslices", "", Namespace, "", true},
			{"list", "discovery.k8s.io", "endpointslices", "", Namespace, "", true},
			{"watch", "discovery.k8s.io", "endpointslices", "", Namespace, "", true},
			{"get", "discovery.k8s.io", "endpointslices", "", Namespace, ControllerName + "-ipv6", true},
			{"update", "discovery.k8s.io", "endpointslices", "", Namespace, ControllerName + "-ipv4", true},
			{"delete", "discovery.k8s.io", "endpointslices", "", Namespace, ControllerName + "-ipv6", true},
			// tierctl in the controller's pods uses their token.
			{"get", "tierflow.io", "queries", "", "", "policies", true},
			{"get", "tierflow.io", "queries", "", "", "trace", true},
			// Not needed: denied.
			{"update", "coordination.k8s.io", "leases", "", lease.LeaseNamespace, "kube-scheduler", false},
			{"update", "policy.networking.k8s.io", "adminnetworkpolicies", "", "", "x", false},
			{"update", "networking.k8s.io", "networkpolicies", "", "team-a", "x", false},
			{"delete", "", "pods", "", "team-a", "x", false},
			{"get", "", "secrets", "", Namespace, TLSSecretName, false},
			{"update", "", "nodes", "", "", "x", false},
			{"update", "discovery.k8s.io", "endpointslices", "", Namespace, "kube-dns-x7k2p", false},
			{"delete", "discovery.k8s.io", "endpointslices", "", Namespace, "kube-dns-x7k2p", false},
			{"create", "discovery.k8s.io", "endpointslices", "", "team-a", "", false},
			{"get", "", "services", "", Namespace, "kube-dns", false},
			{"update", "", "services", "", Namespace, ControllerName, false},
			{"create", "tierflow.io", "queries", "", "", "policies", false},
		},
		AgentName: {
			{"get", "", "nodes", "", "", "node-a", true},
			// The node network tunnels or routes to every Node's pod CIDRs.
			{"list", "", "nodes", "", "", "", true},
			{"watch", "", "nodes", "", "", "", true},
			{"update", "", "nodes", "", "", "node-a", false},
			{"patch", "", "nodes", "", "", "node-a", false},
			{"list", "", "pods", "", "", "", false},
			{"get", "", "secrets", "", Namespace, TLSSecretName, false},
			// /metrics answers only authorized scrapers.
			{"create", "authentication.k8s.io", "tokenreviews", "", "", "", true},
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", "", true},
			{"list", "policy.networking.k8s.io", "adminnetworkpolicies", "", "", "", false},
		},
	} {
		user := "system:serviceaccount:" + Namespace + ":" + sa
		for _, ch := range checks {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: ch.verb, Group: ch.group, Resource: ch.resource, Subresource: ch.sub, Namespace: ch.ns, Name: ch.name,
				},
			}}
			res, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status.Allowed != ch.allowed {
				t.Errorf("%s %s %s.%s/%s ns=%q name=%q: allowed=%v, want %v", sa, ch.verb, ch.resource, ch.group, ch.sub, ch.ns, ch.name, res.Status.Allowed, ch.allowed)
			}
		}
	}

	// tierflow-query is bound to the controller only; bound to a user, it
	// grants get on the query API's endpoints and nothing else.
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-tierflow-query"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tierflow-query"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "tierctl-user"}},
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	allowed := func(verb, group, resource, name string) (bool, error) {
		res, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "tierctl-user", Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Name: name},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return res.Status.Allowed, nil
	}
	// RBAC sees a new binding within moments.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return allowed("get", "tierflow.io", "queries", "snapshot")
	}); err != nil {
		t.Fatalf("tierflow-query does not grant get queries/snapshot: %v", err)
	}
	for _, ch := range []struct {
		verb, group, resource, name string
		want                        bool
	}{
		{"get", "tierflow.io", "queries", "policies", true},
		{"get", "tierflow.io", "queries", "explain", true},
		{"get", "tierflow.io", "queries", "flows", true},
		{"get", "tierflow.io", "queries", "trace", true},
		{"get", "tierflow.io", "queries", "other", false},
		{"create", "tierflow.io", "queries", "flows", false},
		{"get", "", "pods", "x", false},
		{"get", "", "secrets", TLSSecretName, false},
	} {
		got, err := allowed(ch.verb, ch.group, ch.resource, ch.name)
		if err != nil {
			t.Fatal(err)
		}
		if got != ch.want {
			t.Errorf("tierflow-query: %s %s.%s %q allowed=%v, want %v", ch.verb, ch.resource, ch.group, ch.name, got, ch.want)
		}
	}

	// tierflow-metrics-reader, bound to a scraper, grants get /metrics
	// (what the agents' metrics port asks) and nothing else.
	scraper := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-tierflow-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tierflow-metrics-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "scraper"}},
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, scraper, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), scraper.Name, metav1.DeleteOptions{})
	})
	nonResource := func(user, verb, path string) (bool, error) {
		res, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: path},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return res.Status.Allowed, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return nonResource("scraper", "get", "/metrics")
	}); err != nil {
		t.Fatalf("tierflow-metrics-reader does not grant get /metrics: %v", err)
	}
	for _, ch := range []struct {
		user, verb, path string
		want             bool
	}{
		{"scraper", "post", "/metrics", false},
		{"someone-else", "get", "/metrics", false},
	} {
		got, err := nonResource(ch.user, ch.verb, ch.path)
		if err != nil {
			t.Fatal(err)
		}
		if got != ch.want {
			t.Errorf("tierflow-metrics-reader: %s %s %s allowed=%v, want %v", ch.user, ch.verb, ch.path, got, ch.want)
		}
	}
}

// testInstallCNI runs the real tierflow-install-cni binary as the init
// container does — the ConfigMap's agent.yaml, NODE_NAME, the agent's
// service account (impersonated) — against a Node whose pod CIDRs are
// allocated while it waits.
func testInstallCNI(t *testing.T, ctx context.Context, c *kubeapi.Cluster, checked *Checked) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tierflow-install-cni")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/tierflow-install-cni").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tierflow-cni", "host-local", "loopback"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The agent's identity: the admin certificate impersonating the
	// service account, so the manifest's RBAC decides.
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + Namespace + ":" + AgentName
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"}
	}
	agentKubeconfig := filepath.Join(dir, "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, agentKubeconfig); err != nil {
		t.Fatal(err)
	}
	cm, err := c.Kube.CoreV1().ConfigMaps(Namespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentYAML := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(agentYAML, []byte(cm.Data[AgentKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if _, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	confDir, binDir := filepath.Join(dir, "net.d"), filepath.Join(dir, "bin")
	cmd := exec.Command(bin, "--config="+agentYAML, "--kubeconfig="+agentKubeconfig, "--source-dir="+src,
		"--cni-conf-dir="+confDir, "--cni-bin-dir="+binDir, "--wait=60s")
	cmd.Env = append(os.Environ(), "NODE_NAME=node-a")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Still waiting: the node has no pod CIDRs yet.
	select {
	case err := <-done:
		t.Fatalf("tierflow-install-cni returned before the node had pod CIDRs: %v\n%s", err, out.String())
	case <-time.After(3 * time.Second):
	}
	node, err = c.Kube.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.244.7.0/24", []string{"10.244.7.0/24", "fd00:10:244:7::/64"}
	if node, err = c.Kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The release manifest's encap mode derives the pods' MTU from the
	// interface holding the node's InternalIP (here: this machine's
	// loopback, MTU 65536, less Geneve's 50 bytes over IPv4).
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tierflow-install-cni: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("tierflow-install-cni did not finish:\n%s", out.String())
	}
	conf, err := os.ReadFile(filepath.Join(confDir, cniinstall.ConflistName))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"subnet": "10.244.7.0/24"`, `"subnet": "fd00:10:244:7::/64"`, `"bridge": "br-int"`, `"ovsdbSocket": "/run/openvswitch/db.sock"`, `"mtu": 65486`} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("conflist lacks %s:\n%s", want, conf)
		}
	}
	for _, name := range []string{"tierflow-cni", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			t.Error(err)
		}
	}

	// A node the agent's identity cannot read is a clear error, not a
	// wait: a service account without the agent's binding gets nothing.
	kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Impersonate = "system:serviceaccount:" + Namespace + ":default"
	if err := clientcmd.WriteToFile(*kc, agentKubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "--config="+agentYAML, "--kubeconfig="+agentKubeconfig, "--source-dir="+src,
		"--cni-conf-dir="+confDir, "--cni-bin-dir="+binDir, "--wait=60s")
	cmd.Env = append(os.Environ(), "NODE_NAME=node-a")
	start := time.Now()
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "forbidden") || time.Since(start) > 20*time.Second {
		t.Errorf("without RBAC: err=%v after %s\n%s", err, time.Since(start), b)
	}
}
