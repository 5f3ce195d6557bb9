package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Serve serves agents on lis with TLS until ctx ends. Streams are
// long-lived, so stopping does not wait for them: agents reconnect to the
// next controller process.
func (s *Server) Serve(ctx context.Context, lis net.Listener, tlsConfig *tls.Config) error {
	g := s.GRPCServer(tlsConfig)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			g.Stop()
		case <-done:
		}
	}()
	if err := g.Serve(lis); err != nil && ctx.Err() == nil {
		return fmt.Errorf("distribution server: %w", err)
	}
	return nil
}

// TLSFromFiles returns a server TLS config presenting the certificate in
// certFile and keyFile (PEM). The files are re-read when they change, so
// a rotated Secret or cert-manager renewal needs no restart; until a
// changed pair loads cleanly the previous one stays in use.
func TLSFromFiles(certFile, keyFile string) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

type certReloader struct {
	certFile, keyFile string

	mu        sync.Mutex
	cert      *tls.Certificate
	certMtime time.Time
	keyMtime  time.Time
}

func (r *certReloader) load() error {
	cm, km, err := r.mtimes()
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("distribution server certificate: %w", err)
	}
	r.mu.Lock()
	r.cert, r.certMtime, r.keyMtime = &pair, cm, km
	r.mu.Unlock()
	return nil
}

func (r *certReloader) mtimes() (time.Time, time.Time, error) {
	c, err := os.Stat(r.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("distribution server certificate: %w", err)
	}
	k, err := os.Stat(r.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("distribution server key: %w", err)
	}
	return c.ModTime(), k.ModTime(), nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cm, km, err := r.mtimes()
	r.mu.Lock()
	changed := err == nil && (!cm.Equal(r.certMtime) || !km.Equal(r.keyMtime))
	r.mu.Unlock()
	if changed {
		// A half-written pair fails to load; keep serving the old one.
		_ = r.load()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}
