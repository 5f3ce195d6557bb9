package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/ovsenv"
)

const iperfPort = 5201

// iperf measures TCP throughput from client to server (bits per second,
// as received) with iperf3 inside the pods' namespaces.
func iperf(b *testing.B, client, server *ovsenv.Pod, serverIP netip.Addr, seconds int) float64 {
	b.Helper()
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatalf("iperf3 not found (install Debian's iperf3: test/tools/install-deps.sh): %v", err)
	}
	// One-off server: it exits after one test.
	srv := exec.Command("ip", "netns", "exec", server.Netns, "iperf3", "-s", "-1", "-p", strconv.Itoa(iperfPort))
	if err := srv.Start(); err != nil {
		b.Fatalf("starting iperf3 server: %v", err)
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	type result struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	// iperf3 -J exits 0 even when it could not connect: retry on the
	// error it reports until the server listens.
	var res result
	var out string
	for try := 0; ; try++ {
		var err error
		out, err = client.Exec("iperf3", "-J", "-c", serverIP.String(), "-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(seconds))
		res = result{}
		if jerr := json.Unmarshal([]byte(out), &res); jerr != nil && err == nil {
			err = fmt.Errorf("parsing iperf3 output: %v", jerr)
		}
		if err == nil && res.Error == "" {
			break
		}
		if try == 50 {
			b.Fatalf("iperf3 client: %v %s\n%s", err, res.Error, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.End.SumReceived.BitsPerSecond <= 0 {
		b.Fatalf("iperf3 measured nothing:\n%s", out)
	}
	return res.End.SumReceived.BitsPerSecond
}

// ruleSetInput is nRules rules applied to every local pod, none of which
// matches the client except the very last NetworkPolicy rule, which allows
// it to the iperf3 port: a quarter are Admin-tier Deny rules against other
// peers (each new connection is looked up through the whole Admin table),
// the rest NetworkPolicy-tier Allow rules, ten per policy, ten peers each.
func ruleSetInput(node string, pods []pipeline.LocalPod, client netip.Addr, nRules int) policyflows.Input {
	in := policyflows.Input{Node: node, Pods: pods,
		AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	atg := &model.AppliedToGroup{Meta: model.Meta{ID: "atg-local", Generation: 1, Span: []string{node}}, Selector: "bench local pods",
		MembersByNode: map[string][]model.GroupMember{}}
	for _, p := range pods {
		pr := p.Pod
		atg.MembersByNode[node] = append(atg.MembersByNode[node], model.GroupMember{Pod: &pr, Node: node, IPs: p.IPs, Ports: p.Ports})
	}
	in.AppliedToGroups[atg.ID] = atg
	peerGroup := func(k int) string {
		ag := &model.AddressGroup{Meta: model.Meta{ID: fmt.Sprintf("ag-%d", k), Generation: 1, Span: []string{node}}, Selector: fmt.Sprintf("peers %d", k)}
		for j := 0; j < 10; j++ {
			n := k*10 + j
			ag.Members = append(ag.Members, model.GroupMember{Pod: &model.PodRef{Namespace: "remote", Name: fmt.Sprintf("peer-%d", n)},
				Node: "other", IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(100 + n>>16), byte(n >> 8), byte(n)})}})
		}
		in.AddressGroups[ag.ID] = ag
		return ag.ID
	}
	adminRules := nRules / 4
	rule := 0
	for p := 0; rule < adminRules; p++ {
		pol := &model.Policy{Meta: model.Meta{ID: fmt.Sprintf("anp-%d", p), Generation: 1, Span: []string{node}},
			Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: fmt.Sprintf("anp-%d", p)},
			Tier:   model.TierAdmin, Priority: int32(p), AppliedToGroups: []string{atg.ID}}
		for i := 0; i < 25 && rule < adminRules; i++ {
			pol.Rules = append(pol.Rules, model.Rule{Index: i, Direction: model.DirectionIn, Action: model.ActionDeny,
				Peer: model.Peer{AddressGroups: []string{peerGroup(rule)}}, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(1000 + rule)}}})
			rule++
		}
		in.Policies = append(in.Policies, pol)
	}
	for p := 0; rule < nRules; p++ {
		pol := &model.Policy{Meta: model.Meta{ID: fmt.Sprintf("np-%d", p), Generation: 1, Span: []string{node}},
			Source: model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "bench", Name: fmt.Sprintf("np-%d", p)},
			Tier:   model.TierNetworkPolicy, AppliedToGroups: []string{atg.ID}, Isolates: []model.Direction{model.DirectionIn}}
		for i := 0; i < 10 && rule < nRules; i++ {
			r := model.Rule{Index: i, Direction: model.DirectionIn, Action: model.ActionAllow,
				Peer: model.Peer{AddressGroups: []string{peerGroup(rule)}}, Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(1000 + rule)}}}
			if rule == nRules-1 {
				r.Peer = model.Peer{IPBlocks: []model.IPBlock{{CIDR: netip.PrefixFrom(client, 32)}}}
				r.Ports = []model.Port{{Protocol: model.ProtocolTCP, Port: iperfPort}}
			}
			pol.Rules = append(pol.Rules, r)
			rule++
		}
		in.Policies = append(in.Policies, pol)
	}
	return in
}

