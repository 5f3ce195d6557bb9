package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/explain/load"
	"github.com/tierflow/tierflow/pkg/kubeauth"
	"github.com/tierflow/tierflow/pkg/model"
)

// Source is what the handler reads from the controller.
type Source struct {
	// Snapshot returns the engine's current model.
	Snapshot func() *model.Snapshot
	// Realization returns a policy's realization summary, false when the
	// distribution layer does not know the policy (yet).
	Realization func(policyID string) (Realization, bool)
	// Pods lists the pods of the controller's informer cache: explain's
	// inventory.
	Pods func() ([]*corev1.Pod, error)
	// Ready reports whether the answers are meaningful (this replica leads
	// and its caches are synced); nil means always.
	Ready func() bool
	// AgentQuery forwards a request of the agent query API
	// (pkg/queryapi/agentquery: path /v1/..., URL-encoded parameters) to
	// node's agent and returns its HTTP status and body; nil: the
	// /v1/nodes/ endpoints answer 501. A context deadline error means the
	// agent did not answer in time, any other error that it is unreachable.
	AgentQuery func(ctx context.Context, node, path, rawQuery string) (int, []byte, error)
	// ConnectedNodes lists the nodes whose agents are connected (their
	// queries can be forwarded).
	ConnectedNodes func() []string
}

// NewHandler serves the query API. auth may be nil only in tests of the
// handler itself; the controller always passes one.
func NewHandler(src Source, auth *kubeauth.Authorizer, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &handler{src: src, auth: auth, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/snapshot", h.guard("snapshot", h.snapshot))
	// The original unauthenticated path, now behind the same check.
	mux.HandleFunc("GET /snapshot", h.guard("snapshot", h.snapshot))
	mux.HandleFunc("GET /v1/policies", h.guard("policies", h.policies))
	mux.HandleFunc("GET /v1/explain", h.guard("explain", h.explain))
	mux.HandleFunc("GET /v1/matrix", h.guard("explain", h.matrix))
	mux.HandleFunc("GET /v1/nodes", h.guard("flows", h.nodes))
	for endpoint, name := range agentEndpoints {
		mux.HandleFunc("GET /v1/nodes/{node}/agent/v1/"+endpoint, h.guard(name, h.agent("/v1/"+endpoint)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such query endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

type handler struct {
	src  Source
	auth *kubeauth.Authorizer
	log  *slog.Logger
}

// guard authenticates and authorizes before fn, and refuses while the
// controller is not ready (a follower's empty model would look like "no
// policies").
func (h *handler) guard(endpoint string, fn func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.auth != nil {
			user, err := h.auth.Authorize(r, queryAction(endpoint))
			if err != nil {
				msg := err.Error()
				if kubeauth.Status(err) == http.StatusServiceUnavailable {
					msg = "cannot check the request's token: " + msg
				}
				writeError(w, kubeauth.Status(err), msg)
				return
			}
			h.log.Debug("query", "user", user, "path", r.URL.Path)
		}
		if h.src.Ready != nil && !h.src.Ready() {
			writeError(w, http.StatusServiceUnavailable, "controller not ready (not leading, or caches not synced yet)")
			return
		}
		fn(w, r)
	}
}

func (h *handler) snapshot(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, h.src.Snapshot())
}

func (h *handler) policies(w http.ResponseWriter, _ *http.Request) {
	snap := h.src.Snapshot()
	out := Policies{Policies: make([]PolicyStatus, 0, len(snap.Policies))}
	for _, p := range snap.Policies {
		st := PolicyStatus{Policy: p, Realization: Realization{SpanNodes: len(p.Span)}}
		if h.src.Realization != nil {
			if r, ok := h.src.Realization(p.ID); ok {
				st.Realization = r
			}
		}
		out.Policies = append(out.Policies, st)
	}
	sort.Slice(out.Policies, func(i, j int) bool {
		return out.Policies[i].Source.String() < out.Policies[j].Source.String()
	})
	writeJSON(w, out)
}

// evaluator builds an explain evaluator over the current snapshot and
// pods; excluded maps the pods that take no part in policy to why.
func (h *handler) evaluator() (*explain.Evaluator, map[model.PodRef]string, error) {
	pods, err := h.src.Pods()
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	excluded := map[model.PodRef]string{}
	for _, p := range pods {
		if why := load.Excluded(p); why != "" {
			excluded[model.PodRef{Namespace: p.Namespace, Name: p.Name}] = why
		}
	}
	inv, err := load.Inventory(&load.Objects{Pods: pods})
	if err != nil {
		return nil, nil, err
	}
	ev, err := explain.NewEvaluator(h.src.Snapshot(), inv)
	if err != nil {
		return nil, nil, err
	}
	return ev, excluded, nil
}

func (h *handler) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var query explain.Query
	var err error
	if query.Src, err = explain.ParseEndpoint(q.Get("src")); err != nil {
		writeError(w, http.StatusBadRequest, "src: "+err.Error())
		return
	}
	if query.Dst, err = explain.ParseEndpoint(q.Get("dst")); err != nil {
		writeError(w, http.StatusBadRequest, "dst: "+err.Error())
		return
	}
	port, err := explain.ParsePortSpec(q.Get("port"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	query.Protocol, query.Port = port.Protocol, port.Port
	// through-service=true: dst is an endpoint a Service chose (tierctl
	// resolves Services itself), so a pod reaching itself is policed.
	query.ThroughService = q.Get("through-service") == "true"
	ev, excluded, err := h.evaluator()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, ep := range []explain.Endpoint{query.Src, query.Dst} {
		if ep.Pod != nil && excluded[*ep.Pod] != "" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("pod %s takes no part in network policy: %s", ep.Pod, excluded[*ep.Pod]))
			return
		}
	}
	res, err := ev.Explain(query)
	if err != nil {
		code := http.StatusBadRequest
		if strings.Contains(err.Error(), "unknown pod") {
			code = http.StatusNotFound
		}
		writeError(w, code, err.Error())
		return
	}
	writeJSON(w, res)
}

// Nodes is /v1/nodes.
type Nodes struct {
	// Nodes are connected nodes whose agents queries can be forwarded to.
	Nodes []string `json:"nodes"`
}

// nodes lists the connected nodes; with pod=NS/NAME or ip=ADDR
// parameters only those hosting the pods or addresses (from the
// controller's pod inventory), so that tierctl trace asks two agents, not
// every agent of the cluster. An address no pod holds selects every
// connected node: whichever bridge the packet may reach.
func (h *handler) nodes(w http.ResponseWriter, r *http.Request) {
	if h.src.ConnectedNodes == nil {
		writeError(w, http.StatusNotImplemented, "this controller forwards no agent queries")
		return
	}
	connected := h.src.ConnectedNodes()
	q := r.URL.Query()
	pods, ips := q["pod"], q["ip"]
	if len(pods) == 0 && len(ips) == 0 {
		writeJSON(w, Nodes{Nodes: append([]string{}, connected...)})
		return
	}
	all, err := h.src.Pods()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	want := map[string]bool{}
	for _, name := range pods {
		for _, p := range all {
			if p.Namespace+"/"+p.Name == name && p.Spec.NodeName != "" {
				want[p.Spec.NodeName] = true
			}
		}
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("ip %q: not an address", s))
			return
		}
		found := false
		for _, p := range all {
			for _, pip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(pip.IP); err == nil && a.Unmap() == ip.Unmap() && p.Spec.NodeName != "" && !p.Spec.HostNetwork {
					want[p.Spec.NodeName], found = true, true
				}
			}
		}
		if !found {
			writeJSON(w, Nodes{Nodes: append([]string{}, connected...)})
			return
		}
	}
	out := Nodes{Nodes: []string{}}
	for _, n := range connected {
		if want[n] {
			out.Nodes = append(out.Nodes, n)
		}
	}
	writeJSON(w, out)
}

