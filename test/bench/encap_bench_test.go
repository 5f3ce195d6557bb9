package bench

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// encapNode is one node of BenchmarkEncapThroughput: its own network
// namespace and OVS, and one pod.
type encapNode struct {
	name  string
	env   *ovsenv.Env
	br    *ovsenv.Bridge
	ip    netip.Addr
	token string
	pod   *ovsenv.Pod
}

// BenchmarkEncapThroughput measures TCP throughput between pods on two
// nodes with the node network in noEncap mode (the host routes to the
// other node's InternalIP) and in encap mode (Geneve through OVS's
// userspace tunnel), on the same underlay: the two nodes' namespaces
// joined by one veth pair. Each node runs its own ovsdb-server and
// ovs-vswitchd (test/ovsenv, userspace datapath) and the real agent,
// watching Nodes on a real kube-apiserver and following the real
// controller. Every noEncap round runs first (encap moves the node's
// address onto its underlay bridge, which noEncap would then route
// through too), then every encap round; medians. Pods have the MTU each
// mode gives them: 1500, and 1450 under Geneve over IPv4.
func BenchmarkEncapThroughput(b *testing.B) {
	seconds, rounds := 5, 3
	if quickScale() {
		seconds, rounds = 2, 1
	}
	c := livecluster.New(b)
	kubeconfig := c.Kube.ServiceAccountKubeconfig(b, livecluster.AgentNamespace, livecluster.AgentSA, "tierflow-agent", c.Dir)
	nodes := []*encapNode{{name: "enc-1", ip: netip.MustParseAddr("192.168.89.1")}, {name: "enc-2", ip: netip.MustParseAddr("192.168.89.2")}}
	for i, n := range nodes {
		n.env = ovsenv.Start(b, ovsenv.WithOwnNetns())
		n.br = n.env.AddBridge("br")
		n.token = c.AddNode(b, n.name)
		c.SetNode(b, n.name, []string{fmt.Sprintf("10.79.%d.0/24", i+1)}, n.ip)
	}
	l1, l2 := "tfbe"+nodes[0].env.ID, "tfbe"+nodes[1].env.ID
	mustRun(b, "ip", "link", "add", l1, "netns", nodes[0].env.Netns(), "type", "veth", "peer", "name", l2, "netns", nodes[1].env.Netns())
	for i, n := range nodes {
		link := []string{l1, l2}[i]
		ns := n.env.Netns()
		mustRun(b, "ip", "-n", ns, "addr", "add", n.ip.String()+"/24", "dev", link)
		mustRun(b, "ip", "-n", ns, "link", "set", link, "up")
		// The userspace datapath reads the link once encap moves it onto
		// the underlay bridge: full checksums (see ovsenv).
		mustRun(b, "ip", "netns", "exec", ns, "ethtool", "-K", link, "tx", "off")
		gw := netip.MustParseAddr(fmt.Sprintf("10.79.%d.1", i+1))
		n.pod = n.br.AddPod("iperf-"+strconv.Itoa(i+1), nil, netip.PrefixFrom(gw.Next().Next().Next().Next(), 24))
		// As tierflow-cni's configuration does: the gateway is the pod's
		// next hop for everything off its subnet.
		mustRun(b, "ip", "-n", n.pod.Netns, "route", "replace", "default", "via", gw.String())
		c.AddPod(b, n.pod, n.name, map[string]string{"app": "iperf"})
	}
	c.StartController(b)
	client, server := nodes[0].pod, nodes[1].pod
	const echoPort = 8080 // the probe that says the path is up
	server.ListenTCP(echoPort)

	// measure runs the agents of both nodes in mode with the pods' MTU,
	// then iperf3 from client to server.
	measure := func(mode string, mtu int) float64 {
		for _, n := range nodes {
			mustRun(b, "ip", "-n", n.pod.Netns, "link", "set", n.pod.IfName, "mtu", strconv.Itoa(mtu))
			mustRun(b, "ip", "-n", n.env.Netns(), "link", "set", n.pod.HostIf, "mtu", strconv.Itoa(mtu))
		}
		var agents []*livecluster.Agent
		for i, n := range nodes {
			opts := c.AgentOptions(n.env, n.br, n.name, n.token, uint16(i+1))
			opts.Config.NodeNetwork.Mode = mode
			opts.Config.CNI.MTU = mtu
			opts.Config.Kubeconfig = kubeconfig
			opts.NodeNetNS = n.env.NetnsPath()
			agents = append(agents, livecluster.StartAgent(b, n.name, opts))
		}
		defer func() {
			for _, a := range agents {
				a.Stop()
			}
		}()
		for _, a := range agents {
			a.RealizedOn(b)
		}
		dst := netip.AddrPortFrom(server.IPv4(), echoPort)
		livecluster.Eventually(b, 60*time.Second, mode+": client -> server", func() error { return client.ProbeTCP(dst, 2*time.Second) })
		return iperf(b, client, server, server.IPv4(), seconds)
	}
	var noEncap, encap []float64
	for b.Loop() {
		for r := 0; r < rounds; r++ {
			fmt.Printf("bench: noEncap round %d\n", r+1)
			noEncap = append(noEncap, measure(config.NodeNetworkNoEncap, 1500))
		}
		mtu := 1500 - nodenet.EncapOverhead(config.TunnelGeneve, false)
		for r := 0; r < rounds; r++ {
			fmt.Printf("bench: encap round %d\n", r+1)
			encap = append(encap, measure(config.NodeNetworkEncap, mtu))
		}
		b.ReportMetric(median(noEncap)/1e9, "noencap-Gbps")
		b.ReportMetric(median(encap)/1e9, "encap-Gbps")
		b.ReportMetric(median(encap)/median(noEncap), "encap/noencap")
		b.ReportMetric(float64(mtu), "encap-pod-mtu")
		b.ReportMetric(float64(rounds), "rounds")
		b.ReportMetric(float64(seconds), "iperf-s")
	}
}

func mustRun(b *testing.B, args ...string) {
	b.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}
