package openflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	of13 "github.com/contiv/libOpenflow/openflow13"
	"github.com/contiv/libOpenflow/util"
)

// Delete is the non-strict delete command for FlowChange: it removes every
// flow of Flow.Table (all tables with AllTables) whose cookie equals
// Flow.Cookie under CookieMask and whose match includes Flow.Match.
// Flow.Priority is ignored.
const Delete Command = Command(of13.FC_DELETE)

// FlowChange is one change of a bundle.
type FlowChange struct {
	Command Command
	Flow    Flow
	// CookieMask and AllTables apply to Delete only.
	CookieMask uint64
	AllTables  bool
}

// FlowError is a change the switch (or local validation) rejected.
type FlowError struct {
	// Index of the change in the call's list.
	Index   int
	Command Command
	Flow    Flow
	Err     error
}

func (e *FlowError) Error() string {
	return fmt.Sprintf("%s flow #%d [%s]: %v", e.Command, e.Index, e.Flow.String(), e.Err)
}

func (e *FlowError) Unwrap() error { return e.Err }

// SwitchError is an OpenFlow error message from the switch.
type SwitchError struct {
	Type, Code   uint16
	Experimenter uint32 // for Type 0xffff
}

func (e *SwitchError) Error() string {
	name := errorNames[[2]uint16{e.Type, e.Code}]
	if name == "" {
		if e.Type == 0xffff {
			name = fmt.Sprintf("experimenter %#x error %d", e.Experimenter, e.Code)
			if e.Experimenter == of13.ONF_EXPERIMENTER_ID {
				if be := of13.ParseBundleError(e.Code); be != nil {
					name = "bundle: " + be.Error()
				}
			}
		} else {
			name = fmt.Sprintf("%s code %d", errorTypeNames[e.Type], e.Code)
		}
	}
	return fmt.Sprintf("switch rejected: %s (type %d, code %d)", name, e.Type, e.Code)
}

var errorTypeNames = map[uint16]string{
	0: "OFPET_HELLO_FAILED", 1: "OFPET_BAD_REQUEST", 2: "OFPET_BAD_ACTION", 3: "OFPET_BAD_INSTRUCTION",
	4: "OFPET_BAD_MATCH", 5: "OFPET_FLOW_MOD_FAILED", 6: "OFPET_GROUP_MOD_FAILED", 7: "OFPET_PORT_MOD_FAILED",
	8: "OFPET_TABLE_MOD_FAILED", 9: "OFPET_QUEUE_OP_FAILED", 10: "OFPET_SWITCH_CONFIG_FAILED",
	11: "OFPET_ROLE_REQUEST_FAILED", 12: "OFPET_METER_MOD_FAILED", 13: "OFPET_TABLE_FEATURES_FAILED",
}

