package agnhost

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Servers are the running listeners of one pod.
type Servers struct {
	hostname string
	logger   *log.Logger
	lookup   ServiceLookup

	mu      sync.Mutex
	closers []func()
	wg      sync.WaitGroup
}

// Start binds every endpoint and serves them until Close: on listenIPs
// if any are given, else on all addresses of both families. A
// hostNetwork pod of the test bed binds only its node's addresses, as all
// nodes share the host's network namespace. Start binds all or none: if
// one endpoint cannot be bound, the ones already bound are closed and the
// error names the endpoint.
func Start(endpoints []Endpoint, hostname string, logger *log.Logger, listenIPs ...string) (*Servers, error) {
	return StartWith(endpoints, hostname, logger, nil, listenIPs...)
}

// StartWith is Start with the Service lookup of the DNS stand-in (nil:
// its fixed answers).
func StartWith(endpoints []Endpoint, hostname string, logger *log.Logger, lookup ServiceLookup, listenIPs ...string) (*Servers, error) {
	s := &Servers{hostname: hostname, logger: logger, lookup: lookup}
	hosts := listenIPs
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	for _, ep := range endpoints {
		for _, host := range hosts {
			if err := s.start(ep, net.JoinHostPort(host, strconv.Itoa(ep.Port))); err != nil {
				s.Close()
				return nil, fmt.Errorf("serve %s on %q: %w", ep, host, err)
			}
		}
	}
	return s, nil
}

// Close stops every listener and waits for the serving goroutines.
func (s *Servers) Close() {
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for _, c := range closers {
		c()
	}
	s.wg.Wait()
}

func (s *Servers) onClose(f func()) {
	s.mu.Lock()
	s.closers = append(s.closers, f)
	s.mu.Unlock()
}

func (s *Servers) start(ep Endpoint, addr string) error {
	switch ep.Kind {
	case KindRawTCP:
		return s.serveTCP(addr, func(c net.Conn) {
			defer c.Close()
			s.logger.Printf("TCP request from %s on %s", c.RemoteAddr(), addr)
			_, _ = c.Write([]byte(ep.Body))
		})
	case KindUDP:
		return s.serveUDP(addr, func(req []byte, from net.Addr) []byte { return []byte(ep.Body) })
	case KindNetexecUDP:
		return s.serveUDP(addr, s.netexecUDP)
	case KindHTTP, KindTLS:
		body := ep.Body
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ep.JSONResponse {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(struct{ Method, Body string }{r.Method, body})
				return
			}
			fmt.Fprint(w, body)
		})
		return s.serveHTTP(addr, h, ep.Kind == KindTLS)
	case KindNetexecHTTP:
		return s.serveHTTP(addr, s.netexecHTTP(), false)
	case KindDNSUDP:
		return s.serveUDP(addr, func(req []byte, _ net.Addr) []byte { return dnsAnswer(req, s.lookup) })
	case KindDNSTCP:
		return s.serveDNSTCP(addr)
	default:
		return fmt.Errorf("unknown endpoint kind %q", ep.Kind)
	}
}

// serveTCP accepts connections on addr until the servers close, each
// handled by handle on a goroutine of its own (handle closes it).
func (s *Servers) serveTCP(addr string, handle func(net.Conn)) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.onClose(func() { l.Close() })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			go handle(c)
		}
	}()
	return nil
}

func (s *Servers) serveUDP(addr string, answer func([]byte, net.Addr) []byte) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	s.onClose(func() { pc.Close() })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			s.logger.Printf("UDP request from %s on %s", from, addr)
			_, _ = pc.WriteTo(answer(buf[:n], from), from)
		}
	}()
	return nil
}

func (s *Servers) serveHTTP(addr string, h http.Handler, useTLS bool) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if useTLS {
		cert, err := selfSignedCert()
		if err != nil {
			l.Close()
			return err
		}
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
	}
	s.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = srv.Serve(l)
	}()
	return nil
}

func (s *Servers) netexecHTTP() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "NOW: %v", time.Now())
	})
	mux.HandleFunc("/hostname", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, s.hostname) })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.FormValue("msg")) })
	mux.HandleFunc("/clientip", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.RemoteAddr) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	return mux
}

// netexecUDP answers netexec's UDP commands: "hostname", "echo MSG",
// "clientip"; anything else gets an empty reply, like netexec.
func (s *Servers) netexecUDP(req []byte, from net.Addr) []byte {
	cmd := strings.TrimSpace(string(req))
	switch {
	case cmd == "hostname":
		return []byte(s.hostname)
	case strings.HasPrefix(cmd, "echo "):
		return []byte(strings.TrimPrefix(cmd, "echo "))
	case cmd == "clientip":
		return []byte(from.String())
	default:
		return []byte("\n")
	}
}

func selfSignedCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
