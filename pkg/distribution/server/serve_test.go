package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/pkg/compute"
)

func writePair(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Write to temporary names and rename, as a Secret volume update does.
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

// TestServeReloadsRotatedCertificate: a new connection after the
// certificate files change sees the new certificate; Serve returns when
// its context ends.
func TestServeReloadsRotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	pool1 := writePair(t, dir)
	cfg, err := TLSFromFiles(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv := New(compute.New(), StaticTokens{}, Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, cfg) }()

	handshake := func(pool *x509.CertPool) error {
		c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := handshake(pool1); err != nil {
		t.Fatalf("first certificate: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // distinct mtimes on coarse filesystems
	pool2 := writePair(t, dir)
	if err := handshake(pool2); err != nil {
		t.Fatalf("rotated certificate not served: %v", err)
	}
	if err := handshake(pool1); err == nil {
		t.Fatal("old certificate still served after rotation")
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestTLSFromFilesMissing(t *testing.T) {
	if _, err := TLSFromFiles("/nonexistent/tls.crt", "/nonexistent/tls.key"); err == nil {
		t.Fatal("missing files accepted")
	}
}
