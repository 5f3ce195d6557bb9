package ovsctl

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// TunnelFields are the ofproto/trace flow fields of a packet that arrived
// through a tunnel from outer source src to outer destination dst
// ("tun_src=...,tun_dst=..." or the tun_ipv6_ fields).
func TunnelFields(src, dst netip.Addr) string {
	if src.Is4() {
		return fmt.Sprintf("tun_src=%s,tun_dst=%s", src, dst)
	}
	return fmt.Sprintf("tun_ipv6_src=%s,tun_ipv6_dst=%s", src, dst)
}

// Trace is `ovs-appctl ofproto/trace` output, read.
type Trace struct {
	// Steps are the flows the packet hit, in order.
	Steps []TraceStep
	// DatapathActions are the "Datapath actions" of each pass: the first,
	// then one per conntrack recirculation.
	DatapathActions []string
	// Bridges are the bridges the trace printed as the packet entered
	// them, in order (patch ports join bridges into one datapath, so a
	// packet output to one crosses into the next).
	Bridges []string
}

// TraceStep is one flow a traced packet hit.
type TraceStep struct {
	// Bridge is the bridge the flow is on.
	Bridge   string
	Table    uint8
	Priority uint16
	// Match is the flow's match as the trace prints it ("" for a flow that
	// matches everything).
	Match string
	// Cookie is the flow's cookie (0: the trace prints none).
	Cookie uint64
}

var (
	traceBridge = regexp.MustCompile(`^bridge\("([^"]+)"\)`)
	// " 3. ip,reg0=0x1, priority 200, cookie 0x300000000000005", or with
	// an empty match "10. priority 0, cookie 0x100000000000000".
	traceStep = regexp.MustCompile(`^\s*(\d+)\. (?:(.*?), )?priority (\d+)(?:, cookie (0x[0-9a-fA-F]+))?\s*$`)
)

// ParseTrace reads ofproto/trace output.
func ParseTrace(out string) *Trace {
	t := &Trace{Steps: []TraceStep{}}
	bridge := ""
	resuming := false
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.Contains(trimmed, "- resume conntrack") {
			// A conntrack pass resumes where the packet recirculated, the
			// last bridge seen; ofproto/trace prints the bridge the trace
			// started on instead (patch ports share one datapath).
			resuming = true
			continue
		}
		if m := traceBridge.FindStringSubmatch(trimmed); m != nil {
			t.Bridges = append(t.Bridges, m[1])
			if !resuming || bridge == "" {
				bridge = m[1]
			}
			resuming = false
			continue
		}
		if rest, ok := strings.CutPrefix(trimmed, "Datapath actions:"); ok {
			t.DatapathActions = append(t.DatapathActions, strings.TrimSpace(rest))
			continue
		}
		m := traceStep.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		table, err := strconv.ParseUint(m[1], 10, 8)
		if err != nil {
			continue
		}
		prio, err := strconv.ParseUint(m[3], 10, 16)
		if err != nil {
			continue
		}
		s := TraceStep{Bridge: bridge, Table: uint8(table), Priority: uint16(prio), Match: m[2]}
		if m[4] != "" {
			s.Cookie, _ = strconv.ParseUint(m[4], 0, 64)
		}
		t.Steps = append(t.Steps, s)
	}
	return t
}

// FinalActions are the datapath actions of the last pass ("" when the
// trace shows none).
func (t *Trace) FinalActions() string {
	if n := len(t.DatapathActions); n > 0 {
		return t.DatapathActions[n-1]
	}
	return ""
}

// LeftBridge reports whether a packet traced on bridge crossed into
// another bridge: bridge output it (to its uplink's patch port). The passes
// after that belong to other bridges, and to whichever copy a flooding
// fabric produced last, so they do not decide what bridge did.
func (t *Trace) LeftBridge(bridge string) bool {
	for _, b := range t.Bridges {
		if b != bridge {
			return true
		}
	}
	return false
}

// DroppedOn reports whether bridge dropped a packet traced on it: it did
// not let it out to another bridge, and the last pass's datapath actions
// output it nowhere.
func (t *Trace) DroppedOn(bridge string) bool {
	if t.LeftBridge(bridge) {
		return false
	}
	a := t.FinalActions()
	return a == "drop" || a == ""
}

// StepsOn are the steps on bridge (and those no bridge header preceded).
func (t *Trace) StepsOn(bridge string) []TraceStep {
	var out []TraceStep
	for _, s := range t.Steps {
		if s.Bridge == bridge || s.Bridge == "" {
			out = append(out, s)
		}
	}
	return out
}
