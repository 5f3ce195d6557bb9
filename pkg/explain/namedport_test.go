package explain

import (
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// An egress named port towards an ipBlock resolves through the rule's
// NamedPortGroups (what the agent uses), inside the block only, and
// resolves nothing without them.
func TestEgressNamedPortThroughNamedPortGroups(t *testing.T) {
	serve := model.NamedPort{Name: "serve", Protocol: tcp, Port: 80}
	w := newWorld(mkPod("a/src", "10.0.0.1"), mkPod("a/in", "10.0.0.2").withPorts(serve),
		mkPod("a/out", "10.0.1.2").withPorts(serve), mkPod("a/none", "10.0.0.3"))
	npg := w.ag("npg", "a/in", "a/out")
	r := rule(out, 0, model.ActionAllow, cidr("10.0.0.0/24"), model.Port{Protocol: tcp, Name: "serve"})
	r.NamedPortGroups = []string{npg}
	w.np("a", "p", w.atg("src", "a/src"), onlyE, r)
	inv, err := NewInventory(w.pods)
	if err != nil {
		t.Fatal(err)
	}
	verdict := func(dst string, port int32) Verdict {
		t.Helper()
		res, err := Explain(w.snap, inv, Query{Src: ep("a/src"), Dst: ep(dst), Protocol: tcp, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		return res.Verdict
	}
	for _, c := range []struct {
		dst  string
		port int32
		want Verdict
	}{
		{"a/in", 80, VerdictAllow},
		{"a/in", 81, VerdictDeny},
		{"a/out", 80, VerdictDeny}, // has the name, outside the block: the group does not widen the peer
		{"a/none", 80, VerdictDeny},
	} {
		if got := verdict(c.dst, c.port); got != c.want {
			t.Errorf("a/src -> %s:%d: %s, want %s", c.dst, c.port, got, c.want)
		}
	}
	// Without NamedPortGroups the name resolves nothing on the block.
	w.snap.Policies[0].Rules[0].NamedPortGroups = nil
	if got := verdict("a/in", 80); got != VerdictDeny {
		t.Errorf("without NamedPortGroups: %s, want Deny", got)
	}
	// A named-port group missing from the snapshot is an inconsistent snapshot.
	w.snap.Policies[0].Rules[0].NamedPortGroups = []string{"missing"}
	if _, err := Explain(w.snap, inv, Query{Src: ep("a/src"), Dst: ep("a/in"), Protocol: tcp, Port: 80}); err == nil {
		t.Errorf("missing named-port group accepted")
	}
}
