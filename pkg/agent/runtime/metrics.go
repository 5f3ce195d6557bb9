package runtime

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/metrics"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// agentMetrics are the agent's own metrics; pkg/agent/metrics adds the
// per-rule counters and flows per table read from the bridge.
type agentMetrics struct {
	reg          *prometheus.Registry
	realizeTime  *prometheus.HistogramVec
	realizeErrs  *prometheus.CounterVec
	ofErrors     *prometheus.CounterVec
	ofConnects   prometheus.Counter
	stateUpdates *prometheus.CounterVec
	svcFlushes   *prometheus.CounterVec
}

func newAgentMetrics(a *Agent) *agentMetrics {
	m := &agentMetrics{
		reg: prometheus.NewRegistry(),
		realizeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tierflow_agent_realization_duration_seconds",
			Help: "Time to realize the node's complete state on the datapath (compile and one atomic bundle), by what triggered it (update, ports, retry).",
			// From a few milliseconds (small deltas) to tens of seconds
			// (a full resync of a large cluster on a busy node).
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"trigger"}),
		realizeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_agent_realization_errors_total",
			Help: "Realizations that failed (the previous flows stayed installed), by trigger.",
		}, []string{"trigger"}),
		ofErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_agent_openflow_errors_total",
			Help: "OpenFlow operations that failed: flow (the switch rejected a flow of a bundle), bundle (the bundle failed otherwise), stats, check, replay, start, conntrack-flush (a try at ending removed Service endpoints' connections; transient failures are tried again), revalidator-wait (asking the switch whether its datapath flows were revalidated, before the second flush).",
		}, []string{"op"}),
		ofConnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tierflow_agent_openflow_connections_total",
			Help: "OpenFlow connections made to the bridge (the first and every reconnection).",
		}),
		stateUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_agent_state_updates_total",
			Help: "Policy state updates applied, by kind: full (controller snapshot or restored state) or delta.",
		}, []string{"kind"}),
		svcFlushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_agent_service_conntrack_flushes_total",
			Help: "Conntrack flushes of removed Service endpoints and frontends, by when: bundle (right after the bundle that removed them), revalidated (again once the switch revalidated its datapath flows), back (that second flush left out: installed again by then), retried (done by a later try after a transient failure of the first or the second flush).",
		}, []string{"when"}),
	}
	m.reg.MustRegister(m.realizeTime, m.realizeErrs, m.ofErrors, m.ofConnects, m.stateUpdates, m.svcFlushes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tierflow_agent_controller_connected",
			Help: "1 while a stream to tierflow-controller is open.",
		}, func() float64 { return b2f(a.controllerConnected()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tierflow_agent_ready",
			Help: "1 once the datapath enforces a complete policy state.",
		}, func() float64 { return b2f(a.Ready()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tierflow_agent_policies",
			Help: "Policies in the node's state.",
		}, func() float64 { return float64(a.policyCount()) }),
	)
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// realizerSource lets pkg/agent/metrics read whichever realizer is current.
type realizerSource struct{ d *ovsDatapath }

func (s realizerSource) Stats(ctx context.Context) ([]flowsync.FlowStat, error) {
	return s.d.current().Stats(ctx)
}

func (s realizerSource) Rules() map[uint32]agentquery.RuleInfo { return s.d.current().Rules() }

var _ metrics.Source = realizerSource{}
