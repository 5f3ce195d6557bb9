package realizer_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/flowsync"
	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/proxy"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/services"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// svcNode is a node whose realizer also carries the Service proxy's
// flows, wired as the agent wires them: packet-ins of ServiceLB answered
// by a proxy.Rejecter, conntrack flushed after each services bundle.
type svcNode struct {
	*node
	of   *openflow.Client
	comp *proxy.Compiler
}

func newSvcNode(t *testing.T, env *ovsenv.Env, name string, zone uint16) *svcNode {
	t.Helper()
	n := &svcNode{node: newNode(t, env, name, zone), comp: proxy.NewCompiler(name, zone)}
	var rej *proxy.Rejecter
	c, err := openflow.Dial(context.Background(), n.br.MgmtEndpoint(), openflow.Options{
		OnPacketIn: func(pi openflow.PacketIn) { rej.Handle(pi) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rej = proxy.NewRejecter(func(port uint32, frame []byte) error { return c.PacketOut(context.Background(), port, frame) }, t.Logf)
	n.of = c
	return n
}

func (n *svcNode) start(t *testing.T) {
	t.Helper()
	r := realizer.New(n.cfg, flowsync.Client{C: n.of})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.r = r
}

// services installs in as the proxy's flows, commits, flushes, settles.
func (n *svcNode) services(t *testing.T, in proxy.Input) *proxy.Output {
	t.Helper()
	out := n.comp.Compile(in, n.r.Round())
	if _, err := n.r.UpdateServices(context.Background(), realizer.Services{Flows: out.Flows, Keys: out.Keys, Groups: out.Groups, DeleteCookies: out.DeleteCookies}); err != nil {
		t.Fatalf("services: %v", err)
	}
	n.comp.Commit()
	if err := n.of.FlushConntrack(context.Background(), out.Flushes...); err != nil {
		t.Fatalf("flush: %v", err)
	}
	n.settle(t)
	return out
}

func ep(p *testPod, v6 bool, port uint16) services.Endpoint {
	ip := p.IPv4()
	if v6 {
		ip = p.IPv6()
	}
	return services.Endpoint{IP: ip, Port: port, NodeName: p.node, Ready: true, Serving: true, Pod: p.ref.String()}
}

func clusterIP(name, ip string, proto uint8, port uint16, eps ...services.Endpoint) services.Port {
	return services.Port{Key: services.PortKey{Namespace: "default", Name: name}, Protocol: proto,
		Frontends: []services.Frontend{{Kind: services.ClusterIP, IP: netip.MustParseAddr(ip), Protocol: proto, Port: port}}, Endpoints: eps}
}

// TestServicesBalanceBeforeEgressPolicy: a pod's connections to a
// ClusterIP (TCP, UDP, IPv6) and a NodePort reach every endpoint; egress
// policy decides on the endpoint chosen, not the Service's address; a
// Service without endpoints is rejected at once; a pod reaches itself
// through its Service (hairpin, seeing the hairpin address); ClientIP
// affinity sticks; a removed endpoint's connections end while the other
// endpoint's go on; SCTP frontends translate like the others (traced).
func TestServicesBalanceBeforeEgressPolicy(t *testing.T) {
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	n := newSvcNode(t, env, "n1", 7)
	a := n.addPod(t, "a", 1)
	b := n.addPod(t, "b", 2)
	c := n.addPod(t, "c", 3)
	srv, usrv := map[*testPod]*ovsenv.Server{}, map[*testPod]*ovsenv.Server{}
	for _, p := range []*testPod{b, c} {
		srv[p] = p.ListenTCP(8080)
		t.Cleanup(srv[p].Close)
		usrv[p] = p.ListenUDP(8053)
		t.Cleanup(usrv[p].Close)
	}
	n.start(t)
	st := newState()
	st.apply(t, n.node)

	web := clusterIP("web", "10.96.0.10", services.ProtoTCP, 80, ep(b, false, 8080), ep(c, false, 8080))
	web.Frontends = append(web.Frontends,
		services.Frontend{Kind: services.ClusterIP, IP: netip.MustParseAddr("fd00:96::10"), Protocol: services.ProtoTCP, Port: 80},
		services.Frontend{Kind: services.NodePort, Protocol: services.ProtoTCP, Port: 30080})
	web.Endpoints = append(web.Endpoints, ep(b, true, 8080), ep(c, true, 8080))
	dns := clusterIP("dns", "10.96.0.53", services.ProtoUDP, 53, ep(b, false, 8053), ep(c, false, 8053))
	dns.Key.Port = "dns"
	empty := clusterIP("empty", "10.96.0.11", services.ProtoTCP, 80)
	emptyUDP := clusterIP("empty", "10.96.0.11", services.ProtoUDP, 80)
	emptyUDP.Key.Port = "udp"
	self := clusterIP("self", "10.96.0.12", services.ProtoTCP, 80, ep(b, false, 8080))
	sticky := clusterIP("sticky", "10.96.0.13", services.ProtoTCP, 80, ep(b, false, 8080), ep(c, false, 8080))
	sticky.Affinity = 30 * time.Second
	stickyUDP := clusterIP("sticky-udp", "10.96.0.15", services.ProtoUDP, 53, ep(b, false, 8053), ep(c, false, 8053))
	stickyUDP.Affinity = 30 * time.Second
	stream := clusterIP("stream", "10.96.0.14", services.ProtoSCTP, 80, ep(b, false, 8080))
	nodeAddr := netip.MustParseAddr("172.31.9.9")
	in := proxy.Input{Ports: []services.Port{web, dns, empty, emptyUDP, self, sticky, stickyUDP, stream}, NodeAddrs: []netip.Addr{nodeAddr}}
	n.services(t, in)

	// The node address is the host's: a pod resolves it through the
	// uplink, which this bridge has not; give a its MAC.
	if out, err := a.Exec("ip", "neigh", "replace", nodeAddr.String(), "lladdr", pipeline.ServiceMAC.String(), "dev", "eth0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	counts := func() (int, int) { return len(srv[b].Peers()), len(srv[c].Peers()) }
	for _, dst := range []string{"10.96.0.10:80", "[fd00:96::10]:80", "172.31.9.9:30080"} {
		b0, c0 := counts()
		for i := 0; i < 16; i++ {
			if err := a.ProbeTCP(netip.MustParseAddrPort(dst), 3*time.Second); err != nil {
				t.Fatalf("%s: %v", dst, err)
			}
		}
		if b1, c1 := counts(); b1 == b0 || c1 == c0 {
			t.Fatalf("%s: 16 connections reached b %d and c %d times; want both", dst, b1-b0, c1-c0)
		}
	}
	if err := a.ProbeUDP(netip.MustParseAddrPort("10.96.0.53:53"), 3*time.Second); err != nil {
		t.Fatalf("UDP ClusterIP: %v", err)
	}

	// Egress policy on a denies c: connections that the group sends to c
	// are denied (c sees none), those sent to b work.
	st.add(anp("deny-a-to-c", 10, st.atg(a), rule(model.DirectionOut, model.ActionDeny, peerGroups(st.ag(c)))))
	st.apply(t, n.node)
	b0, c0 := counts()
	failed := 0
	for i := 0; i < 24; i++ {
		if err := a.ProbeTCP(netip.MustParseAddrPort("10.96.0.10:80"), 500*time.Millisecond); err != nil {
			failed++
		}
	}
	b1, c1 := counts()
	if c1 != c0 || b1-b0 != 24-failed || failed == 0 {
		t.Fatalf("with egress denied to c: %d failed, b got %d, c got %d; want c none and the rest on b", failed, b1-b0, c1-c0)
	}
	st = newState()
	st.apply(t, n.node)

	// No endpoints: refused at once (kube-proxy's REJECT), not a timeout.
	start := time.Now()
	_, err := a.DialTCP(netip.MustParseAddrPort("10.96.0.11:80"), 3*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 2*time.Second {
		t.Fatalf("Service without endpoints: %v after %v; want connection refused at once", err, time.Since(start))
	}
	if err := a.ProbeUDP(netip.MustParseAddrPort("10.96.0.11:80"), time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("UDP to a Service without endpoints: %v; want port unreachable (refused)", err)
	}

	// Hairpin: b through its own Service; b's server sees the hairpin address.
	if err := b.ProbeTCP(netip.MustParseAddrPort("10.96.0.12:80"), 3*time.Second); err != nil {
		t.Fatalf("hairpin: %v\n%s", err, n.datapathState())
	}
	if peers := srv[b].Peers(); peers[len(peers)-1] != pipeline.HairpinIPv4 {
		t.Fatalf("hairpin connection came from %v, want %v", peers[len(peers)-1], pipeline.HairpinIPv4)
	}

	// ClientIP affinity: every connection of a goes where the first went,
	// also while the datapath still holds flows made before the first
	// connection's affinity was learned (the switch's revalidators, which
	// would replace them, are paused: under load they can lag by many
	// milliseconds, and a client's next connection arrives sooner).
	if out, err := n.env.Appctl("revalidator/pause"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	paused := true
	resume := func() {
		paused = false
		if out, err := n.env.Appctl("revalidator/resume"); err != nil {
			t.Errorf("%v: %s", err, out)
		}
	}
	t.Cleanup(func() {
		if paused {
			resume()
		}
	})
	b0, c0 = counts()
	for i := 0; i < 12; i++ {
		if err := a.ProbeTCP(netip.MustParseAddrPort("10.96.0.13:80"), 3*time.Second); err != nil {
			t.Fatalf("affinity, connection %d: %v\n%s", i, err, n.datapathState())
		}
	}
	if b1, c1 := counts(); b1-b0 != 12 && c1-c0 != 12 {
		t.Fatalf("affinity: b got %d and c %d of 12 connections\n%s", b1-b0, c1-c0, n.datapathState())
	}
	ub0, uc0 := len(usrv[b].Peers()), len(usrv[c].Peers())
	for i := 0; i < 8; i++ {
		if err := a.ProbeUDP(netip.MustParseAddrPort("10.96.0.15:53"), 3*time.Second); err != nil {
			t.Fatalf("UDP affinity, exchange %d: %v\n%s", i, err, n.datapathState())
		}
	}
	if ub, uc := len(usrv[b].Peers())-ub0, len(usrv[c].Peers())-uc0; (ub > 0) == (uc > 0) {
		t.Fatalf("UDP affinity: b got %d and c %d datagrams of 8 exchanges; want one endpoint only", ub, uc)
	}
	resume()

	// SCTP (no SCTP in this kernel), by ofproto/trace: a new connection to
	// the frontend goes to the Service's group (whose bucket is chosen by
	// a datapath hash, past what a trace follows); the group's endpoint
	// translates to b, and the translated packet reaches b.
	tr, err := n.br.Trace("in_port="+strconv.FormatUint(uint64(a.OFPort), 10)+",sctp,dl_src="+a.MAC.String()+",nw_src=10.0.0.1,nw_dst=10.96.0.14,sctp_src=5000,sctp_dst=80", "--ct-next", "trk,new")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr, "sctp,nw_dst=10.96.0.14,tp_dst=80") || !strings.Contains(tr, "group:") {
		t.Fatalf("SCTP trace does not reach the Service's group:\n%s", tr)
	}
	dnat, err := n.br.DumpFlows(int(pipeline.ServiceDNAT.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(dnat, "\n"), "sctp,reg7=") || !strings.Contains(strings.Join(dnat, "\n"), "nat(dst=10.0.0.2:8080)") {
		t.Fatalf("no SCTP translation to b:\n%s", strings.Join(dnat, "\n"))
	}
	tr, err = n.br.Trace("in_port="+strconv.FormatUint(uint64(a.OFPort), 10)+",sctp,dl_src="+a.MAC.String()+",nw_src=10.0.0.1,nw_dst=10.0.0.2,sctp_src=5000,sctp_dst=8080", "--ct-next", "trk,new,dnat")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr, "output:"+strconv.FormatUint(uint64(b.OFPort), 10)) {
		t.Fatalf("the translated SCTP packet does not reach b:\n%s", tr)
	}

	// Endpoint removal: a connection to c ends, one to b goes on.
	var toB, toC *ovsenv.Conn
	for i := 0; i < 40 && (toB == nil || toC == nil); i++ {
		b0, c0 := counts()
		conn, err := a.DialTCP(netip.MustParseAddrPort("10.96.0.10:80"), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Exchange("hello", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		switch b1, c1 := counts(); {
		case b1 > b0 && toB == nil:
			toB = conn
		case c1 > c0 && toC == nil:
			toC = conn
		default:
			conn.Close()
		}
	}
	if toB == nil || toC == nil {
		t.Fatal("no connection on each endpoint")
	}
	defer toB.Close()
	defer toC.Close()
	web.Endpoints = []services.Endpoint{ep(b, false, 8080), ep(b, true, 8080)}
	in.Ports[0] = web
	out := n.services(t, in)
	if len(out.Flushes) == 0 {
		t.Fatal("no conntrack flush for the removed endpoint")
	}
	if err := toB.Exchange("still there", 3*time.Second); err != nil {
		t.Fatalf("connection to the remaining endpoint broke: %v", err)
	}
	cBefore := len(srv[c].Peers())
	if err := toC.Exchange("gone", time.Second); err == nil {
		t.Fatal("connection to the removed endpoint still works")
	}
	for i := 0; i < 8; i++ {
		if err := a.ProbeTCP(netip.MustParseAddrPort("10.96.0.10:80"), 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(srv[c].Peers()); got != cBefore {
		t.Fatalf("the removed endpoint got %d new connections", got-cBefore)
	}
}

// datapathState is the node's conntrack entries and the flows packets
// hit, for failure messages.
func (n *svcNode) datapathState() string {
	ct, _ := n.env.Appctl("dpctl/dump-conntrack")
	fl, _ := n.br.DumpFlowsWithStats(-1)
	var hit []string
	for _, f := range fl {
		if !strings.Contains(f, "n_packets=0") {
			hit = append(hit, f)
		}
	}
	return "conntrack:\n" + ct + "flows hit:\n" + strings.Join(hit, "\n")
}
