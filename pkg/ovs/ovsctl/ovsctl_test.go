package ovsctl

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The testdata files are real output of OVS 3.1.0 (bridge names
// shortened): three node bridges n1, n2, n3 running the agent's pipeline
// (pkg/agent/realizer), their uplinks patched into a bridge "fabric" that
// switches with NORMAL, as test/testbed wires nodes. Pod a (port 2, n1);
// pods b (port 2) and c (port 3) on n2; an AdminNetworkPolicy denies a's
// egress to c, a NetworkPolicy allows b's ingress from a on TCP 80 only.
func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dump parses a testdata dump.
func dump(t *testing.T, name string) []DumpedFlow {
	t.Helper()
	flows, err := ParseDumpFlows(read(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return flows
}

func TestParseDumpFlows(t *testing.T) {
	withStats, noStats := dump(t, "dump-flows.txt"), dump(t, "dump-flows-no-stats.txt")
	if len(withStats) != 70 || len(noStats) != 70 {
		t.Fatalf("%d flows with statistics, %d without; the dumps hold 70", len(withStats), len(noStats))
	}
	var packets uint64
	for i := range withStats {
		packets += withStats[i].Packets
		a, b := withStats[i], noStats[i]
		a.Packets, a.Bytes = 0, 0
		if a != b {
			t.Errorf("flow %d: %+v with statistics, %+v without", i, withStats[i], noStats[i])
		}
	}
	if packets == 0 {
		t.Error("no packet counted: the counters were not read")
	}
	// The pipeline's sentinel and a rule's action flow, as dumped.
	if f := withStats[0]; f != (DumpedFlow{Cookie: 0x101000000000000, Table: 0, Priority: 1}) {
		t.Errorf("first flow %+v, want the sentinel", f)
	}
	if !slices.Contains(noStats, DumpedFlow{Cookie: 0x103000000000001, Table: 4, Priority: 32500}) {
		t.Errorf("the deny rule's action flow is missing: %+v", noStats)
	}

	// What ovs-ofctl leaves out: cookie 0, table 0, the default priority.
	fabric, fabricNoStats := dump(t, "dump-flows-fabric.txt"), dump(t, "dump-flows-fabric-no-stats.txt")
	want := []DumpedFlow{{Cookie: 0x2a, Priority: 5}, {Priority: 0}, {Table: 1, Priority: DefaultPriority}}
	for i := range fabric {
		fabric[i].Packets, fabric[i].Bytes = 0, 0
	}
	if !slices.Equal(fabric, want) || !slices.Equal(fabricNoStats, want) {
		t.Errorf("fabric flows %+v (no statistics: %+v), want %+v", fabric, fabricNoStats, want)
	}
	if _, err := ParseDumpFlows(" cookie=0xZZ, priority=1 actions=drop"); err == nil {
		t.Error("a cookie that does not parse was accepted")
	}
}

func TestParseTraceAcrossBridges(t *testing.T) {
	tr := ParseTrace(read(t, "trace-cross-node-allowed.txt"))
	if !slices.Equal(tr.Bridges, []string{"n1", "n1", "fabric", "n2", "n3", "n1", "n1"}) {
		t.Errorf("bridges %v", tr.Bridges)
	}
	if len(tr.DatapathActions) != 4 || tr.FinalActions() != "drop" {
		t.Errorf("datapath actions %q", tr.DatapathActions)
	}
	// The packet left n1 through its uplink: allowed there, whatever the
	// last pass (a flooded copy dropped on n3) says.
	if !tr.LeftBridge("n1") || tr.DroppedOn("n1") {
		t.Errorf("left n1 %v, dropped on n1 %v; want left, not dropped", tr.LeftBridge("n1"), tr.DroppedOn("n1"))
	}
	// Steps: an empty match is read too (the fabric's NORMAL flow, and the
	// policy tables' fall-through flows).
	first := tr.Steps[0]
	if first != (TraceStep{Bridge: "n1", Table: 0, Priority: 200, Match: "in_port=2", Cookie: 0x100000000000000}) {
		t.Errorf("first step %+v", first)
	}
	var onFabric, emptyOnN1 int
	for _, s := range tr.Steps {
		if s.Bridge == "fabric" {
			onFabric++
			if s.Match != "" || s.Cookie != 0 || s.Priority != 0 {
				t.Errorf("fabric step %+v, want the NORMAL flow", s)
			}
		}
		if s.Bridge == "n1" && s.Match == "" {
			emptyOnN1++
		}
	}
	if onFabric != 1 || emptyOnN1 != 5 {
		t.Errorf("%d steps on the fabric (want 1), %d fall-through steps on n1 (want 5)", onFabric, emptyOnN1)
	}
	// The steps after a conntrack recirculation are those of the last
	// bridge seen, not of the bridge the trace prints.
	conj := false
	for _, s := range tr.StepsOn("n1") {
		if s.Cookie == 0x103000000000002 {
			conj = true
		}
	}
	if conj {
		t.Error("n2's ingress rule counted as a step on n1")
	}
}

func TestParseTraceOnOneBridge(t *testing.T) {
	for _, tc := range []struct {
		file, bridge string
		dropped      bool
		lastStep     TraceStep
	}{
		{"trace-admin-deny.txt", "n1", true, TraceStep{Bridge: "n1", Table: 15, Priority: 290, Match: "reg0=0x20/0x20", Cookie: 0x100000000000000}},
		{"trace-ingress-isolation.txt", "n2", true, TraceStep{Bridge: "n2", Table: 15, Priority: 290, Match: "reg0=0x20/0x20", Cookie: 0x100000000000000}},
		{"trace-ingress-allowed.txt", "n2", false, TraceStep{Bridge: "n2", Table: 16, Priority: 200, Match: "reg1=0x2", Cookie: 0x100000000000000}},
		{"trace-unclassified-port.txt", "n1", true, TraceStep{Bridge: "n1", Table: 0, Priority: 0, Cookie: 0x100000000000000}},
	} {
		tr := ParseTrace(read(t, tc.file))
		if tr.LeftBridge(tc.bridge) || tr.DroppedOn(tc.bridge) != tc.dropped {
			t.Errorf("%s: left %v, dropped %v; want dropped %v", tc.file, tr.LeftBridge(tc.bridge), tr.DroppedOn(tc.bridge), tc.dropped)
		}
		if n := len(tr.Steps); n == 0 || tr.Steps[n-1] != tc.lastStep {
			t.Errorf("%s: steps %+v, want the last %+v", tc.file, tr.Steps, tc.lastStep)
		}
	}
}

func TestArgs(t *testing.T) {
	if got := TraceArgs("", "br", "in_port=1,tcp"); !slices.Equal(got, []string{"ofproto/trace", "br", "in_port=1,tcp", "--ct-next", "trk,new", "--ct-next", "trk,new"}) {
		t.Errorf("TraceArgs = %q", got)
	}
	if got := TraceArgs("/run/ovs.ctl", "br", "tcp"); got[0] != "-t" || got[1] != "/run/ovs.ctl" {
		t.Errorf("TraceArgs with a target = %q", got)
	}
}
