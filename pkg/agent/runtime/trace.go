package runtime

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// placeholderMAC is the destination MAC of a traced packet to an address
// that is not a local pod's: the pipeline forwards by IP address, so any
// unicast MAC does.
const placeholderMAC = "02:00:00:00:00:01"

// trace runs ovs-vswitchd's ofproto/trace for a new connection through
// this bridge and names the rules whose flows it went through. Conntrack
// is simulated as a new connection at each recirculation (the state a
// first packet sees). A source that is no local pod arrives from the
// uplink; in encap mode from the tunnel, with the tunnel metadata it would
// carry (tun_src: the endpoint of the node whose pod CIDR holds it; tun_dst:
// local, this node's), when a peer's pod CIDR holds it, else from the
// gateway (the host, or what it routes in).
func (d *ovsDatapath) trace(ctx context.Context, ctl, rundir string, local netip.Addr, req agentquery.TraceRequest) (agentquery.Trace, error) {
	dst, err := netip.ParseAddr(req.Dst)
	if err != nil {
		return agentquery.Trace{}, fmt.Errorf("dst %q: want an IP address", req.Dst)
	}
	dst = dst.Unmap()
	proto := strings.ToUpper(req.Protocol)
	if proto == "" {
		proto = string(model.ProtocolTCP)
	}
	l4 := map[string]string{"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}[proto]
	if l4 == "" {
		return agentquery.Trace{}, fmt.Errorf("protocol %q: want TCP, UDP or SCTP", req.Protocol)
	}
	if req.Port < 1 || req.Port > 65535 {
		return agentquery.Trace{}, fmt.Errorf("port %d: want 1..65535", req.Port)
	}
	ports, uplink, err := d.ports(ctx)
	if err != nil {
		return agentquery.Trace{}, err
	}
	dstMAC := placeholderMAC
	for _, p := range ports {
		for _, ip := range p.IPs {
			if ip == dst && len(p.MAC) == 6 {
				dstMAC = p.MAC.String()
			}
		}
	}
	var inPort uint32
	var srcIP netip.Addr
	var tunnel string // tunnel metadata of a packet from the tunnel
	srcMAC := placeholderMAC
	if ns, name, isPod := strings.Cut(req.Src, "/"); isPod {
		p, ok := d.pod(ctx, ns, name)
		if !ok {
			return agentquery.Trace{}, fmt.Errorf("src pod %s has no port on this node", req.Src)
		}
		inPort, srcMAC = p.OFPort, p.MAC.String()
		for _, ip := range p.IPs {
			if ip.Is4() == dst.Is4() {
				srcIP = ip
				break
			}
		}
		if !srcIP.IsValid() {
			return agentquery.Trace{}, fmt.Errorf("src pod %s has no address of %s's family", req.Src, dst)
		}
	} else {
		// An address elsewhere: the packet arrives from another node.
		if srcIP, err = netip.ParseAddr(req.Src); err != nil {
			return agentquery.Trace{}, fmt.Errorf("src %q: want NAMESPACE/POD or an IP address", req.Src)
		}
		srcIP = srcIP.Unmap()
		if srcIP.Is4() != dst.Is4() {
			return agentquery.Trace{}, fmt.Errorf("src %s and dst %s are of different families", srcIP, dst)
		}
		d.mu.Lock()
		tun, gw := d.tunnel, d.gateway
		d.mu.Unlock()
		switch peer, ok := tunnelPeerOf(tun, srcIP); {
		case uplink != 0:
			inPort = uplink
		case ok && local.IsValid():
			inPort, tunnel = tun.Port, ovsctl.TunnelFields(peer.IP, local)
		case gw.Port != 0:
			inPort = gw.Port
		default:
			return agentquery.Trace{}, fmt.Errorf("src %s is not a local pod and this bridge has no uplink, tunnel or gateway", srcIP)
		}
	}
	src, dstField := "nw_src", "nw_dst"
	if dst.Is6() {
		src, dstField = "ipv6_src", "ipv6_dst"
	}
	spec := fmt.Sprintf("in_port=%d,dl_src=%s,dl_dst=%s,%s", inPort, srcMAC, dstMAC, l4)
	if dst.Is6() {
		spec = fmt.Sprintf("in_port=%d,dl_src=%s,dl_dst=%s,%s6", inPort, srcMAC, dstMAC, l4)
	}
	spec += fmt.Sprintf(",%s=%s,%s=%s,%s_dst=%d", src, srcIP, dstField, dst, l4, req.Port)
	if tunnel != "" {
		spec = tunnel + "," + spec
	}

	out, err := ovsctl.Run(ctx, ovsEnv(rundir), "ovs-appctl", ovsctl.TraceArgs(vswitchdTarget(ctl), d.bridge, spec)...)
	if err != nil {
		return agentquery.Trace{}, err
	}
	r := d.current()
	rules := r.Rules()
	round := r.Round()
	tr := ovsctl.ParseTrace(out)
	res := agentquery.Trace{Flow: spec, Output: out, Rules: []agentquery.Rule{}}
	seen := map[uint32]bool{}
	for _, s := range tr.Steps {
		rd, _, id := pipeline.DecodeCookie(s.Cookie)
		if ri, ok := rules[id]; ok && rd == round && id != 0 && !seen[id] {
			seen[id] = true
			res.Rules = append(res.Rules, agentquery.Rule{RuleInfo: ri, Cookie: fmt.Sprintf("%#x", pipeline.Cookie(round, pipeline.RoleAction, id))})
		}
	}
	traceVerdict(&res, tr, d.bridge)
	return res, nil
}

// tunnelPeerOf finds the tunnel peer whose pod CIDRs hold ip.
func tunnelPeerOf(t pipeline.Tunnel, ip netip.Addr) (pipeline.TunnelPeer, bool) {
	for _, p := range t.Peers {
		for _, c := range p.PodCIDRs {
			if c.Contains(ip) {
				return p, true
			}
		}
	}
	return pipeline.TunnelPeer{}, false
}

// traceVerdict fills what a trace says of the packet on bridge, where it
// started: the last datapath actions, whether bridge dropped it and
// whether it left bridge for another (see ovsctl.Trace.LeftBridge).
func traceVerdict(res *agentquery.Trace, tr *ovsctl.Trace, bridge string) {
	res.DatapathActions, res.Dropped, res.LeftBridge = tr.FinalActions(), tr.DroppedOn(bridge), tr.LeftBridge(bridge)
}

// vswitchdTarget is ovs-appctl's target: the configured control socket,
// or ovs-vswitchd, found through its pidfile in OVS_RUNDIR.
func vswitchdTarget(ctl string) string {
	if ctl == "" {
		return "ovs-vswitchd"
	}
	return ctl
}

// ovsEnv is the environment of the OVS tools run against this agent's OVS.
func ovsEnv(rundir string) []string { return append(os.Environ(), "OVS_RUNDIR="+rundir) }

// ovsRundir is where OVS keeps its sockets and pidfiles: the OVSDB
// socket's directory in every standard layout.
func ovsRundir(ovsdbSocket string) string { return filepath.Dir(ovsdbSocket) }
