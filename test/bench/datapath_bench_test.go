package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// connPort is where the short-connection server listens.
const connPort = 5202

// ruleSetInput is nRules rules applied to every local pod, none of which
// matches the clients except the very last NetworkPolicy rule, which
// allows them to the iperf3 and short-connection ports: a quarter are
// Admin-tier Deny rules against other peers (each new connection is
// looked up through the whole Admin table), the rest NetworkPolicy-tier
// Allow rules, ten per policy, ten peers each.
func ruleSetInput(node string, pods []pipeline.LocalPod, clients []netip.Addr, nRules int) policyflows.Input {
	in := policyflows.Input{Node: node, Pods: pods,
		AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	atg := &model.AppliedToGroup{Meta: model.Meta{ID: "atg-local", Generation: 1, Span: []string{node}}, Selector: "bench local pods",
		MembersByNode: model.MembersByNode{}}
	for _, p := range pods {
		pr := p.Pod
		atg.MembersByNode.Append(node, model.GroupMember{Pod: &pr, Node: node, IPs: p.IPs, Ports: p.Ports})
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
				r.Peer = model.Peer{}
				for _, c := range clients {
					r.Peer.IPBlocks = append(r.Peer.IPBlocks, model.IPBlock{CIDR: netip.PrefixFrom(c, 32)})
				}
				r.Ports = []model.Port{{Protocol: model.ProtocolTCP, Port: iperfPort}, {Protocol: model.ProtocolTCP, Port: connPort}}
			}
			pol.Rules = append(pol.Rules, r)
			rule++
		}
		in.Policies = append(in.Policies, pol)
	}
	return in
}

// connServer accepts TCP connections on connPort inside a pod and closes
// each at once: the far end of connRate's short connections.
func connServer(b *testing.B, pod *ovsenv.Pod) {
	b.Helper()
	var lis net.Listener
	if err := pod.InNetns(func() error {
		var err error
		lis, err = net.Listen("tcp4", fmt.Sprintf(":%d", connPort))
		return err
	}); err != nil {
		b.Fatalf("short-connection server in %s: %v", pod.Name, err)
	}
	b.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// connWorkers is how many connections connRate keeps in flight.
const connWorkers = 4

// connRate opens and closes TCP connections from client to server's
// connServer for d, connWorkers at a time (each a new conntrack entry on
// the bridge), and returns how many completed per second. Every
// connection must succeed.
func connRate(b *testing.B, client *ovsenv.Pod, server netip.Addr, d time.Duration) float64 {
	b.Helper()
	addr := netip.AddrPortFrom(server, connPort).String()
	var done atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := 0; w < connWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The whole loop runs on a thread in the client's network
			// namespace: every socket is created there.
			err := client.InNetns(func() error {
				for time.Now().Before(deadline) {
					c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
					if err != nil {
						return err
					}
					c.Close()
					done.Add(1)
				}
				return nil
			})
			if err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("short connections %s -> %s: %v", client.Name, addr, err)
	}
	return float64(done.Load()) / time.Since(start).Seconds()
}

