package queryapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"time"
)

// Headers of forwarded requests and their answers.
const (
	// ForwardedByHeader names the follower that forwarded a request. A
	// replica never forwards such a request again: at most one hop, and
	// no loop while leadership changes hands.
	ForwardedByHeader = "Tierflow-Forwarded-By"
	// LeaderHeader names the leader that answered a forwarded request.
	LeaderHeader = "Tierflow-Leader"
)

// ErrNoLeader is what Follower.Leader returns when no replica holds the
// Lease.
var ErrNoLeader = errors.New("no leader elected")

// Follower configures the query API of a replica that may not lead.
type Follower struct {
	// Self is this replica's identity (its Lease holder identity).
	Self string
	// Leading reports whether this replica leads: its own handler answers
	// then.
	Leading func() bool
	// Leader returns the leader's identity and its query API's address
	// (host:port); ErrNoLeader, or another error when the address is not
	// known.
	Leader func(ctx context.Context) (identity, address string, err error)
	// TLS verifies the leader's certificate: RootCAs and ServerName (see
	// LeaderTLS).
	TLS *tls.Config
	Log *slog.Logger
}

// WithForwarding serves requests with local while this replica leads and
// forwards them, unchanged, to the leader's query API otherwise, so that
// tierctl gets the leader's answer from either replica (kubectl exec lands
// in any pod of the Deployment). The follower neither authenticates nor
// authorizes: the request's Authorization header goes to the leader, which
// does both exactly as for a request made to it directly, and its answer
// (a refusal too) is passed back as it is, with LeaderHeader added.
//
// Errors of the follower itself are JSON like the API's own: 503 when no
// leader is known or the request was already forwarded once, 502 when the
// leader cannot be reached or its certificate is not trusted.
func WithForwarding(local http.Handler, f Follower) http.Handler {
	if f.Log == nil {
		f.Log = slog.Default()
	}
	return &forwarder{local: local, f: f, transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig:       f.TLS,
		TLSHandshakeTimeout:   5 * time.Second,
		ForceAttemptHTTP2:     true,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
	}}
}

type forwarder struct {
	local     http.Handler
	f         Follower
	transport http.RoundTripper
}

func (fw *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := fw.f
	if f.Leading() {
		fw.local.ServeHTTP(w, r)
		return
	}
	if by := r.Header.Get(ForwardedByHeader); by != "" {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("replica %s is not the leader (replica %s forwarded the request here while leadership changed hands): retry", f.Self, by))
		return
	}
	id, addr, err := f.Leader(r.Context())
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("replica %s is not the leader and cannot forward the request: %v; retry", f.Self, err))
		return
	case id == f.Self:
		// Elected a moment ago: the term is starting.
		writeError(w, http.StatusServiceUnavailable, "controller not ready (leading, caches not synced yet)")
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", addr, ""
			pr.Out.Header.Set(ForwardedByHeader, f.Self)
		},
		Transport: fw.transport,
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(LeaderHeader, id)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.Log.Info("forwarding a query to the leader failed", "leader", id, "address", addr, "path", r.URL.Path, "err", err)
			writeError(w, http.StatusBadGateway, fmt.Sprintf("replica %s is not the leader; the leader %s at %s: %v", f.Self, id, addr, err))
		},
	}
	proxy.ServeHTTP(w, r)
}

// LeaderTLS is the TLS configuration a follower verifies the leader with:
// the CA in caFile, and the first DNS name of this replica's own serving
// certificate (certFile), since every replica serves the same certificate
// (one Secret). The leader is dialled by address, which the certificate
// need not name.
func LeaderTLS(caFile, certFile string) (*tls.Config, error) {
	pemCA, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA of the leader's certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("CA of the leader's certificate: no PEM certificate in %s", caFile)
	}
	leaf, err := firstCertificate(certFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if len(leaf.DNSNames) == 0 {
		return nil, fmt.Errorf("serving certificate %s names no DNS name to verify the leader's with", certFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: leaf.DNSNames[0]}, nil
}

func firstCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, fmt.Errorf("no PEM certificate in %s", path)
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}
