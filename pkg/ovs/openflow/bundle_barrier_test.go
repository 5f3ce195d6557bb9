package openflow

import (
	"context"
	"strings"
	"testing"
	"time"

	of13 "github.com/contiv/libOpenflow/openflow13"

	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestSwitchCommitsRestOfBundleAfterRejectedAdd pins the Open vSwitch
// behaviour that makes bundle wait for a barrier before its commit: the
// switch validates each bundle add as it arrives and, when it rejects one,
// sends the error and drops that message only — the bundle stays open,
// and a commit sent right behind the adds applies every other message.
// Committing without first collecting the adds' errors would therefore
// install part of a change (here: the delete and two of three adds). If
// this test ever fails because the commit fails too, the switch discards
// bundles with a rejected add and the barrier's round trip could go
// (TestBundleAtomicity checks the outcome the agent relies on).
func TestSwitchCommitsRestOfBundleAfterRejectedAdd(t *testing.T) {
	env := ovsenv.Start(t)
	br := env.AddBridge("br")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, br.MgmtEndpoint(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	existing := Flow{Table: 1, Priority: 10, Cookie: 0x10, Match: Match{InPort: 7}, Actions: []Action{Normal{}}}
	if err := c.AddFlows(ctx, existing); err != nil {
		t.Fatal(err)
	}
	changes := []FlowChange{
		{Command: DeleteStrict, Flow: existing},
		{Command: Add, Flow: Flow{Table: 2, Priority: 5, Cookie: 0x20, Actions: []Action{Normal{}}}},
		{Command: Add, Flow: Flow{Table: 254, Priority: 1, Cookie: 0xbad}}, // read-only table: rejected on arrival
		{Command: Add, Flow: Flow{Table: 3, Priority: 5, Cookie: 0x30}},
	}
	cn, err := c.current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := c.nextXID()
	first := c.reserveXIDs(len(changes))
	rng := cn.registerRange(first, len(changes))
	defer cn.unregisterRange(rng)
	openXID, open, err := cn.sendBundleCtrl(id, of13.OFPBCT_OPEN_REQUEST)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.unregister(openXID)
	var buf []byte
	for i, ch := range changes {
		fm, err := changeMod(ch, first+uint32(i))
		if err != nil {
			t.Fatal(err)
		}
		if buf, err = appendBundleAdd(buf, id, first+uint32(i), fm); err != nil {
			t.Fatal(err)
		}
	}
	if err := cn.writeRaw(buf); err != nil {
		t.Fatal(err)
	}
	commitXID, commit, err := cn.sendBundleCtrl(id, of13.OFPBCT_COMMIT_REQUEST)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.unregister(commitXID)
	if err := cn.waitBundleCtrl(ctx, open, of13.OFPBCT_OPEN_REQUEST); err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := cn.waitBundleCtrl(ctx, commit, of13.OFPBCT_COMMIT_REQUEST); err != nil {
		t.Fatalf("the switch refused the commit of a bundle with a rejected add (%v): it now discards such bundles, so the barrier before the commit could go", err)
	}
	errs := cn.rangeErrors(rng, func(i int, err error) error {
		return &FlowError{Index: i, Command: changes[i].Command, Flow: changes[i].Flow, Err: err}
	})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "OFPBRC_EPERM") || !strings.Contains(errs[0].Error(), "table=254") {
		t.Fatalf("add errors (before the commit reply): %v, want the table-254 add's OFPBRC_EPERM", errs)
	}
	flows, err := br.DumpFlows(-1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range flows {
		if !strings.Contains(f, "table=253") { // the client's sentinel
			got = append(got, f)
		}
	}
	want := []string{"cookie=0x20, table=2, priority=5 actions=NORMAL", "cookie=0x30, table=3, priority=5 actions=drop"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("bridge holds %q, want the bundle's other changes %q", got, want)
	}
}
