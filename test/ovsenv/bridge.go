package ovsenv

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierflow/tierflow/pkg/cni/hostguard"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// Bridge is an OVS bridge of an Env.
type Bridge struct {
	env *Env
	// Name is the real bridge name: the requested name with the Env ID.
	Name string

	mu   sync.Mutex
	pods []*Pod
}

// AddBridge creates a bridge with datapath_type=netdev, fail_mode=secure
// (no flows: nothing is forwarded) and protocols=OpenFlow13. The bridge's
// real name is "tf" + Env ID + name, at most 15 characters (a Linux
// interface name), so keep name short.
func (e *Env) AddBridge(name string) *Bridge {
	e.t.Helper()
	full := "tf" + e.ID + name
	if len(full) > 15 {
		e.t.Fatalf("ovsenv: bridge name %q too long (%q exceeds 15 characters)", name, full)
	}
	if _, err := e.Vsctl("add-br", full, "--", "set", "Bridge", full,
		"datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13"); err != nil {
		e.t.Fatalf("ovsenv: %v", err)
	}
	if err := waitForSocket(filepath.Join(e.Dir, full+".mgmt"), startTimeout); err != nil {
		e.t.Fatalf("ovsenv: bridge %s: %v\n%s", full, err, e.log("ovs-vswitchd"))
	}
	br := &Bridge{env: e, Name: full}
	e.mu.Lock()
	e.bridges = append(e.bridges, br)
	e.mu.Unlock()
	return br
}

// Env returns the bridge's Env.
func (b *Bridge) Env() *Env { return b.env }

// MgmtSocketPath is the bridge's OpenFlow management socket.
func (b *Bridge) MgmtSocketPath() string { return filepath.Join(b.env.Dir, b.Name+".mgmt") }

// MgmtEndpoint is the management socket as an OVS target ("unix:PATH").
func (b *Bridge) MgmtEndpoint() string { return "unix:" + b.MgmtSocketPath() }

// Ofctl runs `ovs-ofctl -O OpenFlow13 CMD BRIDGE ARGS...`.
func (b *Bridge) Ofctl(cmd string, args ...string) (string, error) {
	return b.env.Ofctl(append([]string{cmd, b.Name}, args...)...)
}

// DumpFlows returns the flows of one table in ovs-ofctl's dump-flows text,
// one flow per element, without the statistics fields (duration, n_packets,
// n_bytes, idle_age...), so the result can be compared. A negative table
// dumps every table. Use DumpFlowsWithStats for the counters.
func (b *Bridge) DumpFlows(table int) ([]string, error) {
	lines, err := b.DumpFlowsWithStats(table)
	if err != nil {
		return nil, err
	}
	for i, l := range lines {
		lines[i] = stripStats(l)
	}
	return lines, nil
}

// DumpFlowsWithStats is DumpFlows with the statistics fields kept.
func (b *Bridge) DumpFlowsWithStats(table int) ([]string, error) {
	args := []string{"dump-flows", b.Name}
	if table >= 0 {
		args = append(args, "table="+strconv.Itoa(table))
	}
	out, err := b.env.Ofctl(args...)
	if err != nil {
		return nil, err
	}
	var flows []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_FLOW") || strings.HasPrefix(l, "NXST_FLOW") {
			continue
		}
		flows = append(flows, l)
	}
	return flows, nil
}

var statsFields = map[string]bool{
	"duration": true, "n_packets": true, "n_bytes": true, "idle_age": true, "hard_age": true,
}

// stripStats removes the counter fields of one dump-flows line.
func stripStats(line string) string {
	fields := strings.Split(line, ", ")
	kept := fields[:0]
	for _, f := range fields {
		k, _, _ := strings.Cut(strings.TrimSpace(f), "=")
		if statsFields[k] {
			continue
		}
		kept = append(kept, strings.TrimSpace(f))
	}
	return strings.Join(kept, ", ")
}

// Trace runs `ovs-appctl ofproto/trace BRIDGE SPEC` (SPEC in ovs-ofctl flow
// syntax, e.g. "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80")
// and returns its output; the last line starting with "Datapath actions:"
// says what happens to the packet.
func (b *Bridge) Trace(spec string, extra ...string) (string, error) {
	return b.env.Appctl(append([]string{"ofproto/trace", b.Name, spec}, extra...)...)
}

