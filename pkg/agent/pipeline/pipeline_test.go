package pipeline

import (
	"net"
	"net/netip"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

func TestTablesNamedOnceInOrder(t *testing.T) {
	seen := map[string]bool{}
	for i, tb := range Tables() {
		if int(tb.ID()) != i {
			t.Fatalf("table %s has ID %d at position %d", tb, tb.ID(), i)
		}
		if seen[tb.String()] {
			t.Fatalf("table name %s used twice", tb)
		}
		seen[tb.String()] = true
		if got, ok := TableByName(tb.String()); !ok || got != tb {
			t.Fatalf("TableByName(%s) = %v, %v", tb, got, ok)
		}
	}
	if EgressAdmin >= EgressNetworkPolicy || EgressBaseline >= Forwarding || IngressMetric >= ConntrackCommit {
		t.Fatal("tables out of pipeline order")
	}
}

func TestCookieRoundTrip(t *testing.T) {
	c := Cookie(0xab, RoleAction, 0xdeadbeef)
	r, role, id := DecodeCookie(c)
	if r != 0xab || role != RoleAction || id != 0xdeadbeef {
		t.Fatalf("decode %#x = %d %v %#x", c, r, role, id)
	}
	if c&CookieRoundMask != uint64(0xab)<<56 {
		t.Fatalf("round mask: %#x", c&CookieRoundMask)
	}
}

func TestStaticFlowsClassifyOnlyAfterSync(t *testing.T) {
	pod := LocalPod{Pod: model.PodRef{Namespace: "ns", Name: "a"}, OFPort: 3, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 3},
		IPs: []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fd00::3")}}
	classified := func(synced bool) int {
		n := 0
		for _, f := range StaticFlows(Config{UplinkPort: 9, CtZone: 5}, []LocalPod{pod}, synced, 1) {
			if f.Table == Classifier.ID() && f.Match.InPort != 0 && len(f.Actions) > 0 {
				n++
			}
		}
		return n
	}
	if n := classified(false); n != 0 {
		t.Fatalf("%d ports classified before the first sync", n)
	}
	if n := classified(true); n != 2 {
		t.Fatalf("%d ports classified after sync, want the pod and the uplink", n)
	}
	if err := (LocalPod{Pod: pod.Pod, OFPort: 0xfffe, MAC: pod.MAC}).Validate(); err == nil {
		t.Fatal("reserved port number accepted")
	}
}
