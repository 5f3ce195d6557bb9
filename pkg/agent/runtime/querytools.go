package runtime

import (
	"context"
	"fmt"
	"net/http"
	"regexp"

	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// The endpoints below run the OVS tools on the node for tierctl, so that
// flows --check and trace work when tierctl is not on the node (the
// controller forwards the queries over the agent's distribution stream).
// On the node tierctl runs the same commands itself.
func (a *Agent) registerOVSTools(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/bridge-flows", func(w http.ResponseWriter, r *http.Request) {
		if a.needOVS(w) == nil {
			return
		}
		out, err := a.runOVSTool(r.Context(), "ovs-ofctl", ovsctl.DumpFlowsArgs(a.cfg.BridgeName)...)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, agentquery.BridgeFlows{Bridge: a.cfg.BridgeName, Dump: out})
	})
	mux.HandleFunc("GET /v1/ofproto-trace", func(w http.ResponseWriter, r *http.Request) {
		if a.needOVS(w) == nil {
			return
		}
		flow := r.URL.Query().Get("flow")
		if !traceFlowSpec.MatchString(flow) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("flow %q: want an ovs-ofctl flow (field=value,...)", flow))
			return
		}
		out, err := a.runOVSTool(r.Context(), "ovs-appctl", ovsctl.TraceArgs(vswitchdTarget(a.opts.VswitchdCtl), a.cfg.BridgeName, flow)...)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		res := agentquery.Trace{Flow: flow, Output: out, Rules: []agentquery.Rule{}}
		traceVerdict(&res, ovsctl.ParseTrace(out), a.cfg.BridgeName)
		writeJSON(w, res)
	})
}

// traceFlowSpec is what a traced flow may contain: ovs-ofctl match
// fields, never an option (a leading '-') or a second argument.
var traceFlowSpec = regexp.MustCompile(`^[a-z][a-z0-9_]*(=[A-Za-z0-9_.:/]+)?(,[a-z][a-z0-9_]*(=[A-Za-z0-9_.:/]+)?)*$`)

// runOVSTool runs an OVS command line tool against this agent's OVS and
// returns its standard output.
func (a *Agent) runOVSTool(ctx context.Context, name string, args ...string) (string, error) {
	return ovsctl.Run(ctx, ovsEnv(ovsRundir(a.cfg.OVSDBSocketPath())), name, args...)
}
