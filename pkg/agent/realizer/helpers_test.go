package realizer_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// testPod is an ovsenv pod with its model identity.
type testPod struct {
	*ovsenv.Pod
	ref   model.PodRef
	node  string
	ports []model.NamedPort
}

func (p *testPod) member() model.GroupMember {
	ips := []netip.Addr{}
	for _, a := range p.Addrs {
		ips = append(ips, a.Addr())
	}
	return model.GroupMember{Pod: &model.PodRef{Namespace: p.ref.Namespace, Name: p.ref.Name}, Node: p.node, IPs: ips, Ports: p.ports}
}

func (p *testPod) local() pipeline.LocalPod {
	m := p.member()
	return pipeline.LocalPod{Pod: p.ref, OFPort: p.OFPort, MAC: p.MAC, IPs: m.IPs, Ports: p.ports}
}

// node is one simulated node: a bridge and its realizer.
type node struct {
	name string
	env  *ovsenv.Env
	br   *ovsenv.Bridge
	cfg  pipeline.Config
	mu   sync.Mutex
	r    *realizer.Realizer
	pods []*testPod
}

// connect dials the bridge with the agent's OpenFlow client. When the
// client reconnects to a switch that lost the flows (ovs-vswitchd
// restarted), it asks the node's current realizer to replay them.
func (n *node) connect(t *testing.T) flowsync.Installer {
	t.Helper()
	c, err := openflow.Dial(context.Background(), n.br.MgmtEndpoint(), openflow.Options{
		OnConnect: func(ctx context.Context, _ *openflow.Client, ev openflow.ConnectEvent) error {
			if ev.Reconnect && ev.FlowsLost {
				n.mu.Lock()
				r := n.r
				n.mu.Unlock()
				if r != nil {
					// Asynchronous: Replay waits for the realizer's lock, which an
					// Update blocked on this very connection may hold.
					go func() {
						if err := r.Replay(context.Background()); err != nil {
							t.Logf("replay on %s: %v", n.name, err)
						}
					}()
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("openflow dial %s: %v", n.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return flowsync.Client{C: c}
}

func newNode(t *testing.T, env *ovsenv.Env, name string, zone uint16) *node {
	t.Helper()
	br := env.AddBridge(name)
	n := &node{name: name, env: env, br: br, cfg: pipeline.Config{CtZone: zone}}
	return n
}

func (n *node) start(t *testing.T) {
	t.Helper()
	r := realizer.New(n.cfg, n.connect(t))
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("start realizer on %s: %v", n.name, err)
	}
	n.mu.Lock()
	n.r = r
	n.mu.Unlock()
}

func (n *node) addPod(t *testing.T, name string, idx int, ports ...model.NamedPort) *testPod {
	t.Helper()
	mac := net.HardwareAddr{0x0a, 0x58, 0, 0, 0, byte(idx)}
	p := n.br.AddPod(name, mac,
		netip.MustParsePrefix(fmt.Sprintf("10.0.0.%d/16", idx)),
		netip.MustParsePrefix(fmt.Sprintf("fd00::%x/64", idx)))
	tp := &testPod{Pod: p, ref: model.PodRef{Namespace: "default", Name: name}, node: n.name, ports: ports}
	n.pods = append(n.pods, tp)
	return tp
}

// state is the model a test feeds to every node.
type state struct {
	policies []*model.Policy
	atgs     map[string]*model.AppliedToGroup
	ags      map[string]*model.AddressGroup
}

func newState() *state {
	return &state{atgs: map[string]*model.AppliedToGroup{}, ags: map[string]*model.AddressGroup{}}
}

// atg returns the ID of an applied-to group holding pods.
func (s *state) atg(pods ...*testPod) string {
	var names []string
	g := &model.AppliedToGroup{MembersByNode: model.MembersByNode{}}
	for _, p := range pods {
		names = append(names, p.ref.String())
		g.MembersByNode.Append(p.node, p.member())
	}
	g.ID = "atg:" + strings.Join(names, ",")
	g.Selector = g.ID
	s.atgs[g.ID] = g
	return g.ID
}

// ag returns the ID of an address group holding pods.
func (s *state) ag(pods ...*testPod) string {
	var names []string
	g := &model.AddressGroup{}
	for _, p := range pods {
		names = append(names, p.ref.String())
		g.Members = append(g.Members, p.member())
	}
	g.ID = "ag:" + strings.Join(names, ",")
	g.Selector = g.ID
	s.ags[g.ID] = g
	return g.ID
}

func (s *state) add(p *model.Policy) *model.Policy {
	if p.ID == "" {
		p.ID = string(p.Source.Kind) + "/" + p.Source.Namespace + "/" + p.Source.Name
	}
	s.policies = append(s.policies, p)
	return p
}

func anp(name string, prio int32, applied string, rules ...model.Rule) *model.Policy {
	return &model.Policy{Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: name}, Tier: model.TierAdmin, Priority: prio,
		AppliedToGroups: []string{applied}, Rules: indexRules(rules)}
}

func banp(applied string, rules ...model.Rule) *model.Policy {
	return &model.Policy{Source: model.PolicyRef{Kind: model.KindBaselineAdminNetworkPolicy, Name: "default"}, Tier: model.TierBaseline,
		AppliedToGroups: []string{applied}, Rules: indexRules(rules)}
}

func np(name string, applied string, isolates []model.Direction, rules ...model.Rule) *model.Policy {
	return &model.Policy{Source: model.PolicyRef{Kind: model.KindNetworkPolicy, Namespace: "default", Name: name}, Tier: model.TierNetworkPolicy,
		AppliedToGroups: []string{applied}, Isolates: isolates, Rules: indexRules(rules)}
}

// indexRules numbers rules per direction in the order given.
func indexRules(rules []model.Rule) []model.Rule {
	n := map[model.Direction]int{}
	for i := range rules {
		rules[i].Index = n[rules[i].Direction]
		n[rules[i].Direction]++
	}
	return rules
}

func rule(d model.Direction, a model.Action, peer model.Peer, ports ...model.Port) model.Rule {
	return model.Rule{Direction: d, Action: a, Peer: peer, Ports: ports}
}

func peerGroups(ids ...string) model.Peer { return model.Peer{AddressGroups: ids} }

func peerCIDR(cidr string, except ...string) model.Peer {
	b := model.IPBlock{CIDR: netip.MustParsePrefix(cidr)}
	for _, e := range except {
		b.Except = append(b.Except, netip.MustParsePrefix(e))
	}
	return model.Peer{IPBlocks: []model.IPBlock{b}}
}

func anyPeer() model.Peer {
	return model.Peer{IPBlocks: []model.IPBlock{{CIDR: netip.MustParsePrefix("0.0.0.0/0")}, {CIDR: netip.MustParsePrefix("::/0")}}}
}

func tcp(port int32) model.Port { return model.Port{Protocol: model.ProtocolTCP, Port: port} }

// input is the realizer input of one node.
func (s *state) input(n *node) policyflows.Input {
	in := policyflows.Input{Node: n.name, Policies: s.policies, AppliedToGroups: s.atgs, AddressGroups: s.ags}
	for _, p := range n.pods {
		in.Pods = append(in.Pods, p.local())
	}
	return in
}

func (s *state) apply(t *testing.T, nodes ...*node) {
	t.Helper()
	for _, n := range nodes {
		if _, err := n.r.Update(context.Background(), s.input(n)); err != nil {
			t.Fatalf("update %s: %v", n.name, err)
		}
		n.settle(t)
	}
}

// settle waits until ovs-vswitchd has revalidated its datapath flow cache
// against the new OpenFlow tables. The bundle changes the tables
// atomically, but megaflows cached from the old tables keep serving
// packets until the revalidator threads recompute them (normally within
// milliseconds); a probe right after an update must not race that.
func (n *node) settle(t *testing.T) {
	t.Helper()
	if _, err := n.env.Appctl("revalidator/wait"); err != nil {
		t.Fatalf("revalidator/wait: %v", err)
	}
}

func (s *state) snapshot() *model.Snapshot {
	return &model.Snapshot{Policies: s.policies, AppliedToGroups: s.atgs, AddressGroups: s.ags}
}

// verdictOf asks the reference evaluator.
func (s *state) verdictOf(t *testing.T, all []*testPod, src, dst *testPod, dstIP netip.Addr, proto model.Protocol, port int32) bool {
	t.Helper()
	var pods []explain.Pod
	for _, p := range all {
		m := p.member()
		pods = append(pods, explain.Pod{Ref: p.ref, Node: p.node, IPs: m.IPs, Ports: p.ports})
	}
	inv, err := explain.NewInventory(pods)
	if err != nil {
		t.Fatal(err)
	}
	res, err := explain.Explain(s.snapshot(), inv, explain.Query{Src: explain.Endpoint{Pod: &src.ref}, Dst: explain.Endpoint{IP: dstIP}, Protocol: proto, Port: port})
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	return res.Verdict == explain.VerdictAllow
}

const (
	allowTimeout = 3 * time.Second
	denyTimeout  = 500 * time.Millisecond
)

// probe reports whether a new connection gets through.
func probe(t *testing.T, src *testPod, dst netip.Addr, proto model.Protocol, port int32, expectAllowed bool) bool {
	t.Helper()
	timeout := denyTimeout
	if expectAllowed {
		timeout = allowTimeout
	}
	ap := netip.AddrPortFrom(dst, uint16(port))
	var err error
	switch proto {
	case model.ProtocolTCP:
		err = src.ProbeTCP(ap, timeout)
	case model.ProtocolUDP:
		err = src.ProbeUDP(ap, timeout)
	default:
		t.Fatalf("probe: protocol %s", proto)
	}
	if err != nil && !errors.Is(err, ovsenv.ErrNoReply) && expectAllowed {
		t.Logf("probe %s -> %s/%s: %v", src.ref, proto, ap, err)
	}
	return err == nil
}

// twoPods starts a private OVS with one started node "n1" and pods a and b
// on it, b serving TCP 80: the setup most single-node tests share.
func twoPods(t *testing.T) (*ovsenv.Env, *node, *testPod, *testPod) {
	t.Helper()
	env := ovsenv.Start(t)
	n := newNode(t, env, "n1", 1)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	srv := b.ListenTCP(80)
	t.Cleanup(srv.Close)
	n.start(t)
	return env, n, a, b
}