var errorNames = map[[2]uint16]string{
	{1, 0}: "OFPBRC_BAD_VERSION", {1, 1}: "OFPBRC_BAD_TYPE", {1, 2}: "OFPBRC_BAD_MULTIPART", {1, 3}: "OFPBRC_BAD_EXPERIMENTER",
	{1, 4}: "OFPBRC_BAD_EXP_TYPE", {1, 5}: "OFPBRC_EPERM", {1, 6}: "OFPBRC_BAD_LEN", {1, 9}: "OFPBRC_BAD_TABLE_ID",
	{2, 0}: "OFPBAC_BAD_TYPE", {2, 1}: "OFPBAC_BAD_LEN", {2, 3}: "OFPBAC_BAD_EXP_TYPE", {2, 4}: "OFPBAC_BAD_OUT_PORT",
	{2, 5}: "OFPBAC_BAD_ARGUMENT", {2, 9}: "OFPBAC_BAD_OUT_GROUP", {2, 10}: "OFPBAC_MATCH_INCONSISTENT",
	{2, 13}: "OFPBAC_BAD_SET_TYPE", {2, 14}: "OFPBAC_BAD_SET_LEN", {2, 15}: "OFPBAC_BAD_SET_ARGUMENT",
	{3, 0}: "OFPBIC_UNKNOWN_INST", {3, 1}: "OFPBIC_UNSUP_INST", {3, 2}: "OFPBIC_BAD_TABLE_ID",
	{3, 6}: "OFPBIC_BAD_LEN",
	{4, 0}: "OFPBMC_BAD_TYPE", {4, 1}: "OFPBMC_BAD_LEN", {4, 3}: "OFPBMC_BAD_DL_ADDR_MASK", {4, 4}: "OFPBMC_BAD_NW_ADDR_MASK",
	{4, 5}: "OFPBMC_BAD_WILDCARDS", {4, 6}: "OFPBMC_BAD_FIELD", {4, 7}: "OFPBMC_BAD_VALUE", {4, 8}: "OFPBMC_BAD_MASK",
	{4, 9}: "OFPBMC_BAD_PREREQ", {4, 10}: "OFPBMC_DUP_FIELD",
	{5, 0}: "OFPFMFC_UNKNOWN", {5, 1}: "OFPFMFC_TABLE_FULL", {5, 2}: "OFPFMFC_BAD_TABLE_ID", {5, 3}: "OFPFMFC_OVERLAP",
	{5, 4}: "OFPFMFC_EPERM", {5, 5}: "OFPFMFC_BAD_TIMEOUT", {5, 6}: "OFPFMFC_BAD_COMMAND", {5, 7}: "OFPFMFC_BAD_FLAGS",
}

// decodeError turns an OFPT_ERROR message into a *SwitchError.
func decodeError(msg []byte) error {
	if len(msg) < 12 {
		return errors.New("short OpenFlow error message")
	}
	e := &SwitchError{Type: binary.BigEndian.Uint16(msg[8:10]), Code: binary.BigEndian.Uint16(msg[10:12])}
	if e.Type == 0xffff && len(msg) >= 16 {
		e.Experimenter = binary.BigEndian.Uint32(msg[12:16])
	}
	return e
}

