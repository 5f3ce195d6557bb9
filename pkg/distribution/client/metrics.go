package client

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	connected     prometheus.Gauge
	updates       *prometheus.CounterVec
	version       prometheus.Gauge
	applyDuration prometheus.Histogram
	reports       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tierflow_agent_distribution_connected",
			Help: "1 while the agent has a stream open to the controller.",
		}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tierflow_agent_distribution_updates_total",
			Help: "Updates received from the controller, by kind (full, delta).",
		}, []string{"kind"}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tierflow_agent_distribution_applied_version",
			Help: "Stream version of the last update applied.",
		}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tierflow_agent_distribution_apply_duration_seconds",
			Help:    "Time the agent took to realize one update (Receiver.Apply).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tierflow_agent_distribution_pushed_reports_total",
			Help: "Reports sent between updates: realization outcomes that changed after a retry or a port change (Client.Report).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.updates, m.version, m.applyDuration, m.reports)
	}
	return m
}
