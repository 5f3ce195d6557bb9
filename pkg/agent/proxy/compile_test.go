package proxy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/services"
)

func port(name, ip string, eps ...string) services.Port {
	p := services.Port{Key: services.PortKey{Namespace: "ns", Name: name}, Protocol: services.ProtoTCP,
		Frontends: []services.Frontend{{Kind: services.ClusterIP, IP: netip.MustParseAddr(ip), Protocol: services.ProtoTCP, Port: 80}}}
	for _, e := range eps {
		ap := netip.MustParseAddrPort(e)
		p.Endpoints = append(p.Endpoints, services.Endpoint{IP: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, NodeName: "n1"})
	}
	return p
}

func flowsText(out *Output) string {
	var b strings.Builder
	for _, f := range out.Flows {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	for _, g := range out.Groups {
		b.WriteString(g.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCompileIsValidAndStable: every flow and group validates, IDs stay
// the same when other Services come and go, and a second compilation of
// the same input is identical.
func TestCompileIsValidAndStable(t *testing.T) {
	c := NewCompiler("n1", 9)
	in := Input{Ports: []services.Port{port("a", "10.96.0.1", "10.0.0.1:8080", "10.0.0.2:8080"), port("b", "10.96.0.2", "10.0.0.3:8080")},
		NodeAddrs: []netip.Addr{netip.MustParseAddr("172.18.0.2")}}
	out := c.Compile(in, 3)
	c.Commit()
	for _, f := range out.Flows {
		if err := f.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	for _, g := range out.Groups {
		if err := g.Validate(); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
	if again := c.Compile(in, 3); flowsText(again) != flowsText(out) || len(again.Flushes)+len(again.DeleteCookies) != 0 {
		t.Fatalf("recompiling the same input changed something: %v %v", again.Flushes, again.DeleteCookies)
	}
	c.Commit()
	// A Service before them in order appears: theirs keep their IDs.
	in2 := Input{Ports: append([]services.Port{port("0", "10.96.0.3", "10.0.0.4:80")}, in.Ports...), NodeAddrs: in.NodeAddrs}
	out2 := c.Compile(in2, 3)
	for id, k := range out.Ports {
		if out2.Ports[id] != k {
			t.Fatalf("port %s changed ID", k)
		}
	}
	for id, e := range out.Endpoints {
		if out2.Endpoints[id] != e {
			t.Fatalf("endpoint %v changed ID", e)
		}
	}
}

// TestCompileEndsWhatLeft: an endpoint that leaves gets its connections
// flushed (by frontend and endpoint, in this node's zone) and its learned
// affinities deleted; a removed Service's frontends are flushed whole; an
// uncommitted compilation is measured again from the last commit.
func TestCompileEndsWhatLeft(t *testing.T) {
	c := NewCompiler("n1", 9)
	a := port("a", "10.96.0.1", "10.0.0.1:8080", "10.0.0.2:8080")
	a.Affinity = time.Hour
	b := port("b", "10.96.0.2", "10.0.0.3:8080")
	c.Compile(Input{Ports: []services.Port{a, b}}, 1)
	c.Commit()

	a2 := a
	a2.Endpoints = a.Endpoints[:1]
	out := c.Compile(Input{Ports: []services.Port{a2}}, 1)
	want := []openflow.ConntrackFlush{
		{Zone: 9, IPProto: 6, Orig: openflow.ConntrackTuple{Dst: netip.MustParseAddr("10.96.0.1"), DstPort: 80}, Reply: openflow.ConntrackTuple{Src: netip.MustParseAddr("10.0.0.2"), SrcPort: 8080}},
		{Zone: 9, IPProto: 6, Orig: openflow.ConntrackTuple{Dst: netip.MustParseAddr("10.96.0.2"), DstPort: 80}},
	}
	if fmt.Sprint(out.Flushes) != fmt.Sprint(want) {
		t.Fatalf("flushes\n got %v\nwant %v", out.Flushes, want)
	}
	// The endpoint that left a and b's lose their affinities; the one
	// that stays in a's group keeps them.
	if len(out.DeleteCookies) != 2 {
		t.Fatalf("affinity deletions: %v", out.DeleteCookies)
	}
	for _, d := range out.DeleteCookies {
		if _, role, _ := pipeline.DecodeCookie(d.Value); role != pipeline.RoleAffinity || d.Mask != roleAndID {
			t.Fatalf("deletion %#x/%#x is not of learned affinities", d.Value, d.Mask)
		}
	}
	// Not committed (the bundle failed): the next compilation still ends them.
	out = c.Compile(Input{Ports: []services.Port{a2}}, 1)
	if len(out.Flushes) != 2 {
		t.Fatalf("after an uncommitted compilation: %v", out.Flushes)
	}
	c.Commit()
	if out := c.Compile(Input{Ports: []services.Port{a2}}, 1); len(out.Flushes)+len(out.DeleteCookies) != 0 {
		t.Fatalf("after the commit: %v %v", out.Flushes, out.DeleteCookies)
	}
}

// TestCompileConflictsAndDecisions: a frontend two Services claim goes to
// the first (by namespace and name), with a warning; no endpoints reject
// through the agent; internalTrafficPolicy Local without a local endpoint
// drops; affinity timeouts past OpenFlow's limit are cut.
func TestCompileConflictsAndDecisions(t *testing.T) {
	c := NewCompiler("n1", 9)
	x := port("x", "192.0.2.1", "10.0.0.1:80")
	x.Frontends[0].Kind = services.ExternalIP
	y := port("y", "192.0.2.1", "10.0.0.2:80")
	y.Frontends[0].Kind = services.ExternalIP
	empty := port("empty", "10.96.0.9")
	local := port("local", "10.96.0.8", "10.0.0.3:80")
	local.Endpoints[0].NodeName = "n2"
	local.InternalLocal = true
	long := port("long", "10.96.0.7", "10.0.0.4:80")
	long.Affinity = 24 * time.Hour
	out := c.Compile(Input{Ports: []services.Port{y, x, empty, local, long}}, 1)
	if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "ns/y") || !strings.Contains(out.Warnings[0], "ns/x") {
		t.Fatalf("warnings: %q", out.Warnings)
	}
	text := flowsText(out)
	if len(out.Groups) != 2 {
		t.Errorf("%d groups, want x's and long's:\n%s", len(out.Groups), text)
	}
	for _, want := range []string{
		"nw_dst=10.96.0.9,ip_proto=6,tcp_dst=80 actions=CONTROLLER:256",
		"nw_dst=10.96.0.8,ip_proto=6,tcp_dst=80 actions=drop",
		"idle_timeout=65535",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
}

// TestStillOut: the flushes of an endpoint and a frontend that left stay
// out while they are out (a compilation not yet committed does not count)
// and are dropped once the endpoint, or the frontend, is installed again;
// a NodePort's flushes follow the node addresses.
func TestStillOut(t *testing.T) {
	c := NewCompiler("n1", 9)
	node := netip.MustParseAddr("172.18.0.2")
	np := port("np", "10.96.0.3", "10.0.0.5:8080")
	np.Frontends = append(np.Frontends, services.Frontend{Kind: services.NodePort, Protocol: services.ProtoTCP, Port: 30080})
	all := Input{Ports: []services.Port{port("a", "10.96.0.1", "10.0.0.1:8080", "10.0.0.2:8080"), port("b", "10.96.0.2", "10.0.0.3:8080"), np},
		NodeAddrs: []netip.Addr{node}}
	c.Compile(all, 1)
	c.Commit()

	// a loses 10.0.0.2, b and np go.
	less := Input{Ports: []services.Port{port("a", "10.96.0.1", "10.0.0.1:8080")}, NodeAddrs: all.NodeAddrs}
	out := c.Compile(less, 1)
	if len(out.Flushes) != 4 {
		t.Fatalf("flushes %v, want a's endpoint, b's frontend, np's ClusterIP and NodePort", out.Flushes)
	}
	if got := c.StillOut(out.Flushes); len(got) != 0 {
		t.Fatalf("before Commit the installed Services still balance them all: got %v", got)
	}
	c.Commit()
	if got := c.StillOut(out.Flushes); len(got) != 4 {
		t.Fatalf("after Commit all four are out: got %v", got)
	}
	// The endpoint comes back, and np with another node address: a's
	// endpoint and np's ClusterIP are back; b and the NodePort on the
	// old node address stay out.
	back := Input{Ports: []services.Port{port("a", "10.96.0.1", "10.0.0.1:8080", "10.0.0.2:8080"), np},
		NodeAddrs: []netip.Addr{netip.MustParseAddr("172.18.0.3")}}
	c.Compile(back, 1)
	c.Commit()
	got := c.StillOut(out.Flushes)
	want := []string{"zone 9 proto 6 orig dst 10.96.0.2:80", "zone 9 proto 6 orig dst 172.18.0.2:30080"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("still out %v, want %v", got, want)
	}
	// Another endpoint of the same frontend does not bring 10.0.0.2 back.
	c.Compile(Input{Ports: []services.Port{port("a", "10.96.0.1", "10.0.0.1:8080", "10.0.0.9:8080")}, NodeAddrs: all.NodeAddrs}, 1)
	c.Commit()
	var ep []openflow.ConntrackFlush
	for _, f := range out.Flushes {
		if f.Reply.Src.IsValid() {
			ep = append(ep, f)
		}
	}
	if got := c.StillOut(ep); len(ep) != 1 || len(got) != 1 {
		t.Fatalf("a's removed endpoint %v: still out %v", ep, got)
	}
}