// Apply makes all changes atomically: either every change is applied or
// none is. More than one change goes through an OpenFlow bundle (ONF
// extension 230 as OVS implements it for OpenFlow 1.3, atomic and ordered);
// a single change is one flow-mod followed by a barrier. Rejected changes
// come back as *FlowError values (errors.As) naming the flow, whether the
// switch rejected them or local validation did; either way nothing is
// applied. (A bundle is encoded while it is sent: a flow that fails local
// validation after the first chunk of a large bundle went out makes the
// bundle be discarded.)
func (c *Client) Apply(ctx context.Context, changes []FlowChange) error {
	if len(changes) == 0 {
		return nil
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if len(changes) == 1 {
		fm, err := changeMod(changes[0], c.nextXID())
		if err != nil {
			return fmt.Errorf("nothing applied: %w", &FlowError{Index: 0, Command: changes[0].Command, Flow: changes[0].Flow, Err: err})
		}
		cn, err := c.current(ctx)
		if err != nil {
			return err
		}
		return cn.single(ctx, changes[0], fm)
	}
	cn, err := c.current(ctx)
	if err != nil {
		return err
	}
	return cn.bundle(ctx, len(changes), func(i int, xid uint32) (util.Message, error) {
		fm, err := changeMod(changes[i], xid)
		if err != nil {
			return nil, err
		}
		return fm, nil
	}, func(i int, err error) error {
		return &FlowError{Index: i, Command: changes[i].Command, Flow: changes[i].Flow, Err: err}
	})
}

func changeMod(ch FlowChange, xid uint32) (*of13.FlowMod, error) {
	switch ch.Command {
	case Add, ModifyStrict, DeleteStrict:
		return ch.Flow.flowMod(ch.Command, xid)
	case Delete:
		f := ch.Flow
		fm := of13.NewFlowMod()
		fm.Xid = xid
		fm.Command = of13.FC_DELETE
		fm.TableId = f.Table
		if ch.AllTables {
			fm.TableId = of13.OFPTT_ALL
		} else if f.Table > maxTable {
			return nil, fmt.Errorf("table %d out of range", f.Table)
		}
		fm.Cookie = f.Cookie
		fm.CookieMask = ch.CookieMask
		match, err := f.encodeMatch()
		if err != nil {
			return nil, err
		}
		for _, mf := range match {
			fm.Match.AddField(mf)
		}
		return fm, nil
	}
	return nil, fmt.Errorf("unknown command %d", ch.Command)
}

func (cn *conn) single(ctx context.Context, ch FlowChange, fm *of13.FlowMod) error {
	w := cn.register(fm.Xid, 4)
	defer cn.unregister(fm.Xid)
	if err := cn.write(fm); err != nil {
		return err
	}
	at, err := cn.barrierAt(ctx)
	if err != nil {
		return err
	}
	if msg := pending(w); msg != nil && msg[1] == of13.Type_Error {
		return &FlowError{Index: 0, Command: ch.Command, Flow: ch.Flow, Err: decodeError(msg)}
	}
	cn.client.lastApplied.Store(at)
	return nil
}

// bundleWriteChunk is how many bytes of bundle-add messages are encoded
// before they are written: the switch parses the first ones while the
// rest are encoded, and one write carries a few thousand messages.
const bundleWriteChunk = 256 << 10

// bundle streams n messages to the switch as one bundle, message i
// encoded by encode with its xid and named in errors by fail: the adds are
// encoded as they go and written in chunks (the bundle is opened just
// before the first chunk, so a small bundle that fails local validation
// sends nothing), then a barrier collects add-time errors, then the bundle
// is committed — or discarded when the switch or local validation rejected
// a message. The adds carry consecutive xids, so one range waiter collects
// the switch's errors about them. The barrier costs a round trip, but the
// commit cannot follow the adds unseen: Open vSwitch drops a rejected add
// and keeps the bundle open, so a commit sent behind it would install the
// bundle's other changes (TestSwitchCommitsRestOfBundleAfterRejectedAdd).
func (cn *conn) bundle(ctx context.Context, n int, encode func(i int, xid uint32) (util.Message, error), fail func(i int, err error) error) error {
	id := cn.client.nextXID() // bundle IDs only need to be unique per connection
	first := cn.client.reserveXIDs(n)
	rng := cn.registerRange(first, n)
	defer cn.unregisterRange(rng)
	// The open request's reply is not waited for before the adds: the
	// switch handles a connection's messages in order, so it is there by
	// the time the barrier's is (checked then). One round trip less per
	// update, which on a busy node is one wait for ovs-vswitchd's turn.
	var open *waiter
	var openXID uint32
	defer func() {
		if open != nil {
			cn.unregister(openXID)
		}
	}()
	flush := func(buf []byte) error {
		if open == nil {
			xid, w, err := cn.sendBundleCtrl(id, of13.OFPBCT_OPEN_REQUEST)
			if err != nil {
				return fmt.Errorf("open bundle: %w", err)
			}
			open, openXID = w, xid
		}
		return cn.writeRaw(buf)
	}
	var local []error
	buf := make([]byte, 0, bundleWriteChunk+4096)
	for i := 0; i < n; i++ {
		xid := first + uint32(i)
		msg, err := encode(i, xid)
		if err == nil && len(local) == 0 {
			buf, err = appendBundleAdd(buf, id, xid, msg)
		}
		if err != nil {
			local = append(local, fail(i, err))
			continue
		}
		if len(local) == 0 && len(buf) >= bundleWriteChunk {
			if err := flush(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if len(local) > 0 {
		if open != nil {
			if err := cn.bundleCtrl(ctx, id, of13.OFPBCT_DISCARD_REQUEST); err != nil {
				local = append(local, fmt.Errorf("discard bundle: %w", err))
			}
		}
		return fmt.Errorf("nothing applied: %w", errors.Join(local...))
	}
	if err := flush(buf); err != nil {
		return err
	}
	if err := cn.barrier(ctx); err != nil {
		return err
	}
	if err := cn.waitBundleCtrl(ctx, open, of13.OFPBCT_OPEN_REQUEST); err != nil {
		// Nothing to commit; a bundle the adds may have opened goes.
		_ = cn.bundleCtrl(ctx, id, of13.OFPBCT_DISCARD_REQUEST)
		return fmt.Errorf("open bundle: %w", err)
	}
	if flowErrs := cn.rangeErrors(rng, fail); len(flowErrs) > 0 {
		if err := cn.bundleCtrl(ctx, id, of13.OFPBCT_DISCARD_REQUEST); err != nil {
			// The connection is probably gone; OVS discards open bundles of a
			// closed connection.
			flowErrs = append(flowErrs, fmt.Errorf("discard bundle: %w", err))
		}
		return fmt.Errorf("bundle not applied: %w", errors.Join(flowErrs...))
	}
	commitErr := cn.commitBundle(ctx, id)
	if commitErr == nil {
		return nil
	}
	// Commit-time failures name the failed message by its xid; they arrive
	// before the commit reply.
	flowErrs := cn.rangeErrors(rng, fail)
	if len(flowErrs) == 0 {
		return fmt.Errorf("commit bundle: %w", commitErr)
	}
	return fmt.Errorf("bundle not applied: %w", errors.Join(flowErrs...))
}

// rangeErrors turns the switch's errors about a bundle's adds (by xid)
// into errors naming the message (fail), in bundle order.
func (cn *conn) rangeErrors(rng *xidRange, fail func(i int, err error) error) []error {
	byIndex := cn.takeRange(rng)
	idx := make([]int, 0, len(byIndex))
	for i := range byIndex {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var errs []error
	for _, i := range idx {
		for _, msg := range byIndex[i] {
			if msg[1] == of13.Type_Error {
				errs = append(errs, fail(i, decodeError(msg)))
			}
		}
	}
	return errs
}

// bundleAddHeaderLen is the OpenFlow header, ONF experimenter ID and type,
// bundle ID, padding and flags in front of a bundled message.
const bundleAddHeaderLen = 24

// appendBundleAdd appends an ONF bundle-add message carrying m, whose
// xid is xid (OVS requires the two to be equal), to buf.
func appendBundleAdd(buf []byte, id, xid uint32, m util.Message) ([]byte, error) {
	msg, err := m.MarshalBinary()
	if err != nil {
		return buf, err
	}
	n := bundleAddHeaderLen + len(msg)
	if n > 0xffff {
		return buf, fmt.Errorf("message of %d bytes does not fit in an OpenFlow bundle-add", len(msg))
	}
	var h [bundleAddHeaderLen]byte
	h[0], h[1] = of13.VERSION, of13.Type_Experimenter
	binary.BigEndian.PutUint16(h[2:4], uint16(n))
	binary.BigEndian.PutUint32(h[4:8], xid)
	binary.BigEndian.PutUint32(h[8:12], of13.ONF_EXPERIMENTER_ID)
	binary.BigEndian.PutUint32(h[12:16], of13.Type_BundleAdd)
	binary.BigEndian.PutUint32(h[16:20], id)
	binary.BigEndian.PutUint16(h[22:24], of13.OFPBCT_ATOMIC|of13.OFPBCT_ORDERED)
	return append(append(buf, h[:]...), msg...), nil
}

// bundleCtrl sends a bundle control request and waits for its reply.
func (cn *conn) bundleCtrl(ctx context.Context, id uint32, typ uint16) error {
	xid, w, err := cn.sendBundleCtrl(id, typ)
	if err != nil {
		return err
	}
	defer cn.unregister(xid)
	return cn.waitBundleCtrl(ctx, w, typ)
}

// commitBundle commits bundle id and, when it was committed, records its
// reply's arrival (Client.LastApplied).
func (cn *conn) commitBundle(ctx context.Context, id uint32) error {
	xid, w, err := cn.sendBundleCtrl(id, of13.OFPBCT_COMMIT_REQUEST)
	if err != nil {
		return err
	}
	defer cn.unregister(xid)
	if err := cn.waitBundleCtrl(ctx, w, of13.OFPBCT_COMMIT_REQUEST); err != nil {
		return err
	}
	cn.client.lastApplied.Store(w.arrived.Load())
	return nil
}

// sendBundleCtrl sends a bundle control request; its reply goes to the
// returned waiter (unregister xid when done).
func (cn *conn) sendBundleCtrl(id uint32, typ uint16) (uint32, *waiter, error) {
	msg := of13.NewBundleControl(&of13.BundleControl{BundleID: id, Type: typ, Flags: of13.OFPBCT_ATOMIC | of13.OFPBCT_ORDERED})
	xid := cn.client.nextXID()
	msg.Header.Xid = xid
	w := cn.register(xid, 2)
	if err := cn.write(msg); err != nil {
		cn.unregister(xid)
		return 0, nil, err
	}
	return xid, w, nil
}

// waitBundleCtrl waits for the reply to a bundle control request of type
// typ.
func (cn *conn) waitBundleCtrl(ctx context.Context, w *waiter, typ uint16) error {
	rep, err := cn.wait(ctx, w)
	if err != nil {
		return err
	}
	switch rep[1] {
	case of13.Type_Error:
		return decodeError(rep)
	case of13.Type_Experimenter:
		// header(8) experimenter(4) exp_type(4) bundle_id(4) type(2) flags(2)
		if len(rep) >= 22 && binary.BigEndian.Uint32(rep[12:16]) == of13.Type_BundleCtrl &&
			binary.BigEndian.Uint16(rep[20:22]) == typ+1 {
			return nil
		}
	}
	return fmt.Errorf("unexpected reply (type %d) to bundle control %d", rep[1], typ)
}

// AddFlows installs flows atomically (add replaces an identical match and
// resets its counters).
func (c *Client) AddFlows(ctx context.Context, flows ...Flow) error {
	return c.Apply(ctx, changesOf(Add, flows))
}

// ModifyFlows replaces the actions of flows with the same table, priority
// and match, keeping counters, atomically. Flows that do not exist are not
// added (OpenFlow 1.3 semantics): use AddFlows for those.
func (c *Client) ModifyFlows(ctx context.Context, flows ...Flow) error {
	return c.Apply(ctx, changesOf(ModifyStrict, flows))
}

// DeleteFlows removes flows with the same table, priority and match,
// atomically.
func (c *Client) DeleteFlows(ctx context.Context, flows ...Flow) error {
	return c.Apply(ctx, changesOf(DeleteStrict, flows))
}

// DeleteByCookie removes the flows of every table whose cookie equals
// cookie under mask.
func (c *Client) DeleteByCookie(ctx context.Context, cookie, mask uint64) error {
	return c.Apply(ctx, []FlowChange{{Command: Delete, Flow: Flow{Cookie: cookie}, CookieMask: mask, AllTables: true}})
}

// DeleteTable removes every flow of one table.
func (c *Client) DeleteTable(ctx context.Context, table uint8) error {
	return c.Apply(ctx, []FlowChange{{Command: Delete, Flow: Flow{Table: table}}})
}

func changesOf(cmd Command, flows []Flow) []FlowChange {
	out := make([]FlowChange, len(flows))
	for i, f := range flows {
		out[i] = FlowChange{Command: cmd, Flow: f}
	}
	return out
}

// FlowStatsFilter selects flows for FlowStats.
type FlowStatsFilter struct {
	// Table limits the query to one table; nil queries all tables.
	Table *uint8
	// Cookie under CookieMask; a zero mask matches every cookie.
	Cookie, CookieMask uint64
}

// FlowStat is one flow's counters.
type FlowStat struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	Packets  uint64
	Bytes    uint64
	Duration time.Duration
}

// FlowStats returns the counters of the selected flows (multipart flow
// stats). The client's sentinel flow is left out.
func (c *Client) FlowStats(ctx context.Context, filter FlowStatsFilter) ([]FlowStat, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	stats, err := cn.flowStats(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := stats[:0]
	for _, s := range stats {
		if s.Cookie == SentinelCookie && s.Table == c.opts.SentinelTable {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func (cn *conn) flowStats(ctx context.Context, filter FlowStatsFilter) ([]FlowStat, error) {
	req := of13.NewFlowStatsRequest()
	req.TableId = of13.OFPTT_ALL
	if filter.Table != nil {
		req.TableId = *filter.Table
	}
	req.Cookie = filter.Cookie & filter.CookieMask
	req.CookieMask = filter.CookieMask
	var out []FlowStat
	err := cn.multipart(ctx, of13.MultipartType_Flow, req, func(body []byte) error {
		for len(body) > 0 {
			if len(body) < 48 {
				return errors.New("truncated entry")
			}
			l := int(binary.BigEndian.Uint16(body[0:2]))
			if l < 48 || l > len(body) {
				return fmt.Errorf("bad entry length %d", l)
			}
			out = append(out, FlowStat{
				Table:    body[2],
				Duration: time.Duration(binary.BigEndian.Uint32(body[4:8]))*time.Second + time.Duration(binary.BigEndian.Uint32(body[8:12])),
				Priority: binary.BigEndian.Uint16(body[12:14]),
				Cookie:   binary.BigEndian.Uint64(body[24:32]),
				Packets:  binary.BigEndian.Uint64(body[32:40]),
				Bytes:    binary.BigEndian.Uint64(body[40:48]),
			})
			body = body[l:]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("flow stats: %w", err)
	}
	return out, nil
}

// multipart sends a multipart request of type typ with body req (nil: an
// empty body) and hands the body of every reply part to each.
func (cn *conn) multipart(ctx context.Context, typ uint16, req util.Message, each func(body []byte) error) error {
	mp := &of13.MultipartRequest{Header: of13.NewOfp13Header(), Type: typ, Body: req}
	mp.Header.Type = of13.Type_MultiPartRequest
	xid := cn.client.nextXID()
	mp.Header.Xid = xid
	w := cn.register(xid, 16)
	defer cn.unregister(xid)
	if req == nil {
		// MultipartRequest cannot marshal a nil body: header, type, flags, pad.
		raw := make([]byte, 16)
		raw[0], raw[1] = of13.VERSION, of13.Type_MultiPartRequest
		binary.BigEndian.PutUint16(raw[2:4], 16)
		binary.BigEndian.PutUint32(raw[4:8], xid)
		binary.BigEndian.PutUint16(raw[8:10], typ)
		if err := cn.writeRaw(raw); err != nil {
			return err
		}
	} else if err := cn.write(mp); err != nil {
		return err
	}
	for {
		msg, err := cn.wait(ctx, w)
		if err != nil {
			return err
		}
		if msg[1] == of13.Type_Error {
			return decodeError(msg)
		}
		if msg[1] != of13.Type_MultiPartReply || len(msg) < 16 {
			return fmt.Errorf("unexpected reply type %d", msg[1])
		}
		more := binary.BigEndian.Uint16(msg[10:12])&1 != 0
		if err := each(msg[16:]); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// sentinelFlow marks that the switch holds this client's state.
func (c *Client) sentinelFlow() Flow {
	return Flow{Table: c.opts.SentinelTable, Priority: 0, Cookie: SentinelCookie}
}

// ensureSentinel reports whether the sentinel flow was missing (flows
// lost) and installs it.
func (c *Client) ensureSentinel(ctx context.Context, cn *conn) (bool, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	t := c.opts.SentinelTable
	stats, err := cn.flowStats(ctx, FlowStatsFilter{Table: &t, Cookie: SentinelCookie, CookieMask: ^uint64(0)})
	if err != nil {
		return false, err
	}
	if len(stats) > 0 {
		return false, nil
	}
	f := c.sentinelFlow()
	fm, err := f.flowMod(Add, c.nextXID())
	if err != nil {
		return false, err
	}
	return true, cn.single(ctx, FlowChange{Command: Add, Flow: f}, fm)
}

var _ util.Message = (*of13.FlowMod)(nil)
