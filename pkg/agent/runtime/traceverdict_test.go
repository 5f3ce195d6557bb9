package runtime

import "testing"

// TestTraceVerdict: a packet that crossed into another bridge left this
// one, whatever the last pass (a flooded copy elsewhere) says.
func TestTraceVerdict(t *testing.T) {
	left := "bridge(\"n1\")\n 9. ip, priority 10\n    output:1\n\nbridge(\"fabric\")\n 0. priority 0\n    NORMAL\n" +
		"Datapath actions: ct(zone=101),recirc(0x2)\n\nrecirc(0x2) - resume conntrack\n 15. priority 0\n    drop\nDatapath actions: drop\n"
	if acts, dropped, out := traceVerdict(left, "n1"); dropped || !out || acts != "drop" {
		t.Errorf("left the bridge: dropped=%v left=%v actions=%q, want left, not dropped", dropped, out, acts)
	}
	stayed := "bridge(\"n1\")\n 15. priority 0\n    drop\nDatapath actions: drop\n"
	if _, dropped, out := traceVerdict(stayed, "n1"); !dropped || out {
		t.Errorf("dropped on the bridge: dropped=%v left=%v, want dropped, not left", dropped, out)
	}
	delivered := "bridge(\"n1\")\n 16. reg1=0x2, priority 100\n    output:2\nDatapath actions: ct(commit,zone=101),2\n"
	if _, dropped, out := traceVerdict(delivered, "n1"); dropped || out {
		t.Errorf("delivered to a local port: dropped=%v left=%v, want neither", dropped, out)
	}
}
