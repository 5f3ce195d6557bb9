package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	connected        prometheus.Gauge
	syncDuration     *prometheus.HistogramVec
	agentLag         *prometheus.GaugeVec
	resyncs          *prometheus.CounterVec
	resumes          prometheus.Counter
	updatesSent      *prometheus.CounterVec
	authFailures     prometheus.Counter
	dispatchDuration prometheus.Histogram
	fullSyncsWaiting prometheus.Gauge
	chunksSent       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, fullSyncs chan struct{}) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tierflow_distribution_connected_agents",
			Help: "Agents with a live Sync stream.",
		}),
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tierflow_distribution_sync_duration_seconds",
			Help:    "Time from an update being queued for an agent until it was handed to the agent's stream, by kind (full, delta).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"kind"}),
		agentLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tierflow_distribution_agent_lag_versions",
			Help: "Updates queued for a connected agent that it has not reported applied yet.",
		}, []string{"node"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_distribution_full_resyncs_total",
			Help: "Full updates sent, by reason (new, epoch, gap, overflow).",
		}, []string{"reason"}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tierflow_distribution_resumes_total",
			Help: "Reconnections that resumed from the agent's version without a full update.",
		}),
		updatesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_distribution_updates_sent_total",
			Help: "Updates sent to agents, by kind (full, delta).",
		}, []string{"kind"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tierflow_distribution_auth_failures_total",
			Help: "Sync streams refused because the agent's token was invalid or not bound to a node.",
		}),
		dispatchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tierflow_distribution_dispatch_duration_seconds",
			Help:    "Time to turn one round of model changes into every agent's update.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		fullSyncsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tierflow_distribution_full_syncs_waiting",
			Help: "Connected agents waiting for a full-sync slot (MaxConcurrentFullSyncs).",
		}),
		chunksSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tierflow_distribution_update_chunks_sent_total",
			Help: "Chunks sent of updates larger than the chunk size.",
		}),
	}
	inProgress := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tierflow_distribution_full_syncs_in_progress",
		Help: "Full updates being built and sent (at most MaxConcurrentFullSyncs).",
	}, func() float64 { return float64(len(fullSyncs)) })
	if reg != nil {
		reg.MustRegister(m.connected, m.syncDuration, m.agentLag, m.resyncs, m.resumes, m.updatesSent, m.authFailures, m.dispatchDuration,
			m.fullSyncsWaiting, m.chunksSent, inProgress)
	}
	return m
}
