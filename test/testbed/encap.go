package testbed

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/config/cniinstall"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// The encap bed (Options.Encap) runs nodes the way tierflow's encap node
// network expects them on a real cluster, on a network that does not
// carry pod addresses:
//
//   - every node is a network namespace of its own (its host stack) with
//     its own ovsdb-server and ovs-vswitchd (ovsenv.WithOwnNetns) and one
//     bridge, "br";
//   - node i's link to the router namespace (Testbed.Router) holds its
//     InternalIP 172.30.i.2/24 (and fd00:30:i::2/64 with IPv6), its
//     default routes point at the router (172.30.i.1, fd00:30:i::1): nodes
//     are in different subnets, joined only by routing;
//   - the router forwards between the nodes and drops every packet with a
//     pod address (10.244.0.0/16, fd00:10:244::/48): pods' packets cross
//     only encapsulated;
//   - kwok runs in the test's namespace: kube-apiserver reaches it at the
//     node's ExternalIP (Node.ExternalIP, on NodeInterface, one end of a
//     veth pair in the test's namespace);
//   - each node's runtime attaches pods with tierflow-cni in the node's
//     namespace, with the configuration tierflow-install-cni writes in
//     encap mode (the gateway as default route, the pod MTU derived from
//     the node's link), and runs hostNetwork pods there on its InternalIP;
//   - the agents (test/e2e/framework) run in encap mode with the node's
//     namespace as their node network namespace; they own the gateway, the
//     tunnel and the underlay bridge the way they do on a real node.

// EncapEnv set to 1 makes the suites that run on the test bed (test/e2e,
// test/conformance) bring it up with Encap: `make test-encap`.
const EncapEnv = "TIERFLOW_TESTBED_ENCAP"

// EncapFromEnv reports whether EncapEnv asks for the encap bed.
func EncapFromEnv() bool { return os.Getenv(EncapEnv) == "1" }

// underlayPodNets are the pod ranges the router drops.
var underlayPodNets = []string{"10.244.0.0/16", "fd00:10:244::/48"}

// startUnderlay creates the router namespace and the interface holding
// the nodes' ExternalIPs.
func (t *Testbed) startUnderlay() error {
	suffix, err := randomByte()
	if err != nil {
		return err
	}
	t.Router = fmt.Sprintf("%s%d-router%d", ovsenvPrefix, os.Getpid(), suffix)
	if err := run("ip", "netns", "add", t.Router); err != nil {
		return err
	}
	t.tb.Cleanup(func() { _ = run("ip", "netns", "delete", t.Router) })
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
	} {
		if err := run("ip", append([]string{"netns", "exec", t.Router}, args...)...); err != nil {
			return err
		}
	}
	for _, n := range underlayPodNets {
		tool := "iptables"
		if strings.Contains(n, ":") {
			tool = "ip6tables"
		}
		for _, dir := range []string{"-s", "-d"} {
			if err := run("ip", "netns", "exec", t.Router, tool, "-A", "FORWARD", dir, n, "-j", "DROP"); err != nil {
				return err
			}
		}
	}
	// The ExternalIPs: one end of a veth pair in the test's namespace,
	// deleted (with its peer) at cleanup.
	t.NodeInterface = fmt.Sprintf("tfbx%d", suffix)
	_ = run("ip", "link", "delete", t.NodeInterface)
	if err := run("ip", "link", "add", t.NodeInterface, "type", "veth", "peer", "name", t.NodeInterface+"p"); err != nil {
		return err
	}
	t.tb.Cleanup(func() { _ = run("ip", "link", "delete", t.NodeInterface) })
	return run("ip", "link", "set", t.NodeInterface+"p", "up")
}

// ovsenvPrefix starts the router's name like ovsenv's namespaces, so a
// crashed test's router is removed with them.
const ovsenvPrefix = "tfenv-"

