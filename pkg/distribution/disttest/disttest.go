package disttest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

// TLS returns a server config with a fresh self-signed certificate for
// "localhost" and 127.0.0.1, and a client config trusting only it.
func TLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatalf("generating certificate: %v", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("loading certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("no certificate in generated PEM")
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		&tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// Proxy forwards TCP connections from its own loopback address to a
// target. Cut closes every open connection; while blocked, new
// connections are closed at once (a network that is down).
type Proxy struct {
	lis    net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	blocked bool
	wg      sync.WaitGroup
}

// NewProxy starts a proxy to target; it stops with the test.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{lis: lis, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address agents should dial.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// SetTarget changes where new connections go.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Cut closes every open connection and, with block, refuses new ones
// until Restore.
func (p *Proxy) Cut(block bool) {
	p.mu.Lock()
	p.blocked = block
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
}

// Close stops the proxy.
func (p *Proxy) Close() {
	p.lis.Close()
	p.Cut(true)
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		blocked, target := p.blocked, p.target
		p.mu.Unlock()
		if blocked {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}
