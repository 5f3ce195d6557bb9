package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/test/bench/measure"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// localPods is how many real pods (network namespaces on the bridge) the
// agent benchmarks attach; every policy applies to all of them.
const localPods = 8

// peersPerPolicy is the size of each policy's own address group: remote
// pods, so each is one flow of the rule's peer clause.
const peersPerPolicy = 100

// agentNode is one bridge with real pods and the agent's realizer on it.
type agentNode struct {
	br   *ovsenv.Bridge
	pods []pipeline.LocalPod
	r    *realizer.Realizer
}

func newAgentNode(b *testing.B, env *ovsenv.Env, name string, zone uint16) *agentNode {
	b.Helper()
	n := newAgentBridge(b, env, name, zone)
	n.start(b, pipeline.Config{CtZone: zone})
	return n
}

// newAgentBridge is a bridge with its real pods, the agent not started.
func newAgentBridge(b *testing.B, env *ovsenv.Env, name string, zone uint16) *agentNode {
	b.Helper()
	n := &agentNode{br: env.AddBridge(name)}
	for i := 0; i < localPods; i++ {
		mac := net.HardwareAddr{0x0a, 0x58, 0, 0, byte(zone), byte(i + 1)}
		ip := netip.AddrFrom4([4]byte{10, 0, byte(zone), byte(i + 1)})
		p := n.br.AddPod(fmt.Sprintf("p%d", i), mac, netip.PrefixFrom(ip, 8))
		n.pods = append(n.pods, pipeline.LocalPod{
			Pod: model.PodRef{Namespace: "bench", Name: fmt.Sprintf("pod-%d", i)}, OFPort: p.OFPort, MAC: mac,
			IPs: []netip.Addr{ip}, Ports: []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: 80}},
		})
	}
	return n
}

// start connects the agent's realizer to the bridge.
func (n *agentNode) start(b *testing.B, cfg pipeline.Config) {
	b.Helper()
	c, err := openflow.Dial(context.Background(), n.br.MgmtEndpoint(), openflow.Options{ReplyTimeout: 5 * time.Minute})
	if err != nil {
		b.Fatalf("openflow dial %s: %v", n.br.Name, err)
	}
	b.Cleanup(func() { c.Close() })
	n.r = realizer.New(cfg, flowsync.Client{C: c})
	if err := n.r.Start(context.Background()); err != nil {
		b.Fatalf("starting the realizer on %s: %v", n.br.Name, err)
	}
}

// policyInput builds nPolicies policies applied to every local pod of
// node, each with one rule whose peers are its own peersPerPolicy remote
// pods on port 80 or a named port: a third AdminNetworkPolicies (Allow,
// Deny, Pass at distinct priorities), the rest NetworkPolicies isolating
// ingress.
func policyInput(node string, pods []pipeline.LocalPod, nPolicies int) policyflows.Input {
	in := policyflows.Input{Node: node, Pods: pods,
		AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	atg := &model.AppliedToGroup{Meta: model.Meta{ID: "atg-local", Generation: 1, Span: []string{node}}, Selector: "bench local pods",
		MembersByNode: model.MembersByNode{}}
	for _, p := range pods {
		pr := p.Pod
		atg.MembersByNode.Append(node, model.GroupMember{Pod: &pr, Node: node, IPs: p.IPs, Ports: p.Ports})
	}
	in.AppliedToGroups[atg.ID] = atg
	actions := []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass}
	for i := 0; i < nPolicies; i++ {
		ag := &model.AddressGroup{Meta: model.Meta{ID: fmt.Sprintf("ag-%d", i), Generation: 1, Span: []string{node}}, Selector: fmt.Sprintf("peers %d", i)}
		for j := 0; j < peersPerPolicy; j++ {
			k := i*peersPerPolicy + j
			ip := netip.AddrFrom4([4]byte{10, byte(100 + k>>16), byte(k >> 8), byte(k)})
			ref := &model.PodRef{Namespace: "remote", Name: fmt.Sprintf("peer-%d", k)}
			ag.Members = append(ag.Members, model.GroupMember{Pod: ref, Node: "other", IPs: []netip.Addr{ip}})
		}
		in.AddressGroups[ag.ID] = ag
		rule := model.Rule{Index: 0, Direction: model.DirectionIn, Peer: model.Peer{AddressGroups: []string{ag.ID}},
			Ports: []model.Port{{Protocol: model.ProtocolTCP, Port: int32(80 + i%50)}}}
		p := &model.Policy{Meta: model.Meta{ID: fmt.Sprintf("policy-%d", i), Generation: 1, Span: []string{node}},
			AppliedToGroups: []string{atg.ID}, Rules: []model.Rule{rule}}
		if i%3 == 0 {
			p.Source = model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: fmt.Sprintf("anp-%d", i)}
			p.Tier, p.Priority = model.TierAdmin, int32(i/3%1001)
			p.Rules[0].Action = actions[i/3%3]
		} else {
			p.Source = model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "bench", Name: fmt.Sprintf("np-%d", i)}
			p.Tier, p.Isolates = model.TierNetworkPolicy, []model.Direction{model.DirectionIn}
			p.Rules[0].Action = model.ActionAllow
		}
		in.Policies = append(in.Policies, p)
	}
	return in
}

