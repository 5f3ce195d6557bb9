package runtime

import "testing"

// TestTraceVerdict: a packet that crossed into another bridge left this
// one, whatever the last pass (a flooded copy elsewhere) says.
func TestTraceVerdict(t *testing.T) {
	left := "bridge(\"n1\")\n 9. ip, priority 10\n    output:1\n\nbridge(\"fabric\")\n 0. priority 0\n    NORMAL\n" +
		"Datapath actions: ct(zone=101),recirc(0x2)\n\nrecirc(0x2) - resume conntrack\n 15. priority 0\n    drop\nDatapath actions: drop\n"
	if acts, dropped := traceVerdict(left, "n1"); dropped || acts != "drop" {
		t.Errorf("left the bridge: dropped=%v actions=%q, want not dropped", dropped, acts)
	}
	stayed := "bridge(\"n1\")\n 15. priority 0\n    drop\nDatapath actions: drop\n"
	if _, dropped := traceVerdict(stayed, "n1"); !dropped {
		t.Error("dropped on the bridge: want dropped")
	}
	delivered := "bridge(\"n1\")\n 16. reg1=0x2, priority 100\n    output:2\nDatapath actions: ct(commit,zone=101),2\n"
	if _, dropped := traceVerdict(delivered, "n1"); dropped {
		t.Error("delivered to a local port: want not dropped")
	}
}
