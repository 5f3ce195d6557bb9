package main

import (
	"strings"
	"testing"
)

// TestConfineToBridge: a cross-node trace whose allowed packet a fabric
// floods into every node bridge is judged on the source bridge alone (the
// last pass belongs to a flooded copy dropped elsewhere).
func TestConfineToBridge(t *testing.T) {
	out := `Flow: tcp,in_port=3,nw_src=10.244.1.3,nw_dst=10.244.2.3,tp_dst=80

bridge("n1")
------------
 0. in_port=3, priority 200, cookie 0x100000000000000
    goto_table:1
 9. ip, priority 10, cookie 0x100000000000000
    output:1

bridge("fabric")
----------------
 0. priority 0
    NORMAL

bridge("n3")
------------
 0. in_port=1, priority 200, cookie 0x100000000000000
    goto_table:1
 9. ip, priority 5, cookie 0x100000000000000
    drop

Final flow: unchanged
Datapath actions: ct(zone=101),recirc(0x2)

===============================================================================
recirc(0x2) - resume conntrack with ct_state=new|trk
===============================================================================

 15. priority 0, cookie 0x100000000000000
    drop

Final flow: unchanged
Datapath actions: drop
`
	tr := readTrace(out, map[string]*agentView{})
	if tr.Verdict != "Dropped" {
		t.Fatalf("raw verdict %q: the test input no longer shows the flooded-copy problem", tr.Verdict)
	}
	confineToBridge(tr, "n1")
	if tr.Verdict != "Allow" {
		t.Errorf("verdict %q, want Allow (the packet left n1 by its uplink)", tr.Verdict)
	}
	for _, s := range tr.Steps {
		if s.Bridge != "n1" {
			t.Errorf("step on %s kept", s.Bridge)
		}
	}

	local := readTrace(out[:strings.Index(out, `bridge("fabric")`)]+"Datapath actions: drop\n", map[string]*agentView{})
	confineToBridge(local, "n1")
	if local.Verdict != "Dropped" {
		t.Errorf("a trace that never left n1 keeps its verdict, got %q", local.Verdict)
	}
}
