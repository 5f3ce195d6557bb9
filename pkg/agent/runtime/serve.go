package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/kubeauth"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// servers are the agent's HTTP endpoints: metrics/health on TCP, the query
// API on a unix socket.
type servers struct {
	http   []*http.Server
	socket string
}

func (s *servers) close() {
	for _, h := range s.http {
		h.Close()
	}
	if s.socket != "" {
		os.Remove(s.socket)
	}
}

func (a *Agent) serve() (*servers, error) {
	s := &servers{}
	if a.cfg.MetricsAddress != "" {
		ln, err := net.Listen("tcp", a.cfg.MetricsAddress)
		if err != nil {
			return nil, fmt.Errorf("metrics address: %w", err)
		}
		metricsHandler, err := a.metricsHandler()
		if err != nil {
			ln.Close()
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metricsHandler)
		// Health carries no token (the kubelet's probes) and tells nothing
		// but ok or not ready.
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		// Ready once the datapath enforces a complete state (restored or
		// from the controller) and, in noEncap mode, has the gateway: a
		// rolling update waits for that before replacing the next node's
		// agent.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if ok, why := a.readiness(); !ok {
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		a.mu.Lock()
		a.metricsAddr = ln.Addr().String()
		a.mu.Unlock()
		s.start(ln, mux, a)
	}
	if a.opts.QuerySocket != "" {
		ln, err := listenUnix(a.opts.QuerySocket)
		if err != nil {
			s.close()
			return nil, err
		}
		s.socket = a.opts.QuerySocket
		s.start(ln, a.queryHandler(), a)
	}
	return s, nil
}

// metricsHandler serves /metrics. Its rule and policy names and counters
// are for the node's operator only: the address is on the host network,
// which every pod of the node can reach. On a loopback metricsAddress
// (only the node's own processes reach it) it answers anyone; on any other
// address a request needs a Kubernetes bearer token whose user may get
// the non-resource URL /metrics (TokenReview and SubjectAccessReview, as
// kube-rbac-proxy; decisions cached metricsAuthCacheTTL), and the agent
// refuses to start without API server access to check them.
func (a *Agent) metricsHandler() (http.Handler, error) {
	h := promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{})
	if loopbackAddress(a.cfg.MetricsAddress) {
		return h, nil
	}
	kube, err := a.kube()
	if err != nil {
		return nil, fmt.Errorf("metricsAddress %s is not a loopback address, so /metrics needs authorization, "+
			"checked with the Kubernetes API: %w", a.cfg.MetricsAddress, err)
	}
	return kubeauth.New(kube, metricsAuthCacheTTL).Require(kubeauth.NonResourceAction("get", "/metrics"), h), nil
}

// metricsAuthCacheTTL is how long a scraper's token decision is reused:
// a scrape interval or two, so that a revoked permission ends soon.
const metricsAuthCacheTTL = 30 * time.Second

// loopbackAddress reports whether a host:port listen address is on a
// loopback address only ("localhost", 127.0.0.0/8, ::1); an empty host
// (every address) is not.
func loopbackAddress(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (s *servers) start(ln net.Listener, h http.Handler, a *Agent) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.http = append(s.http, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("HTTP server stopped", "address", ln.Addr().String(), "err", err)
		}
	}()
}

// listenUnix listens on path, replacing a stale socket of an earlier run
// (never another kind of file), usable by root only: the API has no
// authentication of its own. The socket never exists under path with a
// wider mode: it is created in a private directory (0700) next to path,
// given mode 0600 there, and renamed into place, which replaces a stale
// socket atomically. (Changing the process's umask instead would race
// with every other goroutine creating files.)
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("query socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket == 0 {
		return nil, fmt.Errorf("query socket: %s exists and is not a socket", path)
	}
	private, err := os.MkdirTemp(dir, "."+filepath.Base(path)+".")
	if err != nil {
		return nil, fmt.Errorf("query socket: %w", err)
	}
	defer os.RemoveAll(private)
	staged := filepath.Join(private, "sock")
	ln, err := net.Listen("unix", staged)
	if err != nil {
		return nil, fmt.Errorf("query socket: %w", err)
	}
	// The listener would unlink the staged name on Close; servers.close
	// removes path instead.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(staged, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("query socket: %w", err)
	}
	if err := os.Rename(staged, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("query socket: %w", err)
	}
	return ln, nil
}