// addEncapNode creates node i's namespace, OVS, link and CNI
// configuration (see the top of this file); external is its ExternalIP.
func (t *Testbed) addEncapNode(n *Node, i int, opts Options) (*Node, error) {
	n.ExternalIP, n.IP = n.IP, fmt.Sprintf("172.30.%d.2", i)
	n.OVS = ovsenv.Start(t.tb, ovsenv.WithOwnNetns())
	n.Bridge = n.OVS.AddBridge("br")
	ns := n.OVS.Netns()
	link, peer := "tful0", fmt.Sprintf("n%d", i)
	if err := run("ip", "link", "add", link, "netns", ns, "type", "veth", "peer", "name", peer, "netns", t.Router); err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"ip", "-n", ns, "addr", "add", n.IP + "/24", "dev", link},
		{"ip", "-n", t.Router, "addr", "add", fmt.Sprintf("172.30.%d.1/24", i), "dev", peer},
	}
	if opts.IPv6 {
		n.IPv6 = fmt.Sprintf("fd00:30:%x::2", i)
		cmds = append(cmds,
			[]string{"ip", "-n", ns, "addr", "add", n.IPv6 + "/64", "dev", link, "nodad"},
			[]string{"ip", "-n", t.Router, "addr", "add", fmt.Sprintf("fd00:30:%x::1/64", i), "dev", peer, "nodad"})
	}
	for _, x := range []struct{ ns, dev string }{{ns, link}, {t.Router, peer}} {
		// The userspace datapath reads and writes the node's link (its
		// underlay bridge takes it over): full checksums on both ends.
		cmds = append(cmds, []string{"ip", "-n", x.ns, "link", "set", x.dev, "up"},
			[]string{"ip", "netns", "exec", x.ns, "ethtool", "-K", x.dev, "tx", "off"})
	}
	cmds = append(cmds, []string{"ip", "-n", ns, "route", "add", "default", "via", fmt.Sprintf("172.30.%d.1", i)})
	if opts.IPv6 {
		cmds = append(cmds, []string{"ip", "-n", ns, "-6", "route", "add", "default", "via", fmt.Sprintf("fd00:30:%x::1", i)})
	}
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return nil, err
		}
	}
	conf, err := t.encapCNIConfig(n)
	if err != nil {
		return nil, err
	}
	if err := t.startNode(n, conf); err != nil {
		return nil, err
	}
	return n, nil
}

// encapCNIConfig is the node's tierflow-cni configuration as
// tierflow-install-cni writes it in encap mode.
func (t *Testbed) encapCNIConfig(n *Node) ([]byte, error) {
	cfg := EncapAgentConfig(n)
	local := nodenet.Node{Name: n.Name}
	for _, ip := range []string{n.IP, n.IPv6} {
		if ip != "" {
			local.InternalIPs = append(local.InternalIPs, netip.MustParseAddr(ip))
		}
	}
	for _, c := range n.PodCIDRs {
		local.PodCIDRs = append(local.PodCIDRs, netip.MustParsePrefix(c))
	}
	mtu, err := nodenet.PodMTU(&cfg, local, n.OVS.NetnsPath())
	if err != nil {
		return nil, err
	}
	cfg.CNI.MTU = mtu
	return cniinstall.PluginConf(&cfg, n.PodCIDRs, filepath.Join(n.StateDir, "ipam"))
}

// EncapAgentConfig is the agent configuration of an encap bed's node n
// (besides the controller's address and credentials): its bridge and OVS,
// the userspace datapath, the encap node network.
func EncapAgentConfig(n *Node) config.Agent {
	cfg := config.DefaultAgent()
	cfg.NodeName = n.Name
	cfg.BridgeName = n.Bridge.Name
	cfg.DatapathType = config.DatapathNetdev
	cfg.OVSDBSocket = n.OVS.DBSocketPath()
	cfg.OpenFlowSocket = n.Bridge.MgmtSocketPath()
	cfg.NodeNetwork.Mode = config.NodeNetworkEncap
	return cfg
}

// NodeExec runs a command in node n's namespace (its host stack).
func (n *Node) NodeExec(args ...string) (string, error) {
	if n.OVS.Netns() == "" {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		return string(out), err
	}
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.OVS.Netns()}, args...)...).CombinedOutput()
	return string(out), err
}
