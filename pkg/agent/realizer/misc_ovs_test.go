package realizer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tierflow/tierflow/pkg/agent/metrics"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestNothingPassesBeforeSync: a started agent that has not had its first
// full policy sync passes nothing, and a pod port the agent does not know
// (not yet classified) passes nothing after it either.
func TestNothingPassesBeforeSync(t *testing.T) {
	_, n, a, b := twoPods(t)
	if probe(t, a, b.IPv4(), "TCP", 80, false) {
		t.Fatal("traffic passed before the first sync")
	}
	// First sync, but only a is attached as far as the agent knows.
	s := newState()
	pods := n.pods
	n.pods = []*testPod{a}
	s.apply(t, n)
	if probe(t, a, b.IPv4(), "TCP", 80, false) {
		t.Fatal("traffic reached a pod port that is not classified")
	}
	out, err := n.br.Trace(fmt.Sprintf("in_port=%d,tcp,nw_src=10.0.0.2,nw_dst=10.0.0.1,tcp_dst=80", b.OFPort))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastLine(out, "Datapath actions:"), "drop") {
		t.Fatalf("unclassified port's packet not dropped:\n%s", out)
	}
	n.pods = pods
	s.apply(t, n)
	if !probe(t, a, b.IPv4(), "TCP", 80, true) {
		t.Fatal("traffic does not pass once both pods are classified")
	}
}

// TestRuleMetrics: the collector reports per-rule packet counters read from
// the flows' statistics after real traffic hit an Allow and a Deny rule.
func TestRuleMetrics(t *testing.T) {
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	c := n.addPod(t, "c", 3)
	srv := b.ListenTCP(80)
	t.Cleanup(srv.Close)
	n.start(t)
	s := newState()
	s.add(anp("web", 5, s.atg(b),
		model.Rule{Direction: model.DirectionIn, Action: model.ActionAllow, Name: "from-a", Peer: peerGroups(s.ag(a)), Ports: []model.Port{tcp(80)}},
		model.Rule{Direction: model.DirectionIn, Action: model.ActionDeny, Name: "not-c", Peer: peerGroups(s.ag(c))}))
	s.apply(t, n)
	for i := 0; i < 3; i++ {
		if !probe(t, a, b.IPv4(), "TCP", 80, true) {
			t.Fatal("a -> b denied")
		}
	}
	if probe(t, c, b.IPv4(), "TCP", 80, false) {
		t.Fatal("c -> b allowed")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(n.r))
	var mfs []*dto.MetricFamily
	got := map[string]float64{}
	// OVS credits datapath packets to OpenFlow rules when its revalidators
	// run (about every 500ms), so counters catch up shortly after traffic.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.settle(t)
		var err error
		if mfs, err = reg.Gather(); err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "tierflow_rule_packets_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				got[labels["policy_name"]+"/"+labels["rule_name"]+"/"+labels["action"]+"/"+labels["table"]] = m.GetCounter().GetValue()
			}
		}
		if got["web/from-a/Allow/IngressAdmin"] >= 9 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Three connections' original-direction packets (SYN, ACK, data,
	// FIN...) went through the allow rule; c's SYN retransmissions through
	// the deny rule.
	if v := got["web/from-a/Allow/IngressAdmin"]; v < 9 {
		t.Errorf("allow rule counted %v packets, want at least 9 (%v)", v, got)
	}
	if v := got["web/not-c/Deny/IngressAdmin"]; v < 1 {
		t.Errorf("deny rule counted %v packets, want at least 1 (%v)", v, got)
	}
	tables := 0
	for _, mf := range mfs {
		if mf.GetName() == "tierflow_flows" {
			tables = len(mf.GetMetric())
		}
	}
	if tables < int(pipeline.Output) {
		t.Errorf("tierflow_flows has %d tables, want every table", tables)
	}
	_ = context.Background
}

// TestConntrackLabels: an allowed connection is committed with the egress
// rule ID in ct_label bits 0-31 and the ingress rule ID in bits 32-63.
func TestConntrackLabels(t *testing.T) {
	env, n, a, b := twoPods(t)
	s := newState()
	s.add(anp("out-a", 5, s.atg(a), rule(model.DirectionOut, model.ActionAllow, peerGroups(s.ag(b)))))
	s.add(np("in-b", s.atg(b), []model.Direction{model.DirectionIn}, rule(model.DirectionIn, model.ActionAllow, peerGroups(s.ag(a)), tcp(80))))
	s.apply(t, n)
	if !probe(t, a, b.IPv4(), "TCP", 80, true) {
		t.Fatal("a -> b denied")
	}
	var egress, ingress uint32
	for id, ri := range n.r.Rules() {
		switch ri.Policy.Name {
		case "out-a":
			egress = id
		case "in-b":
			ingress = id
		}
	}
	out, err := env.Appctl("dpctl/dump-conntrack", "zone=1")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("labels=0x%x", uint64(ingress)<<32|uint64(egress))
	found := false
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "dst=10.0.0.2") && strings.Contains(l, "dport=80") && strings.Contains(l, want) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no connection a -> b:80 with %s (egress rule %d, ingress rule %d):\n%s", want, egress, ingress, out)
	}
}