func (a *Agent) queryHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.status(r.Context())) })
	mux.HandleFunc("GET /v1/realization", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, a.realization()) })
	mux.HandleFunc("GET /v1/updates", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, agentquery.Updates{Node: a.cfg.NodeName, Updates: a.timings.list()})
	})
	mux.HandleFunc("GET /v1/rules", func(w http.ResponseWriter, _ *http.Request) {
		if d := a.needOVS(w); d != nil {
			writeJSON(w, d.rulesInfo())
		}
	})
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, r *http.Request) {
		if d := a.needOVS(w); d != nil {
			writeJSON(w, d.podsInfo(r.Context()))
		}
	})
	mux.HandleFunc("GET /v1/flows", func(w http.ResponseWriter, r *http.Request) {
		d := a.needOVS(w)
		if d == nil {
			return
		}
		q := r.URL.Query()
		f := agentquery.FlowFilter{Policy: q.Get("policy"), Direction: q.Get("direction"), Table: q.Get("table"), Pod: q.Get("pod")}
		if s := q.Get("rule"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("rule %q: want a rule index (0, 1, ...)", s))
				return
			}
			f.Rule = &n
		}
		out, err := d.flowsInfo(r.Context(), f)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/trace", func(w http.ResponseWriter, r *http.Request) {
		d := a.needOVS(w)
		if d == nil {
			return
		}
		q := r.URL.Query()
		req := agentquery.TraceRequest{Src: q.Get("src"), Dst: q.Get("dst"), Protocol: q.Get("protocol")}
		port, err := strconv.Atoi(q.Get("port"))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("port %q: want a number", q.Get("port")))
			return
		}
		req.Port = port
		out, err := d.trace(r.Context(), a.opts.VswitchdCtl, ovsRundir(a.cfg.OVSDBSocketPath()), a.tunnelEndpoint(), req)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, out)
	})
	a.registerOVSTools(mux)
	return mux
}

// tunnelEndpoint is the node's own tunnel address (invalid outside encap
// mode, or before it is known).
func (a *Agent) tunnelEndpoint() netip.Addr {
	a.mu.Lock()
	nm := a.nodenet
	a.mu.Unlock()
	if nm == nil {
		return netip.Addr{}
	}
	return nm.Status().Endpoint
}

// needOVS returns the OVS datapath, or answers why there is none.
func (a *Agent) needOVS(w http.ResponseWriter) *ovsDatapath {
	if a.opts.Datapath == agentquery.DatapathNone {
		writeError(w, http.StatusNotFound, "no datapath (datapath none): no flows, rules or ports")
		return nil
	}
	d := a.datapath()
	if d == nil {
		writeError(w, http.StatusServiceUnavailable, "not connected to OVS yet")
	}
	return d
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(agentquery.Error{Error: msg})
}

func (a *Agent) status(ctx context.Context) agentquery.Status {
	st := agentquery.Status{Node: a.cfg.NodeName, Datapath: a.opts.Datapath}
	if a.opts.Datapath == agentquery.DatapathOVS {
		st.Bridge = a.cfg.BridgeName
	}
	if d := a.datapath(); d != nil {
		st.Round = d.current().Round()
		if ports, _, err := d.ports(ctx); err == nil {
			st.LocalPods = len(ports)
		}
	}
	a.mu.Lock()
	nm := a.nodenet
	a.mu.Unlock()
	if nm != nil {
		ns := nm.Status()
		nn := &agentquery.NodeNetwork{Mode: a.cfg.NodeNetwork.Mode, PodMTU: a.podMTU, GatewayPort: ns.Gateway.Port, Error: ns.Error, NodeErrors: ns.NodeErrors}
		for _, ip := range ns.Gateway.IPs {
			nn.GatewayIPs = append(nn.GatewayIPs, ip.String())
		}
		for _, r := range ns.Routes {
			nn.Routes = append(nn.Routes, r.String())
		}
		if a.cfg.NodeNetwork.Mode == config.NodeNetworkEncap {
			nn.TunnelType, nn.TunnelPort = a.cfg.NodeNetwork.TunnelType, ns.Tunnel.Port
			if ns.Endpoint.IsValid() {
				nn.TunnelEndpoint = ns.Endpoint.String()
			}
			for _, p := range ns.Tunnel.Peers {
				peer := p.Node + " " + p.IP.String()
				for _, c := range p.PodCIDRs {
					peer += " " + c.String()
				}
				nn.TunnelPeers = append(nn.TunnelPeers, peer)
			}
		}
		st.NodeNetwork = nn
	}
	if a.client != nil {
		st.ControllerConnected = a.client.Connected()
		st.Epoch, st.Version, _ = a.client.State()
		st.Restored = a.client.Stats().Restored
	}
	st.Ready = a.Ready()
	a.mu.Lock()
	defer a.mu.Unlock()
	st.MetricsAddress = a.metricsAddr
	st.Policies = len(a.state.Policies)
	st.LastRealization = a.lastTime
	st.LastError = a.lastErr
	st.Warnings = append([]string(nil), a.warnings...)
	return st
}

func (a *Agent) realization() agentquery.Realization {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := agentquery.Realization{Node: a.cfg.NodeName, Policies: []agentquery.PolicyRealization{}}
	for id, p := range a.state.Policies {
		out.Policies = append(out.Policies, agentquery.PolicyRealization{ID: id, Source: p.Source, Generation: a.realized[id], Wanted: p.Generation, Error: a.errs[id]})
	}
	sort.Slice(out.Policies, func(i, j int) bool { return out.Policies[i].ID < out.Policies[j].ID })
	return out
}
