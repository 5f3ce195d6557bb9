package controller

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are one controller's Prometheus metrics, in a registry of its own
// so that several controllers can live in one process (tests).
type metrics struct {
	registry *prometheus.Registry
	// syncDuration times one API event from its arrival until the engine
	// has applied it (operation="engine"; events are applied in batches)
	// and one status/event sync (operation="status").
	syncDuration *prometheus.HistogramVec
	// apiObjects counts the API objects the informers hold, by kind.
	apiObjects *prometheus.GaugeVec
	// computedObjects counts the engine's objects, by kind.
	computedObjects *prometheus.GaugeVec
	statusWrites    *prometheus.CounterVec
	syncErrors      *prometheus.CounterVec
	events          prometheus.Counter
	crdsServed      *prometheus.GaugeVec
}

// newMetrics registers the controller's metrics in reg (a new registry
// when nil), with the Go runtime and process collectors unless reg has
// them already.
func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		registry: reg,
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "sync_duration_seconds",
			Help:    "Time from an API event's arrival until the engine has applied it (operation=engine), or of one policy's status sync (operation=status).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"kind", "operation"}),
		apiObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "api_objects",
			Help: "API objects held by the controller's informers, by kind.",
		}, []string{"kind"}),
		computedObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "computed_objects",
			Help: "Objects computed by the engine (Policy, AppliedToGroup, AddressGroup).",
		}, []string{"kind"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "status_writes_total",
			Help: "Status updates written to policy objects, by kind.",
		}, []string{"kind"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "status_sync_errors_total",
			Help: "Status syncs that failed and were retried, by kind.",
		}, []string{"kind"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "events_total",
			Help: "Events emitted for NetworkPolicy findings.",
		}),
		crdsServed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tierflow", Subsystem: "controller", Name: "policy_kind_watched",
			Help: "1 when the controller watches a network-policy-api kind (its CRD is served), else 0.",
		}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.syncDuration, m.apiObjects, m.computedObjects, m.statusWrites, m.syncErrors, m.events, m.crdsServed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("controller metrics: %w (one registry per controller)", err)
		}
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return nil, fmt.Errorf("controller metrics: %w", err)
		}
	}
	return m, nil
}

// MetricsHandler serves the controller's metrics in the Prometheus format.
func (c *Controller) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(c.metrics.registry, promhttp.HandlerOpts{Registry: c.metrics.registry})
}

// Gatherer exposes the metrics registry (tests read counters from it).
func (c *Controller) Gatherer() prometheus.Gatherer { return c.metrics.registry }