// BenchmarkDatapathThroughput measures TCP throughput between two pods on
// one bridge (userspace datapath) through the agent's pipeline with no
// policy and with 1000 rules realized, alternately, in the same run.
func BenchmarkDatapathThroughput(b *testing.B) {
	// Rounds alternate the two settings so that the machine's background
	// load hits both alike; medians are reported.
	seconds, rounds := 5, 3
	if quickScale() {
		seconds, rounds = 2, 2
	}
	const nRules = 1000
	waitOVSLock(b)
	env := ovsenv.Start(b)
	for b.Loop() {
		n := newAgentNode(b, env, "dp", 1)
		client, server := n.br.Pods()[0], n.br.Pods()[1]
		clientIP, serverIP := n.pods[0].IPs[0], n.pods[1].IPs[0]
		ctx := context.Background()
		noPolicy := policyflows.Input{Node: "bench-node", Pods: n.pods}
		rules := ruleSetInput("bench-node", n.pods, clientIP, nRules)
		var bases, withs, ratios []float64
		var noPolicyFlows, ruleFlows int
		for round := 0; round < rounds; round++ {
			if _, err := n.r.Update(ctx, noPolicy); err != nil {
				b.Fatalf("realizing no policy: %v", err)
			}
			noPolicyFlows = countFlows(b, n.br)
			base := iperf(b, client, server, serverIP, seconds)

			if _, err := n.r.Update(ctx, rules); err != nil {
				b.Fatalf("realizing %d rules: %v", nRules, err)
			}
			if w := n.r.Warnings(); len(w) > 0 {
				b.Fatalf("compiler warnings: %v", w)
			}
			ruleFlows = countFlows(b, n.br)
			// The rules must decide: a port no rule allows is closed.
			if err := client.ProbeTCP(netip.AddrPortFrom(serverIP, iperfPort+1), time.Second); err == nil {
				b.Fatalf("with %d rules, a port no rule allows is open", nRules)
			}
			with := iperf(b, client, server, serverIP, seconds)
			bases, withs, ratios = append(bases, base), append(withs, with), append(ratios, with/base)
		}
		base, with := median(bases), median(withs)
		b.ReportMetric(base/1e9, "no-policy-Gbps")
		b.ReportMetric(with/1e9, "rules-Gbps")
		b.ReportMetric(median(ratios), "rules/no-policy")
		b.ReportMetric(float64(rounds), "rounds")
		b.ReportMetric(float64(noPolicyFlows), "no-policy-flows")
		b.ReportMetric(float64(ruleFlows), "rules-flows")
		b.ReportMetric(nRules, "rules")
		b.ReportMetric(float64(seconds), "iperf-s")
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
