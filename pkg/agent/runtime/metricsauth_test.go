package runtime_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/livecluster"
)

// TestMetricsAuthorization: the agent's metrics port is on the host
// network, so any pod of the node reaches it. Bound to every address, its
// /metrics answers only a Kubernetes token whose user may get /metrics
// (TokenReview and SubjectAccessReview against a real kube-apiserver):
// a request without a token (what any pod can send) gets 401, a pod's
// service account without the permission 403, a scraper's service
// account bound to the permission the metrics. Health endpoints stay open
// for the kubelet's probes. Without API server access to check tokens the
// agent refuses to serve such an address at all.
func TestMetricsAuthorization(t *testing.T) {
	c := kubeapi.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.CreateNamespace(t, "monitoring", nil)
	for _, sa := range []string{"prometheus", "some-pod"} {
		if _, err := c.Kube.CoreV1().ServiceAccounts("monitoring").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What manifests/parts/10-rbac.yaml ships as tierflow-metrics-reader
	// (manifests/apply_test.go checks that role itself).
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "monitoring", Name: "prometheus"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := c.Kube.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	e := newNoneEnv(t)
	opts := e.options("n1")
	opts.Config.MetricsAddress = ":0" // every address: the host network
	opts.Config.Kubeconfig = c.Kubeconfig
	ag := livecluster.StartAgent(t, "n1", opts)
	var addr string
	livecluster.Eventually(t, 10*time.Second, "agent answers", func() error {
		st, err := ag.Q.Status(ctx)
		if err == nil {
			addr = st.MetricsAddress
		}
		return err
	})
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/metrics", ""); code != http.StatusUnauthorized || strings.Contains(body, "tierflow_") {
		t.Errorf("/metrics without a token: %d %q, want 401 and no metrics", code, body)
	}
	if code, body := get("/metrics", "not-a-token"); code != http.StatusUnauthorized || strings.Contains(body, "tierflow_") {
		t.Errorf("/metrics with a made-up token: %d %q, want 401", code, body)
	}
	if code, body := get("/metrics", token("some-pod")); code != http.StatusForbidden || strings.Contains(body, "tierflow_") {
		t.Errorf("/metrics with a pod's token: %d %q, want 403", code, body)
	}
	if code, body := get("/metrics", token("prometheus")); code != http.StatusOK || !strings.Contains(body, "tierflow_agent_") {
		t.Errorf("/metrics with the scraper's token: %d, want 200 with the metrics:\n%.300s", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(path, ""); code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Errorf("%s without a token: %d, want the probe's answer", path, code)
		}
	}

	// Loopback only: no token needed (only the node's own processes
	// reach it).
	lo := e.options("n2")
	lo.Config.MetricsAddress = "127.0.0.1:0"
	loAgent := livecluster.StartAgent(t, "n2", lo)
	livecluster.Eventually(t, 10*time.Second, "loopback metrics", func() error {
		st, err := loAgent.Q.Status(ctx)
		if err != nil {
			return err
		}
		resp, err := http.Get("http://" + st.MetricsAddress + "/metrics")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("loopback /metrics: %d", resp.StatusCode)
		}
		return nil
	})

	// Every address and no way to check tokens: refused at start.
	bad := e.options("n3")
	bad.Config.MetricsAddress = ":0"
	bad.Config.Kubeconfig = ""
	a, err := runtime.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "needs authorization") {
		t.Errorf("non-loopback metrics without API access: %v, want refused", err)
	}
}