// countFlows counts the flows installed on a bridge.
func countFlows(b *testing.B, br *ovsenv.Bridge) int {
	b.Helper()
	out, err := br.Ofctl("dump-flows")
	if err != nil {
		b.Fatalf("dump-flows %s: %v", br.Name, err)
	}
	stats, err := ovsctl.ParseDumpFlows(out)
	if err != nil {
		b.Fatalf("parsing dump-flows of %s: %v", br.Name, err)
	}
	return len(stats)
}

// policyChangeRuns is how many times the one-policy change is timed on
// the loaded bridge (the median is reported).
const policyChangeRuns = 7

// policyChangeCost times one policy change on the bridge that holds in's
// flows: a NetworkPolicy's rule moves to another port (and back, in turn),
// through Realizer.Update with the agent's whole state, as the agent
// applies any change. It returns the median time and the flows the change
// touched (adds, modifies and deletes of its bundle). The bridge ends as in
// describes.
func policyChangeCost(b *testing.B, n *agentNode, in policyflows.Input) (time.Duration, int) {
	b.Helper()
	// policies[1] is a NetworkPolicy (every third is Admin); a changed copy
	// of it replaces it, so in itself is unchanged.
	orig := in.Policies[1]
	moved := *orig
	moved.Generation++
	moved.Rules = slices.Clone(orig.Rules)
	moved.Rules[0].Ports = []model.Port{{Protocol: model.ProtocolTCP, Port: 7999}}
	changed := in
	changed.Policies = slices.Clone(in.Policies)
	changed.Policies[1] = &moved
	var ds []time.Duration
	touched := 0
	for i := 0; i < policyChangeRuns; i++ {
		next := changed
		if i%2 == 1 {
			next = in
		}
		start := time.Now()
		bundle, err := n.r.Update(context.Background(), next)
		ds = append(ds, time.Since(start))
		if err != nil {
			b.Fatalf("one policy change: %v", err)
		}
		touched = len(bundle.Add) + len(bundle.Modify) + len(bundle.Delete)
	}
	if _, err := n.r.Update(context.Background(), in); err != nil {
		b.Fatal(err)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], touched
}

// installRounds is how many times BenchmarkAgentInstall installs the
// flows through the agent and through ovs-ofctl, in turn: on two shared
// cores one pair of timings varies by half (the ratio of a single pair
// ranged 0.8–1.5 at load 8–11), so the medians are reported.
func installRounds() int {
	if quickScale() {
		return 3
	}
	return 5
}

