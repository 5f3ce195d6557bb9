package runtime

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// placeholderMAC is the destination MAC of a traced packet to an address
// that is not a local pod's: the pipeline forwards by IP address, so any
// unicast MAC does.
const placeholderMAC = "02:00:00:00:00:01"

var cookieRE = regexp.MustCompile(`cookie (0x[0-9a-f]+)`)

// trace runs ovs-vswitchd's ofproto/trace for a new connection through
// this bridge and names the rules whose flows it went through. Conntrack
// is simulated as a new connection at each recirculation (the state a
// first packet sees).
func (d *ovsDatapath) trace(ctx context.Context, ctl, rundir string, req agentquery.TraceRequest) (agentquery.Trace, error) {
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
	ports, uplink, err := d.ports()
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
	srcMAC := placeholderMAC
	if ns, name, isPod := strings.Cut(req.Src, "/"); isPod {
		p, ok := d.pod(ns, name)
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
		// An address elsewhere: the packet arrives from the uplink.
		if srcIP, err = netip.ParseAddr(req.Src); err != nil {
			return agentquery.Trace{}, fmt.Errorf("src %q: want NAMESPACE/POD or an IP address", req.Src)
		}
		srcIP = srcIP.Unmap()
		if srcIP.Is4() != dst.Is4() {
			return agentquery.Trace{}, fmt.Errorf("src %s and dst %s are of different families", srcIP, dst)
		}
		if uplink == 0 {
			return agentquery.Trace{}, fmt.Errorf("src %s is not a local pod and this bridge has no uplink", srcIP)
		}
		inPort = uplink
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

	target := ctl
	if target == "" {
		target = "ovs-vswitchd" // found through the pidfile in OVS_RUNDIR
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ovs-appctl", "-t", target, "ofproto/trace", d.bridge, spec,
		"--ct-next", "trk,new", "--ct-next", "trk,new")
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+rundir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return agentquery.Trace{}, fmt.Errorf("ofproto/trace %s: %v: %s", spec, err, strings.TrimSpace(string(out)))
	}
	r := d.current()
	rules := r.Rules()
	round := r.Round()
	res := agentquery.Trace{Flow: spec, Output: string(out), Rules: []agentquery.Rule{}}
	seen := map[uint32]bool{}
	for _, m := range cookieRE.FindAllStringSubmatch(res.Output, -1) {
		c, err := strconv.ParseUint(m[1], 0, 64)
		if err != nil {
			continue
		}
		rd, _, id := pipeline.DecodeCookie(c)
		if ri, ok := rules[id]; ok && rd == round && id != 0 && !seen[id] {
			seen[id] = true
			res.Rules = append(res.Rules, agentquery.Rule{RuleInfo: ri, Cookie: fmt.Sprintf("%#x", pipeline.Cookie(round, pipeline.RoleAction, id))})
		}
	}
	res.DatapathActions, res.Dropped, res.LeftBridge = traceVerdict(res.Output, d.bridge)
	return res, nil
}

var traceBridgeRE = regexp.MustCompile(`(?m)^bridge\("([^"]+)"\)`)

// traceVerdict reads ofproto/trace output for a packet traced on bridge:
// the last "Datapath actions" line, whether the packet is dropped on this
// bridge, and whether it left it. A packet that crossed a patch port into
// another bridge left this one (the source node outputs to its uplink only
// what its policy allowed); the passes after that belong to other bridges,
// and to whichever copy a flooding fabric produced last, so they do not
// decide.
func traceVerdict(out, bridge string) (actions string, dropped, left bool) {
	for _, line := range strings.Split(out, "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "Datapath actions:"); ok {
			actions = strings.TrimSpace(a)
		}
	}
	for _, m := range traceBridgeRE.FindAllStringSubmatch(out, -1) {
		if m[1] != bridge {
			return actions, false, true
		}
	}
	return actions, actions == "drop" || actions == "", false
}

// ovsRundir is where OVS keeps its sockets and pidfiles: the OVSDB
// socket's directory in every standard layout.
func ovsRundir(ovsdbSocket string) string { return filepath.Dir(ovsdbSocket) }
