package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestBinaryWritesStatusServesMetricsAndReleasesLease runs the real
// tierflow-controller binary against a real API server: status written,
// /metrics, /readyz, the query API (refusing tokenless requests) and the agent service served, the Lease
// held and released on SIGTERM.
func TestBinaryWritesStatusServesMetricsAndReleasesLease(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	bin := filepath.Join(t.TempDir(), "tierflow-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building tierflow-controller: %v\n%s", err, out)
	}
	ports := freePorts(t, 3)
	metricsAddr, queryAddr, agentAddr := ports[0], ports[1], ports[2]
	certFile, keyFile := writeServingCert(t)

	logPath := filepath.Join(t.TempDir(), "controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--kubeconfig="+c.Kubeconfig, "--id=binary-1", "--leader-elect-namespace=kube-system",
		"--metrics-address="+metricsAddr, "--query-address="+queryAddr, "--agent-listen-address="+agentAddr,
		"--tls-cert-file="+certFile, "--tls-key-file="+keyFile, "--crd-poll-interval=200ms")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("controller log:\n%s", b)
		}
	})

	ctx := context.Background()
	anps := c.Policy.PolicyV1alpha1().AdminNetworkPolicies()
	for _, name := range []string{"one", "two"} {
		anp := &v1alpha1.AdminNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.AdminNetworkPolicySpec{
				Priority: 9,
				Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			},
		}
		if _, err := anps.Create(ctx, anp, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "same-priority warning written by the binary", func() error {
		o, err := anps.Get(ctx, "one", metav1.GetOptions{})
		if err != nil {
			return err
		}
		w := meta.FindStatusCondition(o.Status.Conditions, "Warning")
		if w == nil || w.Reason != "SamePriority" {
			return fmt.Errorf("conditions %+v", o.Status.Conditions)
		}
		return nil
	})
	waitUntil(t, "metrics served", func() error {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, want := range []string{
			`tierflow_controller_status_writes_total{kind="AdminNetworkPolicy"}`,
			`tierflow_controller_api_objects{kind="AdminNetworkPolicy"} 2`,
			`tierflow_controller_sync_duration_seconds_count{kind="AdminNetworkPolicy",operation="status"}`,
			`tierflow_controller_policy_kind_watched{kind="ClusterNetworkPolicy"} 1`,
		} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
	waitUntil(t, "ready (leading, synced)", func() error {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	// The query API (pkg/queryapi) is HTTPS and refuses requests without
	// a token; cmd/tierctl's tests cover authorized queries.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := insecure.Get("https://" + queryAddr + "/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	var qerr struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&qerr)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !strings.Contains(qerr.Error, "bearer token") {
		t.Fatalf("query API without a token: %v, %s %q, want 401 naming the missing bearer token", err, resp.Status, qerr.Error)
	}
	// The agent service speaks TLS with the configured certificate.
	conn, err := tls.Dial("tcp", agentAddr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("agent service: %v", err)
	}
	if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "tierflow-controller" {
		t.Errorf("agent service presents %q", cn)
	}
	conn.Close()
	lease, err := c.Kube.CoordinationV1().Leases("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "binary-1" {
		t.Fatalf("lease holder %v, want binary-1", lease.Spec.HolderIdentity)
	}

	// SIGTERM: a clean exit that releases the lease for the next replica.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("controller exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("controller did not exit after SIGTERM")
	}
	lease, err = c.Kube.CoordinationV1().Leases("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Errorf("lease still held by %q after a clean exit", *lease.Spec.HolderIdentity)
	}
}

func TestBadConfigurationFailsClearly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig=/nonexistent/kubeconfig", "--metrics-address=", "--leader-elect=false"}, "kubernetes client configuration"},
		{[]string{"--workers=0"}, "workers"},
		{[]string{"--agent-listen-address=nonsense"}, "agentListenAddress"},
	} {
		cmd := newCommand()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
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

// writeServingCert writes a self-signed certificate and key for the agent
// service.
func writeServingCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tierflow-controller"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"tierflow-controller.kube-system.svc"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func waitUntil(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