// BenchmarkAgentInstall realizes policies totalling about FLOWS flows on a
// fresh bridge through the agent's realizer (compile, diff, one atomic
// OpenFlow bundle over the agent's connection), then installs the very
// same flows with `ovs-ofctl -O OpenFlow13 --bundle add-flows` into another
// fresh bridge of the same ovs-vswitchd: the floor. installRounds pairs,
// each on bridges emptied first; medians of the times and of each pair's
// ratio are reported.
func BenchmarkAgentInstall(b *testing.B) {
	targets := []int{10000, 100000}
	if quickScale() {
		targets = []int{2000, 10000}
	}
	for _, target := range targets {
		b.Run(fmt.Sprintf("flows=%d", target), func(b *testing.B) {
			waitOVSLock(b)
			env := ovsenv.Start(b)
			for b.Loop() {
				agentBr := newAgentBridge(b, env, "agent", 1)
				floor := env.AddBridge("floor")
				in := policyInput("bench-node", agentBr.pods, target/(peersPerPolicy+localPods+2))
				var agentTimes, ofctlTimes, ratios []float64
				var bundle flowsync.Bundle
				var agent *agentNode
				var file string
				installAgent := func() time.Duration {
					agent = &agentNode{br: agentBr.br, pods: agentBr.pods}
					agent.start(b, pipeline.Config{CtZone: 1})
					runtime.GC() // the previous round's realizer is garbage: not this install's
					start := time.Now()
					var err error
					bundle, err = agent.r.Update(context.Background(), in)
					took := time.Since(start)
					if err != nil {
						b.Fatalf("realizing %d policies: %v", len(in.Policies), err)
					}
					if w := agent.r.Warnings(); len(w) > 0 {
						b.Fatalf("compiler warnings: %v", w)
					}
					if file == "" {
						// The floor: the bundle's flows (every add and modify;
						// on a fresh realizer nothing is deleted) as an
						// add-flows file; every round's bundle is the same.
						file = bundleFile(b, bundle)
					}
					return took
				}
				installOfctl := func() time.Duration {
					runtime.GC()
					start := time.Now()
					if out, err := env.Ofctl("--bundle", "add-flows", floor.Name, file); err != nil {
						b.Fatalf("ovs-ofctl --bundle add-flows: %v\n%s", err, out)
					}
					return time.Since(start)
				}
				for round := 0; round < installRounds(); round++ {
					for _, br := range []*ovsenv.Bridge{agentBr.br, floor} {
						if out, err := br.Ofctl("del-flows"); err != nil {
							b.Fatalf("emptying %s: %v\n%s", br.Name, err, out)
						}
					}
					// Which side goes first alternates, so neither always
					// meets what the other left behind (ovs-vswitchd's
					// revalidation after a large change, the host's page
					// cache).
					var agentTime, ofctlTime time.Duration
					if round%2 == 0 {
						agentTime = installAgent()
						ofctlTime = installOfctl()
					} else {
						ofctlTime = installOfctl()
						agentTime = installAgent()
					}
					load, _ := measure.LoadAverage()
					progressf("flows=%d round %d: agent %.3f s, ovs-ofctl %.3f s, load %.2f", target, round+1, agentTime.Seconds(), ofctlTime.Seconds(), load)
					agentTimes, ofctlTimes = append(agentTimes, agentTime.Seconds()), append(ofctlTimes, ofctlTime.Seconds())
					ratios = append(ratios, agentTime.Seconds()/ofctlTime.Seconds())
				}
				agentFlows, floorFlows := countFlows(b, agent.br), countFlows(b, floor)
				changeTime, changeFlows := policyChangeCost(b, agent, in)

				b.ReportMetric(float64(len(in.Policies)), "policies")
				b.ReportMetric(float64(len(bundle.Add)+len(bundle.Modify)), "bundle-flows")
				b.ReportMetric(float64(agentFlows), "agent-bridge-flows")
				b.ReportMetric(float64(floorFlows), "ofctl-bridge-flows")
				b.ReportMetric(median(agentTimes), "agent-s")
				b.ReportMetric(median(ofctlTimes), "ofctl-s")
				b.ReportMetric(median(ratios), "agent/ofctl")
				b.ReportMetric(slices.Min(ratios), "agent/ofctl-min")
				b.ReportMetric(slices.Max(ratios), "agent/ofctl-max")
				b.ReportMetric(float64(len(ratios)), "install-rounds")
				b.ReportMetric(changeTime.Seconds()*1e3, "change-ms")
				b.ReportMetric(float64(changeFlows), "change-flows")
			}
		})
	}
}

// bundleFile writes a bundle's adds and modifies as an ovs-ofctl
// add-flows file.
func bundleFile(b *testing.B, bundle flowsync.Bundle) string {
	b.Helper()
	if len(bundle.Delete) > 0 || len(bundle.DeleteCookies) > 0 {
		b.Logf("bundle also deletes %d flows and %d cookie sets (not replayed by ofctl)", len(bundle.Delete), len(bundle.DeleteCookies))
	}
	var sb strings.Builder
	for _, fs := range [][]openflow.Flow{bundle.Add, bundle.Modify} {
		for _, f := range fs {
			sb.WriteString(f.String())
			sb.WriteByte('\n')
		}
	}
	file := filepath.Join(b.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return file
}
