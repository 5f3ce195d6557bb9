package openflow_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestGroupsInOneBundleWithFlows: a group and a flow sending to it go in
// one bundle (the group first, whatever the order given); deleting the
// group and its flow in one bundle works too; a bundle the switch rejects
// leaves groups and flows as they were; GroupIDs lists the groups.
func TestGroupsInOneBundleWithFlows(t *testing.T) {
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	br := env.AddBridge("br")
	c := dialBridge(t, br, openflow.Options{})
	ctx := context.Background()
	g := openflow.Group{ID: 42, Buckets: []openflow.Bucket{
		{Weight: 1, Actions: []openflow.Action{openflow.LoadReg{Reg: 7, Start: 0, End: 31, Value: 1}, openflow.Resubmit{Table: 2}}},
		{Weight: 1, Actions: []openflow.Action{openflow.LoadReg{Reg: 7, Start: 0, End: 31, Value: 2}, openflow.Resubmit{Table: 2}}},
	}}
	f := openflow.Flow{Table: 1, Priority: 10, Cookie: 0x5, Match: openflow.Match{EthType: 0x0800, IPDst: netip.MustParsePrefix("10.96.0.1/32")},
		Actions: []openflow.Action{openflow.GroupAction{ID: 42}}}
	if err := c.ApplyChanges(ctx, openflow.Changes{
		Flows:  []openflow.FlowChange{{Command: openflow.Add, Flow: f}},
		Groups: []openflow.GroupChange{{Command: openflow.GroupAddOrModify, Group: g}},
	}); err != nil {
		t.Fatal(err)
	}
	if ids, err := c.GroupIDs(ctx); err != nil || len(ids) != 1 || ids[0] != 42 {
		t.Fatalf("GroupIDs = %v, %v; want [42]", ids, err)
	}
	if got := dump(t, br); len(got) != 1 || !strings.Contains(got[0], "actions=group:42") {
		t.Fatalf("flows: %q", got)
	}

	// Modify the group (one bucket left) and add a flow to a group that
	// does not exist: the switch rejects the bundle, nothing changes.
	g1 := openflow.Group{ID: 42, Buckets: g.Buckets[:1]}
	bad := openflow.Flow{Table: 1, Priority: 11, Match: openflow.Match{InPort: 3}, Actions: []openflow.Action{openflow.GroupAction{ID: 43}}}
	err := c.ApplyChanges(ctx, openflow.Changes{
		Groups: []openflow.GroupChange{{Command: openflow.GroupAddOrModify, Group: g1}},
		Flows:  []openflow.FlowChange{{Command: openflow.Add, Flow: bad}},
	})
	var fe *openflow.FlowError
	if !errors.As(err, &fe) || fe.Index != 0 {
		t.Fatalf("flow to a missing group: got %v, want a FlowError for flow #0", err)
	}
	groups, err := env.Ofctl("dump-groups", br.Name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(groups, "bucket=") != 2 {
		t.Fatalf("a rejected bundle modified the group:\n%s", groups)
	}

	var ge *openflow.GroupError
	// Local validation: weight 0.
	err = c.ApplyChanges(ctx, openflow.Changes{Groups: []openflow.GroupChange{{Command: openflow.GroupAddOrModify,
		Group: openflow.Group{ID: 45, Buckets: []openflow.Bucket{{Actions: []openflow.Action{openflow.Output{Port: 1}}}}}}}})
	if !errors.As(err, &ge) || ge.Group.ID != 45 {
		t.Fatalf("weight 0: got %v, want a GroupError for group 45", err)
	}

	// Delete the flow and its group in one bundle (the flow first, whatever
	// the order given).
	if err := c.ApplyChanges(ctx, openflow.Changes{
		Groups: []openflow.GroupChange{{Command: openflow.GroupDelete, Group: openflow.Group{ID: 42}}},
		Flows:  []openflow.FlowChange{{Command: openflow.DeleteStrict, Flow: f}},
	}); err != nil {
		t.Fatal(err)
	}
	if ids, err := c.GroupIDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("GroupIDs after delete = %v, %v", ids, err)
	}
	if got := dump(t, br); len(got) != 0 {
		t.Fatalf("flows after delete: %q", got)
	}
}

