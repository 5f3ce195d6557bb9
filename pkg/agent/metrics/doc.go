// Package metrics exports the agent's per-rule packet and byte counters,
// read from OpenFlow flow statistics, as Prometheus metrics. A rule's
// counters are the statistics of its action flows (conj_id flows and
// single-clause flows), which OVS updates once per packet the rule decided;
// the cookie of each flow names the rule (see package pipeline).
package metrics