// agentEndpoints are the agent query API endpoints forwarded to agents,
// with the resource name a caller needs "get" on: "flows" to read what an
// agent holds and installed, "trace" to have it run ofproto/trace.
var agentEndpoints = map[string]string{
	"status":        "flows",
	"realization":   "flows",
	"rules":         "flows",
	"pods":          "flows",
	"flows":         "flows",
	"bridge-flows":  "flows",
	"trace":         "trace",
	"ofproto-trace": "trace",
}

// agentTimeout bounds a forwarded query: an agent's ofproto/trace or
// dump-flows takes well under a second, a busy one a few. A variable for
// the tests.
var agentTimeout = 20 * time.Second

// agent forwards the request to the node's agent over its distribution
// stream and passes the agent's answer on unchanged.
func (h *handler) agent(path string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.src.AgentQuery == nil {
			writeError(w, http.StatusNotImplemented, "this controller forwards no agent queries")
			return
		}
		node := r.PathValue("node")
		ctx, cancel := context.WithTimeout(r.Context(), agentTimeout)
		defer cancel()
		code, body, err := h.src.AgentQuery(ctx, node, path, r.URL.RawQuery)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("node %s: its agent did not answer within %s", node, agentTimeout))
			return
		case err != nil:
			writeError(w, http.StatusBadGateway, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(body)
	}
}

// MatrixResult is /v1/matrix.
type MatrixResult struct {
	Cells []explain.Cell `json:"cells"`
	// Skipped says which pods or pairs were left out, and why.
	Skipped []string `json:"skipped,omitempty"`
}

func (h *handler) matrix(w http.ResponseWriter, r *http.Request) {
	var ports []explain.PortSpec
	for _, s := range r.URL.Query()["port"] {
		p, err := explain.ParsePortSpec(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ports = append(ports, p)
	}
	if len(ports) == 0 {
		writeError(w, http.StatusBadRequest, "matrix: at least one port=PROTO/PORT is required")
		return
	}
	ev, _, err := h.evaluator()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	cells, skipped, err := ev.Matrix(ports)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if cells == nil {
		cells = []explain.Cell{}
	}
	writeJSON(w, MatrixResult{Cells: cells, Skipped: skipped})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(Error{Error: msg})
}
