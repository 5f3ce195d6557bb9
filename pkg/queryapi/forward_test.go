package queryapi

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
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI is a CA and a serving certificate signed by it for the
// controller Service's names (not for any address).
type testPKI struct {
	caFile, certFile, keyFile string
	serving                   tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "tierflow-controller.kube-system.svc"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames:    []string{"tierflow-controller", "tierflow-controller.kube-system.svc"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &testPKI{caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	for f, b := range map[string][]byte{
		p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: certPEM, p.keyFile: keyPEM,
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if p.serving, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForwarding: a follower passes requests to the leader's query API
// unchanged (the caller's token included) and its answers back unchanged,
// refusals too; it verifies the leader's certificate by the serving
// certificate's name, and says clearly why it cannot forward.
func TestForwarding(t *testing.T) {
	pki := newTestPKI(t)
	leader := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			writeError(w, http.StatusUnauthorized, "unauthenticated: token not accepted")
			return
		}
		w.Header().Set("X-Leader-Saw", r.Header.Get(ForwardedByHeader)+" "+r.URL.RequestURI())
		writeJSON(w, map[string]string{"answer": "from the leader"})
	}))
	leader.TLS = &tls.Config{Certificates: []tls.Certificate{pki.serving}}
	leader.StartTLS()
	t.Cleanup(leader.Close)
	leaderAddr := leader.Listener.Addr().String()

	leaderTLS, err := LeaderTLS(pki.caFile, pki.certFile)
	if err != nil {
		t.Fatal(err)
	}
	if leaderTLS.ServerName != "tierflow-controller" {
		t.Errorf("server name %q, want the certificate's first DNS name", leaderTLS.ServerName)
	}
	leading := false
	var leaderID, addr string
	var leaderErr error
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]string{"answer": "local"})
	})
	follower := httptest.NewServer(WithForwarding(local, Follower{
		Self:    "ctl-b",
		Leading: func() bool { return leading },
		Leader: func(context.Context) (string, string, error) {
			return leaderID, addr, leaderErr
		},
		TLS: leaderTLS,
	}))
	t.Cleanup(follower.Close)

	do := func(token string, header map[string]string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, follower.URL+"/v1/explain?src=a%2Fb&port=TCP%2F80", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	errorOf := func(body string) string {
		var e Error
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("not a JSON error: %q", body)
		}
		return e.Error
	}

	leaderID, addr = "ctl-a", leaderAddr
	code, h, body := do("good", nil)
	if code != http.StatusOK || !strings.Contains(body, "from the leader") || h.Get(LeaderHeader) != "ctl-a" ||
		h.Get("X-Leader-Saw") != "ctl-b /v1/explain?src=a%2Fb&port=TCP%2F80" {
		t.Errorf("forwarded: %d %v %s", code, h, body)
	}
	code, _, body = do("bad", nil)
	if code != http.StatusUnauthorized || errorOf(body) != "unauthenticated: token not accepted" {
		t.Errorf("bad token: %d %s, want the leader's 401", code, body)
	}

	leading = true
	if code, _, body = do("", nil); code != http.StatusOK || !strings.Contains(body, "local") {
		t.Errorf("leading: %d %s, want the local answer", code, body)
	}
	leading = false

	for name, tc := range map[string]struct {
		id, addr string
		err      error
		header   map[string]string
		code     int
		want     string
	}{
		"no leader":          {err: ErrNoLeader, code: http.StatusServiceUnavailable, want: "replica ctl-b is not the leader and cannot forward the request: no leader elected"},
		"elected just now":   {id: "ctl-b", addr: "127.0.0.1:1", code: http.StatusServiceUnavailable, want: "not ready"},
		"forwarded already":  {id: "ctl-a", addr: leaderAddr, header: map[string]string{ForwardedByHeader: "ctl-c"}, code: http.StatusServiceUnavailable, want: "replica ctl-c forwarded the request here"},
		"leader unreachable": {id: "ctl-a", addr: closedAddress(t), code: http.StatusBadGateway, want: "the leader ctl-a at 127.0.0.1:"},
	} {
		leaderID, addr, leaderErr = tc.id, tc.addr, tc.err
		code, _, body := do("good", tc.header)
		if code != tc.code || !strings.Contains(errorOf(body), tc.want) {
			t.Errorf("%s: %d %s, want %d mentioning %q", name, code, body, tc.code, tc.want)
		}
	}

	// A leader whose certificate is not for the expected name is not
	// trusted (it could be anyone listening at that address).
	other := leaderTLS.Clone()
	other.ServerName = "someone-else"
	follower.Config.Handler = WithForwarding(local, Follower{
		Self: "ctl-b", Leading: func() bool { return false }, TLS: other,
		Leader: func(context.Context) (string, string, error) { return "ctl-a", leaderAddr, nil },
	})
	code, _, body = do("good", nil)
	if code != http.StatusBadGateway || !strings.Contains(errorOf(body), "certificate") {
		t.Errorf("wrong certificate name: %d %s", code, body)
	}
}

func TestLeaderTLSNeedsFiles(t *testing.T) {
	pki := newTestPKI(t)
	if _, err := LeaderTLS(filepath.Join(t.TempDir(), "missing"), pki.certFile); err == nil {
		t.Error("a missing CA was accepted")
	}
	if _, err := LeaderTLS(pki.keyFile, pki.certFile); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as CA: %v", err)
	}
	if _, err := LeaderTLS(pki.caFile, pki.keyFile); err == nil || !strings.Contains(err.Error(), "serving certificate") {
		t.Errorf("a key as serving certificate: %v", err)
	}
}

func closedAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