// OFPort returns the OpenFlow port number of an interface, waiting until
// ovs-vswitchd assigned one.
func (b *Bridge) OFPort(iface string) (uint32, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		out, err := b.env.Vsctl("get", "Interface", iface, "ofport")
		if err != nil {
			return 0, err
		}
		n, perr := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if perr == nil && n > 0 {
			return uint32(n), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("interface %s has no ofport (%q): %s", iface, strings.TrimSpace(out), b.env.log("ovs-vswitchd"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pod is a network namespace attached to a bridge by a veth pair.
type Pod struct {
	bridge *Bridge
	// Name is the name given to AddPod.
	Name string
	// Netns is the namespace name (ip netns), NetnsPath its bind mount.
	Netns     string
	NetnsPath string
	// IfName is the interface inside the namespace; HostIf is its veth peer,
	// an OVS port of the bridge with ofport OFPort.
	IfName string
	HostIf string
	OFPort uint32
	MAC    net.HardwareAddr
	Addrs  []netip.Prefix
}

// SetExternalID sets one external_ids key of the pod's OVS interface (as
// the CNI plugin records the pod's UID: ovsdb.KeyPodUID).
func (p *Pod) SetExternalID(key, value string) error {
	_, err := p.bridge.env.Vsctl("set", "Interface", p.HostIf, fmt.Sprintf("external_ids:%q=%q", key, value))
	return err
}

// PodNamespace is the namespace AddPod records in the interface's
// external_ids.
const PodNamespace = "default"

// PodInterfaceName is the name of the pod's interface inside its namespace.
const PodInterfaceName = "eth0"

// AddPod creates a network namespace with interface eth0 (MAC mac, the given
// addresses, default routes out of eth0), and adds the veth peer to the
// bridge. The OVS interface gets external_ids tierflow.io/pod-name=name,
// tierflow.io/pod-namespace=default, tierflow.io/pod-ips and
// tierflow.io/pod-mac, as the tierflow CNI plugin would set them.
func (b *Bridge) AddPod(name string, mac net.HardwareAddr, addrs ...netip.Prefix) *Pod {
	e := b.env
	e.t.Helper()
	e.mu.Lock()
	e.podCount++
	n := e.podCount
	e.mu.Unlock()
	p := &Pod{
		bridge: b,
		Name:   name,
		Netns:  fmt.Sprintf("%s%d-%s-%d", nsPrefix, os.Getpid(), e.ID, n),
		IfName: PodInterfaceName,
		HostIf: fmt.Sprintf("tf%sv%d", e.ID, n),
		MAC:    mac,
		Addrs:  addrs,
	}
	p.NetnsPath = "/run/netns/" + p.Netns
	if len(p.HostIf) > 15 {
		e.t.Fatalf("ovsenv: too many pods (interface name %q too long)", p.HostIf)
	}
	must := func(args ...string) {
		e.t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			e.t.Fatalf("ovsenv: pod %s: %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	}
	must("ip", "netns", "add", p.Netns)
	e.mu.Lock()
	e.namespaces = append(e.namespaces, p.Netns)
	e.mu.Unlock()
	// Create the pair inside the namespace, then move the host end out:
	// the pod-side name (eth0) may exist in the host namespace.
	must("ip", "-n", p.Netns, "link", "add", p.IfName, "type", "veth", "peer", "name", p.HostIf)
	hostNS := "1" // the test process's namespace (pid 1 shares it)
	if e.netns != "" {
		hostNS = e.netns
	}
	must("ip", "-n", p.Netns, "link", "set", p.HostIf, "netns", hostNS)
	// As tierflow-cni does on a userspace-datapath bridge: only OVS may
	// receive what the pod sends, not the host's stack (package hostguard).
	if err := hostguard.Install(e.NetnsPath(), p.HostIf); err != nil {
		e.t.Fatalf("ovsenv: pod %s: %v", name, err)
	}
	if mac != nil {
		must("ip", "-n", p.Netns, "link", "set", p.IfName, "address", mac.String())
	}
	must("ip", "netns", "exec", p.Netns, "ethtool", "-K", p.IfName, "tx", "off")
	mustHost := func(args ...string) {
		e.t.Helper()
		if out, err := e.hostCommand(args[0], args[1:]...).CombinedOutput(); err != nil {
			e.t.Fatalf("ovsenv: pod %s: %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	}
	mustHost("ethtool", "-K", p.HostIf, "tx", "off")
	must("ip", "-n", p.Netns, "link", "set", "lo", "up")
	hasV4, hasV6 := false, false
	var ips []string
	for _, a := range addrs {
		args := []string{"ip", "-n", p.Netns, "addr", "add", a.String(), "dev", p.IfName}
		if a.Addr().Is6() {
			args = append(args, "nodad")
			hasV6 = true
		} else {
			hasV4 = true
		}
		must(args...)
		ips = append(ips, a.Addr().String())
	}
	must("ip", "-n", p.Netns, "link", "set", p.IfName, "up")
	mustHost("ip", "link", "set", p.HostIf, "up")
	if hasV4 {
		must("ip", "-n", p.Netns, "route", "add", "default", "dev", p.IfName)
	}
	if hasV6 {
		must("ip", "-n", p.Netns, "-6", "route", "add", "default", "dev", p.IfName)
	}
	if mac == nil {
		out, err := exec.Command("ip", "netns", "exec", p.Netns, "cat", "/sys/class/net/"+p.IfName+"/address").Output()
		if err != nil {
			e.t.Fatalf("ovsenv: pod %s: reading MAC: %v", name, err)
		}
		if p.MAC, err = net.ParseMAC(strings.TrimSpace(string(out))); err != nil {
			e.t.Fatalf("ovsenv: pod %s: %v", name, err)
		}
	}
	args := []string{"add-port", b.Name, p.HostIf, "--", "set", "Interface", p.HostIf,
		fmt.Sprintf("external_ids:%q=%q", ovsdb.KeyPodName, name),
		fmt.Sprintf("external_ids:%q=%q", ovsdb.KeyPodNamespace, PodNamespace),
		fmt.Sprintf("external_ids:%q=%q", ovsdb.KeyPodIPs, strings.Join(ips, ",")),
		fmt.Sprintf("external_ids:%q=%q", ovsdb.KeyPodMAC, p.MAC.String()),
	}
	if _, err := e.Vsctl(args...); err != nil {
		e.t.Fatalf("ovsenv: pod %s: %v", name, err)
	}
	port, err := b.OFPort(p.HostIf)
	if err != nil {
		e.t.Fatalf("ovsenv: pod %s: %v", name, err)
	}
	p.OFPort = port
	b.mu.Lock()
	b.pods = append(b.pods, p)
	b.mu.Unlock()
	return p
}

func (b *Bridge) hostLinks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var links []string
	for _, p := range b.pods {
		links = append(links, p.HostIf)
	}
	return links
}

// Pods returns the bridge's pods in creation order.
func (b *Bridge) Pods() []*Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*Pod(nil), b.pods...)
}

// IPv4 returns the pod's first IPv4 address (invalid if none).
func (p *Pod) IPv4() netip.Addr {
	for _, a := range p.Addrs {
		if a.Addr().Is4() {
			return a.Addr()
		}
	}
	return netip.Addr{}
}

// IPv6 returns the pod's first IPv6 address (invalid if none).
func (p *Pod) IPv6() netip.Addr {
	for _, a := range p.Addrs {
		if a.Addr().Is6() {
			return a.Addr()
		}
	}
	return netip.Addr{}
}

// Exec runs a command inside the pod's namespace (ip netns exec) and returns
// its combined output.
func (p *Pod) Exec(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", p.Netns}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in pod %s: %s: %v: %s", p.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// AdoptPod registers a pod that something else attached to the bridge —
// the real tierflow-cni, in tests of it — so that the pod's probes and
// listeners work as for AddPod: netns is its namespace (ip netns name),
// hostIf the bridge-side interface (its ofport is looked up), addrs its
// addresses. The namespace is deleted at cleanup.
func (b *Bridge) AdoptPod(name, netns, hostIf string, addrs ...netip.Prefix) *Pod {
	e := b.env
	e.t.Helper()
	p := &Pod{bridge: b, Name: name, Netns: netns, NetnsPath: "/run/netns/" + netns, IfName: PodInterfaceName, HostIf: hostIf, Addrs: addrs}
	e.mu.Lock()
	e.namespaces = append(e.namespaces, netns)
	e.mu.Unlock()
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", "/sys/class/net/"+p.IfName+"/address").Output()
	if err != nil {
		e.t.Fatalf("ovsenv: pod %s: reading MAC: %v", name, err)
	}
	if p.MAC, err = net.ParseMAC(strings.TrimSpace(string(out))); err != nil {
		e.t.Fatalf("ovsenv: pod %s: %v", name, err)
	}
	if p.OFPort, err = b.OFPort(hostIf); err != nil {
		e.t.Fatalf("ovsenv: pod %s: %v", name, err)
	}
	b.mu.Lock()
	b.pods = append(b.pods, p)
	b.mu.Unlock()
	return p
}

// ListenTCP adds a passive OpenFlow listener on the loopback address to
// the bridge (a Controller record "ptcp:PORT:127.0.0.1", out of band, on
// a port that was free) and returns its target, "tcp:127.0.0.1:PORT",
// once it accepts connections. A passive listener only accepts
// connections, each a service connection like the management socket's:
// the bridge gets no primary controller, so its fail mode, its flows and
// the other connections stay as they are (no in-band or fail-open flows;
// pkg/ovs/openflow's TestMonitorOverTCP checks it). Over TCP the kernel
// timestamps what the switch sends (SO_TIMESTAMPNS), which a unix socket
// cannot. Not in an Env of its own network namespace (WithOwnNetns),
// whose loopback is not this process's.
func (b *Bridge) ListenTCP() (string, error) {
	if b.env.netns != "" {
		return "", fmt.Errorf("ovsenv: bridge %s: a loopback listener in the Env's own network namespace is out of this process's reach", b.Name)
	}
	// A port free now (the switch reports no port it bound for a
	// service listener, so "ptcp:0" would leave it unknown).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("ovsenv: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	if _, err := b.env.Vsctl("--", "--id=@c", "create", "Controller", fmt.Sprintf(`target="ptcp:%s:127.0.0.1"`, port), "connection_mode=out-of-band",
		"--", "add", "Bridge", b.Name, "controller", "@c"); err != nil {
		return "", fmt.Errorf("ovsenv: bridge %s: %w", b.Name, err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "tcp:" + addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("ovsenv: bridge %s: its loopback listener %s accepts no connection after %v: %w", b.Name, addr, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