// TestPacketInAndOut: a flow's Controller action hands the client the
// packet with its in_port and cookie (the client asked for packet-ins on
// the management socket), and PacketOut sends a frame out of a port.
func TestPacketInAndOut(t *testing.T) {
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	br := env.AddBridge("br")
	a := br.AddPod("a", mac("0a:00:00:00:02:01"), netip.MustParsePrefix("10.30.0.1/24"))
	b := br.AddPod("b", mac("0a:00:00:00:02:02"), netip.MustParsePrefix("10.30.0.2/24"))
	srv := b.ListenUDP(7000)
	got := make(chan openflow.PacketIn, 16)
	c := dialBridge(t, br, openflow.Options{OnPacketIn: func(pi openflow.PacketIn) { got <- pi }})
	ctx := context.Background()
	if err := c.AddFlows(ctx,
		openflow.Flow{Table: 0, Priority: 10, Match: openflow.Match{EthType: 0x0806}, Actions: []openflow.Action{openflow.Normal{}}},
		openflow.Flow{Table: 0, Priority: 20, Cookie: 0xabc, Match: openflow.Match{InPort: a.OFPort, EthType: 0x0800, IPProto: 17},
			Actions: []openflow.Action{openflow.Controller{MaxLen: 200}}},
	); err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.ProbeUDP(netip.MustParseAddrPort("10.30.0.2:7000"), 2*time.Second) }()
	var pi openflow.PacketIn
	select {
	case pi = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no packet-in")
	}
	if pi.InPort != a.OFPort || pi.Cookie != 0xabc || pi.Table != 0 || len(pi.Data) < 42 || int(pi.TotalLen) < len(pi.Data) {
		t.Fatalf("packet-in: in_port %d cookie %#x table %d, %d of %d bytes; want in_port %d, cookie 0xabc", pi.InPort, pi.Cookie, pi.Table, len(pi.Data), pi.TotalLen, a.OFPort)
	}
	// The frame is a's datagram to b: sent out of b's port, b's server gets it.
	if err := c.PacketOut(ctx, b.OFPort, pi.Data); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(srv.Peers()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if peers := srv.Peers(); len(peers) == 0 || peers[0] != a.IPv4() {
		t.Fatalf("b's server saw %v, want the datagram from %v", peers, a.IPv4())
	}
	if err := c.PacketOut(ctx, 0, pi.Data); err == nil {
		t.Fatal("packet-out to port 0 accepted")
	}
}

// TestFlushConntrack deletes exactly the connections a reply tuple
// selects, in one zone: those a given server answers.
func TestFlushConntrack(t *testing.T) {
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	br := env.AddBridge("br")
	a := br.AddPod("a", mac("0a:00:00:00:03:01"), netip.MustParsePrefix("10.40.0.1/24"))
	b := br.AddPod("b", mac("0a:00:00:00:03:02"), netip.MustParsePrefix("10.40.0.2/24"))
	d := br.AddPod("d", mac("0a:00:00:00:03:03"), netip.MustParsePrefix("10.40.0.3/24"))
	b.ListenTCP(8080)
	d.ListenTCP(8080)
	c := dialBridge(t, br, openflow.Options{})
	ctx := context.Background()
	if err := c.AddFlows(ctx,
		openflow.Flow{Table: 0, Priority: 10, Match: openflow.Match{EthType: 0x0806}, Actions: []openflow.Action{openflow.Normal{}}},
		openflow.Flow{Table: 0, Priority: 10, Match: openflow.Match{EthType: 0x0800}, Actions: []openflow.Action{openflow.CT{Zone: 9, Table: u8(1)}}},
		openflow.Flow{Table: 1, Priority: 10, Match: openflow.Match{EthType: 0x0800}, Actions: []openflow.Action{openflow.CT{Commit: true, Zone: 9}, openflow.Normal{}}},
	); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"10.40.0.2:8080", "10.40.0.3:8080"} {
		if err := a.ProbeTCP(netip.MustParseAddrPort(dst), 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	entries := func() string {
		out, err := env.Appctl("dpctl/dump-conntrack", "zone=9")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if e := entries(); !strings.Contains(e, "src=10.40.0.2") || !strings.Contains(e, "src=10.40.0.3") {
		t.Fatalf("conntrack before the flush:\n%s", e)
	}
	if err := c.FlushConntrack(ctx, openflow.ConntrackFlush{Zone: 9, IPProto: 6, Reply: openflow.ConntrackTuple{Src: b.IPv4(), SrcPort: 8080}}); err != nil {
		t.Fatal(err)
	}
	if e := entries(); strings.Contains(e, "src=10.40.0.2") || !strings.Contains(e, "src=10.40.0.3") {
		t.Fatalf("conntrack after flushing b's connections:\n%s", e)
	}
	// Another zone's entries are not selected.
	if err := c.FlushConntrack(ctx, openflow.ConntrackFlush{Zone: 8, IPProto: 6, Reply: openflow.ConntrackTuple{Src: d.IPv4()}}); err != nil {
		t.Fatal(err)
	}
	if e := entries(); !strings.Contains(e, "src=10.40.0.3") {
		t.Fatalf("a flush of zone 8 removed zone 9's entry:\n%s", e)
	}
	if err := c.FlushConntrack(ctx, openflow.ConntrackFlush{Zone: 9, Reply: openflow.ConntrackTuple{Src: d.IPv4(), SrcPort: 1}}); err == nil {
		t.Fatal("a port without a protocol was accepted")
	}
}

// TestConntrackFlushString: the agent logs each flush by this text.
func TestConntrackFlushString(t *testing.T) {
	f := openflow.ConntrackFlush{Zone: 7, IPProto: 6, Orig: openflow.ConntrackTuple{Dst: netip.MustParseAddr("10.96.0.10"), DstPort: 80},
		Reply: openflow.ConntrackTuple{Src: netip.MustParseAddr("10.244.1.5"), SrcPort: 8080}}
	if got, want := f.String(), "zone 7 proto 6 orig dst 10.96.0.10:80 reply src 10.244.1.5:8080"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
