// Package metrics exports the agent's per-rule packet and byte counters,
// read from OpenFlow flow statistics, as Prometheus metrics. A rule's
// counters are the statistics of its action flows (conj_id flows and
// single-clause flows), which OVS updates once per packet the rule decided;
// the cookie of each flow names the rule (see package pipeline). OVS credits
// packets handled by its datapath cache to OpenFlow rules when its
// revalidator threads run (every ~500ms), so counters trail traffic by up
// to about a second. A rule whose flows are replaced (an agent restart's new
// cookie round, a priority move) starts counting from zero again, which
// Prometheus rate() treats as a counter reset.
package metrics