// BenchmarkDatapathThroughput measures the agent's pipeline on the
// userspace datapath with no policy and with 1000 rules realized,
// alternately, in the same run: TCP throughput (iperf3) between two pods
// of one node and between pods of two nodes (two bridges joined by patch
// ports, each the other's uplink), and short TCP connections per second
// between two pods of one node.
func BenchmarkDatapathThroughput(b *testing.B) {
	// Rounds alternate the two settings so that the machine's background
	// load hits both alike; medians are reported.
	seconds, connSeconds, rounds := 5, 3, 3
	if quickScale() {
		seconds, connSeconds, rounds = 2, 1, 2
	}
	const nRules = 1000
	waitOVSLock(b)
	env := ovsenv.Start(b)
	for b.Loop() {
		na := newAgentBridge(b, env, "dpa", 1)
		nb := newAgentBridge(b, env, "dpb", 2)
		ua, ub := "tf"+env.ID+"ua", "tf"+env.ID+"ub"
		if _, err := env.Vsctl("add-port", na.br.Name, ua, "--", "set", "Interface", ua, "type=patch", "options:peer="+ub,
			"--", "add-port", nb.br.Name, ub, "--", "set", "Interface", ub, "type=patch", "options:peer="+ua); err != nil {
			b.Fatal(err)
		}
		uplinkA, err := na.br.OFPort(ua)
		if err != nil {
			b.Fatal(err)
		}
		uplinkB, err := nb.br.OFPort(ub)
		if err != nil {
			b.Fatal(err)
		}
		na.start(b, pipeline.Config{CtZone: 1, UplinkPort: uplinkA})
		nb.start(b, pipeline.Config{CtZone: 2, UplinkPort: uplinkB})
		client, server, remote := na.br.Pods()[0], na.br.Pods()[1], nb.br.Pods()[0]
		clientIP, serverIP, remoteIP := na.pods[0].IPs[0], na.pods[1].IPs[0], nb.pods[0].IPs[0]
		connServer(b, server)
		ctx := context.Background()
		setting := func(rules bool) {
			b.Helper()
			for _, n := range []*agentNode{na, nb} {
				in := policyflows.Input{Node: "bench-node", Pods: n.pods}
				if rules {
					in = ruleSetInput("bench-node", n.pods, []netip.Addr{clientIP, remoteIP}, nRules)
				}
				if _, err := n.r.Update(ctx, in); err != nil {
					b.Fatalf("realizing (rules %v) on %s: %v", rules, n.br.Name, err)
				}
				if w := n.r.Warnings(); len(w) > 0 {
					b.Fatalf("compiler warnings: %v", w)
				}
			}
		}
		type figures struct{ local, remote, conns []float64 }
		var none, with figures
		var noPolicyFlows, ruleFlows int
		for round := 0; round < rounds; round++ {
			for _, rules := range []bool{false, true} {
				setting(rules)
				f := &none
				if rules {
					f = &with
					ruleFlows = countFlows(b, na.br)
					// The rules must decide: a port no rule allows is closed.
					if err := client.ProbeTCP(netip.AddrPortFrom(serverIP, iperfPort+1), time.Second); err == nil {
						b.Fatalf("with %d rules, a port no rule allows is open", nRules)
					}
				} else {
					noPolicyFlows = countFlows(b, na.br)
				}
				f.local = append(f.local, iperf(b, client, server, serverIP, seconds))
				f.remote = append(f.remote, iperf(b, remote, server, serverIP, seconds))
				f.conns = append(f.conns, connRate(b, client, serverIP, time.Duration(connSeconds)*time.Second))
			}
		}
		ratio := func(with, none []float64) float64 {
			r := make([]float64, len(with))
			for i := range with {
				r[i] = with[i] / none[i]
			}
			return median(r)
		}
		b.ReportMetric(median(none.local)/1e9, "no-policy-Gbps")
		b.ReportMetric(median(with.local)/1e9, "rules-Gbps")
		b.ReportMetric(ratio(with.local, none.local), "rules/no-policy")
		b.ReportMetric(median(none.remote)/1e9, "remote-no-policy-Gbps")
		b.ReportMetric(median(with.remote)/1e9, "remote-rules-Gbps")
		b.ReportMetric(ratio(with.remote, none.remote), "remote-rules/no-policy")
		b.ReportMetric(median(none.conns), "no-policy-conn/s")
		b.ReportMetric(median(with.conns), "rules-conn/s")
		b.ReportMetric(ratio(with.conns, none.conns), "conn-rules/no-policy")
		b.ReportMetric(float64(rounds), "rounds")
		b.ReportMetric(float64(noPolicyFlows), "no-policy-flows")
		b.ReportMetric(float64(ruleFlows), "rules-flows")
		b.ReportMetric(nRules, "rules")
		b.ReportMetric(float64(seconds), "iperf-s")
		b.ReportMetric(float64(connSeconds), "conn-s")
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
