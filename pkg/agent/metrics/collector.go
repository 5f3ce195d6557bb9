package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// Source is what the collector reads: the realizer.
type Source interface {
	Stats(ctx context.Context) ([]flowsync.FlowStat, error)
	Rules() map[uint32]agentquery.RuleInfo
}

var (
	ruleLabels   = []string{"policy_kind", "policy_namespace", "policy_name", "direction", "rule_index", "rule_name", "action", "table"}
	rulePackets  = prometheus.NewDesc("tierflow_rule_packets_total", "Packets a policy rule decided (allowed, denied or passed), from OpenFlow flow statistics.", ruleLabels, nil)
	ruleBytes    = prometheus.NewDesc("tierflow_rule_bytes_total", "Bytes of the packets a policy rule decided, from OpenFlow flow statistics.", ruleLabels, nil)
	isoPackets   = prometheus.NewDesc("tierflow_isolation_dropped_packets_total", "Packets dropped because a NetworkPolicy isolates the pod and no rule allowed them.", []string{"direction"}, nil)
	overPackets  = prometheus.NewDesc("tierflow_overflow_dropped_packets_total", "Packets of the applied-to pods of policies left out of a full Admin or Baseline table (more rules than priorities) dropped instead of being judged by them (fail closed).", []string{"direction", "table"}, nil)
	flowsPerTbl  = prometheus.NewDesc("tierflow_flows", "Installed flows per pipeline table.", []string{"table"}, nil)
	scrapeErrors = prometheus.NewDesc("tierflow_flow_stats_errors", "1 when the last scrape could not read flow statistics.", nil, nil)
)

// Collector is a prometheus.Collector over a Source.
type Collector struct {
	src     Source
	timeout time.Duration
}

// NewCollector returns a collector reading src on every scrape.
func NewCollector(src Source) *Collector { return &Collector{src: src, timeout: 10 * time.Second} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rulePackets, ruleBytes, isoPackets, overPackets, flowsPerTbl, scrapeErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	stats, err := c.src.Stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(scrapeErrors, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrors, prometheus.GaugeValue, 0)
	rules := c.src.Rules()
	type sum struct{ packets, bytes uint64 }
	perRule := map[uint32]*sum{}
	iso := map[string]uint64{"In": 0, "Out": 0}
	over := map[pipeline.Table]uint64{}
	perTable := map[string]int{}
	for _, st := range stats {
		perTable[pipeline.Table(st.Table).String()]++
		_, role, id := pipeline.DecodeCookie(st.Cookie)
		switch role {
		case pipeline.RoleAction:
			if _, ok := rules[id]; !ok {
				continue
			}
			s := perRule[id]
			if s == nil {
				s = &sum{}
				perRule[id] = s
			}
			s.packets += st.Packets
			s.bytes += st.Bytes
		case pipeline.RoleIsolation:
			if pipeline.Table(st.Table) == pipeline.EgressIsolation {
				iso["Out"] += st.Packets
			} else {
				iso["In"] += st.Packets
			}
		case pipeline.RoleOverflow:
			over[pipeline.Table(st.Table)] += st.Packets
		}
	}
	for tb, v := range over {
		dir := "In"
		if tb == pipeline.EgressAdmin || tb == pipeline.EgressBaseline {
			dir = "Out"
		}
		ch <- prometheus.MustNewConstMetric(overPackets, prometheus.CounterValue, float64(v), dir, tb.String())
	}
	for id, s := range perRule {
		ri := rules[id]
		lv := []string{string(ri.Policy.Kind), ri.Policy.Namespace, ri.Policy.Name, string(ri.Direction), strconv.Itoa(ri.Index), ri.Name, string(ri.Action), ri.Table}
		ch <- prometheus.MustNewConstMetric(rulePackets, prometheus.CounterValue, float64(s.packets), lv...)
		ch <- prometheus.MustNewConstMetric(ruleBytes, prometheus.CounterValue, float64(s.bytes), lv...)
	}
	for d, v := range iso {
		ch <- prometheus.MustNewConstMetric(isoPackets, prometheus.CounterValue, float64(v), d)
	}
	for tb, nf := range perTable {
		ch <- prometheus.MustNewConstMetric(flowsPerTbl, prometheus.GaugeValue, float64(nf), tb)
	}
}
