package openflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	of13 "github.com/contiv/libOpenflow/openflow13"

	"github.com/tierflow/tierflow/pkg/netstamp"
)

// A Monitor watches the flows of a bridge as the switch changes them: a
// flow monitor (ONF extension 1870 for OpenFlow 1.3, ONFST_FLOW_MONITOR,
// as Open vSwitch implements it) on an OpenFlow 1.3 connection of its
// own. The switch sends an update when a change is committed (a bundle's
// flows all at once, after its commit), so the time an update is read is
// when the flows took effect, to within the time the message takes to
// arrive. Observers (benchmarks timing how fast a change reaches the
// switch, tools watching a bridge) use it; it never changes flows.
//
// On a TCP target ("tcp:HOST:PORT", e.g. a bridge's loopback listener)
// each update also carries the kernel's receive timestamp of its message
// (Arrived): when the switch sent it, independent of how soon this
// process read it. Unix sockets give no such timestamp.
type Monitor struct {
	nc      net.Conn
	cn      *conn
	read    func() (msg []byte, arrived time.Time, err error)
	updates chan []FlowUpdate
	done    chan struct{}

	mu  sync.Mutex
	err error
}

// FlowEvent says what happened to a flow.
type FlowEvent uint16

// Flow monitor events (NXFME_*, which the ONF extension uses too).
const (
	FlowAdded    FlowEvent = 0
	FlowDeleted  FlowEvent = 1
	FlowModified FlowEvent = 2
)

func (e FlowEvent) String() string {
	switch e {
	case FlowAdded:
		return "added"
	case FlowDeleted:
		return "deleted"
	case FlowModified:
		return "modified"
	}
	return fmt.Sprintf("event(%d)", uint16(e))
}

// FlowUpdate is one flow the switch added, deleted or modified (the
// initial flows come as FlowAdded with Initial set).
type FlowUpdate struct {
	Event    FlowEvent
	Initial  bool
	Table    uint8
	Priority uint16
	Cookie   uint64
	// Match is the flow's match as the switch encodes it (NXM/OXM
	// entries).
	Match []MatchEntry
	// Received is when the message carrying the update was read.
	Received time.Time
	// Arrived is the kernel's receive timestamp of the message's last
	// bytes (SO_TIMESTAMPNS; on loopback, when the switch's send handed
	// them to the kernel) on a TCP target; zero on a unix socket, or
	// when the kernel gave none (pkg/netstamp).
	// Received minus Arrived is how long the message waited to be read.
	Arrived time.Time
}

// MatchEntry is one NXM/OXM match entry: class, field, value and mask
// (nil when exact).
type MatchEntry struct {
	Class uint16
	Field uint8
	Value []byte
	Mask  []byte
}

// Key identifies a flow the way strict commands do: table, priority and
// match.
func (u FlowUpdate) Key() string {
	b := make([]byte, 0, 64)
	b = append(b, u.Table, byte(u.Priority>>8), byte(u.Priority))
	for _, m := range u.Match {
		b = append(b, byte(m.Class>>8), byte(m.Class), m.Field, byte(len(m.Value)))
		b = append(b, m.Value...)
		b = append(b, m.Mask...)
	}
	return string(b)
}

// entry returns the value and mask of the first entry for one of the
// (class, field) pairs.
func (u FlowUpdate) entry(fields ...[2]uint16) (value, mask []byte, ok bool) {
	for _, m := range u.Match {
		for _, f := range fields {
			if m.Class == f[0] && uint16(m.Field) == f[1] {
				return m.Value, m.Mask, true
			}
		}
	}
	return nil, nil, false
}

// NXM_OF_* (class 0) and OXM basic (class 0x8000) fields read below.
var (
	fieldIPProto = [][2]uint16{{0x0000, 6}, {0x8000, 10}}
	fieldIPv4Src = [][2]uint16{{0x0000, 7}, {0x8000, 11}}
	fieldTCPDst  = [][2]uint16{{0x0000, 10}, {0x8000, 14}}
)

// TCPDst is the flow's TCP destination port match (ip_proto 6 and
// tcp_dst), with its mask (0xffff when exact).
func (u FlowUpdate) TCPDst() (port, mask uint16, ok bool) {
	proto, _, ok := u.entry(fieldIPProto...)
	if !ok || len(proto) != 1 || proto[0] != protoTCP {
		return 0, 0, false
	}
	v, m, ok := u.entry(fieldTCPDst...)
	if !ok || len(v) != 2 {
		return 0, 0, false
	}
	mask = 0xffff
	if len(m) == 2 {
		mask = binary.BigEndian.Uint16(m)
	}
	return binary.BigEndian.Uint16(v), mask, true
}

// IPv4Src is the flow's IPv4 source match as a prefix (a mask that is no
// prefix is not reported).
func (u FlowUpdate) IPv4Src() (netip.Prefix, bool) {
	v, m, ok := u.entry(fieldIPv4Src...)
	if !ok || len(v) != 4 {
		return netip.Prefix{}, false
	}
	bits := 32
	if len(m) == 4 {
		ones, size := net.IPMask(m).Size()
		if size != 32 {
			return netip.Prefix{}, false
		}
		bits = ones
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte(v)), bits), true
}

// Flow monitor protocol constants: ONF extension 1870 (OpenFlow 1.3) as
// Open vSwitch implements it (its openflow-1.3.h), with the Nicira flow
// monitor's events (NXFME_*) and flags.
const (
	onfExperimenterID     = 0x4f4e4600
	onfFlowMonitor        = 1870 // multipart request and reply
	onfFlowMonitorPaused  = 1871 // experimenter message
	nxVendorID            = 0x00002320
	nxtFlowMonitorPaused  = 22
	fmInitial             = 1 << 0
	fmAdd                 = 1 << 1
	fmDelete              = 1 << 2
	fmModify              = 1 << 3
	ofppAny               = 0xffffffff
	multipartExperimenter = 0xffff
)

// DialMonitor connects to target (as Dial), asks for every flow of the
// given tables (none: all tables) and their changes from then on, and
// returns once the switch has sent the flows it holds now (Updates
// delivers them first, Initial set).
func DialMonitor(ctx context.Context, target string, tables ...uint8) (*Monitor, error) {
	network, addr, err := splitTarget(target)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("openflow monitor: connect %s: %w", target, err)
	}
	// The connection machinery of a Client (handshake, framed writes)
	// without its reconnection.
	c := &Client{target: target, opts: Options{ReplyTimeout: 10 * time.Second}}
	c.xid.Store(0x1000)
	m := &Monitor{nc: nc, cn: newConn(nc, c), updates: make(chan []FlowUpdate, 1024), done: make(chan struct{})}
	m.read = func() ([]byte, time.Time, error) {
		msg, err := ReadMessage(nc)
		return msg, time.Time{}, err
	}
	if network == "tcp" {
		// Before the handshake, so that the kernel stamps all that
		// comes after it.
		sr, err := netstamp.NewReader(nc)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("openflow monitor: %s: %w", target, err)
		}
		// One message at a time, exactly its bytes: the stamp of the
		// last read is when the message's end arrived.
		m.read = func() ([]byte, time.Time, error) {
			msg, err := ReadMessage(sr)
			return msg, sr.Last(), err
		}
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if _, err := m.cn.handshake(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("openflow monitor: handshake with %s: %w", target, err)
	}
	if len(tables) == 0 {
		tables = []uint8{of13.OFPTT_ALL}
	}
	xid := c.nextXID()
	if err := m.cn.writeRaw(monitorRequest(xid, tables)); err != nil {
		nc.Close()
		return nil, err
	}
	// The initial flows: multipart replies with the request's xid, the
	// last without the "more" flag.
	var initial []FlowUpdate
	for {
		msg, arrived, err := m.read()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("openflow monitor: reading the initial flows: %w", err)
		}
		now := time.Now()
		switch {
		case msg[1] == of13.Type_EchoRequest:
			_ = m.cn.writeRaw(echoReply(msg))
			continue
		case msg[1] == of13.Type_Error:
			nc.Close()
			return nil, fmt.Errorf("openflow monitor: %w", decodeError(msg))
		}
		ups, more, ok, err := decodeMonitorReply(msg, now, arrived)
		if err != nil {
			nc.Close()
			return nil, err
		}
		if !ok || binary.BigEndian.Uint32(msg[4:8]) != xid {
			continue
		}
		for i := range ups {
			ups[i].Initial = true
		}
		initial = append(initial, ups...)
		if !more {
			break
		}
	}
	m.updates <- initial
	go m.readLoop()
	return m, nil
}

// monitorRequest is an ONF flow monitor request (one monitor per table:
// every flow, its adds, deletes and modifies, no actions) in an OpenFlow
// 1.3 experimenter multipart request.
func monitorRequest(xid uint32, tables []uint8) []byte {
	const hdr = 8 + 8 + 8 // header, multipart type/flags/pad, experimenter/type
	// onf_flow_monitor_request (16 bytes) and an empty ofp_match (type
	// OXM, length 4, padded to 8).
	const req = 16 + 8
	msg := make([]byte, hdr+req*len(tables))
	msg[0], msg[1] = of13.VERSION, of13.Type_MultiPartRequest
	binary.BigEndian.PutUint16(msg[2:4], uint16(len(msg)))
	binary.BigEndian.PutUint32(msg[4:8], xid)
	binary.BigEndian.PutUint16(msg[8:10], multipartExperimenter)
	binary.BigEndian.PutUint32(msg[16:20], onfExperimenterID)
	binary.BigEndian.PutUint32(msg[20:24], onfFlowMonitor)
	for i, t := range tables {
		r := msg[hdr+i*req:]
		binary.BigEndian.PutUint32(r[0:4], uint32(i+1)) // monitor id
		binary.BigEndian.PutUint16(r[4:6], fmInitial|fmAdd|fmDelete|fmModify)
		binary.BigEndian.PutUint16(r[6:8], 4) // match length
		binary.BigEndian.PutUint32(r[8:12], ofppAny)
		r[12] = t
		binary.BigEndian.PutUint16(r[16:18], 1) // OFPMT_OXM
		binary.BigEndian.PutUint16(r[18:20], 4)
	}
	return msg
}

// decodeMonitorReply decodes an ONF flow monitor reply; ok is false for
// any other message.
func decodeMonitorReply(msg []byte, received, arrived time.Time) (ups []FlowUpdate, more, ok bool, err error) {
	if msg[1] != of13.Type_MultiPartReply || len(msg) < 24 ||
		binary.BigEndian.Uint16(msg[8:10]) != multipartExperimenter ||
		binary.BigEndian.Uint32(msg[16:20]) != onfExperimenterID || binary.BigEndian.Uint32(msg[20:24]) != onfFlowMonitor {
		return nil, false, false, nil
	}
	more = binary.BigEndian.Uint16(msg[10:12])&1 != 0
	body := msg[24:]
	for len(body) > 0 {
		if len(body) < 4 {
			return nil, false, true, errors.New("openflow monitor: truncated update")
		}
		n := int(binary.BigEndian.Uint16(body[0:2]))
		if n < 4 || n > len(body) {
			return nil, false, true, fmt.Errorf("openflow monitor: bad update length %d", n)
		}
		ev := FlowEvent(binary.BigEndian.Uint16(body[2:4]))
		if ev <= FlowModified {
			u, err := decodeFullUpdate(body[:n], ev, received, arrived)
			if err != nil {
				return nil, false, true, err
			}
			ups = append(ups, u)
		}
		// An abbreviated update concerns the monitor's own changes: there
		// are none.
		body = body[n:]
	}
	return ups, more, true, nil
}

// decodeFullUpdate decodes a full flow update: length, event, reason,
// priority, idle and hard timeouts, match length, table, pad, cookie,
// then an OpenFlow 1.3 match (ofp_match with OXM fields).
func decodeFullUpdate(b []byte, ev FlowEvent, received, arrived time.Time) (FlowUpdate, error) {
	if len(b) < 24+4 {
		return FlowUpdate{}, errors.New("openflow monitor: short flow update")
	}
	u := FlowUpdate{Event: ev, Priority: binary.BigEndian.Uint16(b[6:8]), Table: b[14],
		Cookie: binary.BigEndian.Uint64(b[16:24]), Received: received, Arrived: arrived}
	m := b[24:]
	if typ := binary.BigEndian.Uint16(m[0:2]); typ != 1 {
		return FlowUpdate{}, fmt.Errorf("openflow monitor: match type %d, want OXM", typ)
	}
	l := int(binary.BigEndian.Uint16(m[2:4]))
	if l < 4 || l > len(m) {
		return FlowUpdate{}, fmt.Errorf("openflow monitor: match of %d bytes in an update of %d", l, len(b))
	}
	match := m[4:l]
	for len(match) > 0 {
		if len(match) < 4 {
			return FlowUpdate{}, errors.New("openflow monitor: truncated match entry")
		}
		hdr := binary.BigEndian.Uint32(match[0:4])
		e := MatchEntry{Class: uint16(hdr >> 16), Field: uint8(hdr>>9) & 0x7f}
		hasMask := hdr&(1<<8) != 0
		n := int(hdr & 0xff)
		if 4+n > len(match) {
			return FlowUpdate{}, errors.New("openflow monitor: truncated match entry")
		}
		payload := match[4 : 4+n]
		if e.Class == 0xffff && n >= 4 { // experimenter entry: its ID first
			payload = payload[4:]
		}
		if hasMask {
			half := len(payload) / 2
			e.Value, e.Mask = payload[:half], payload[half:]
		} else {
			e.Value = payload
		}
		u.Match = append(u.Match, e)
		match = match[4+n:]
	}
	return u, nil
}

// Updates delivers the flow updates, one slice per message from the
// switch (a bundle's changes usually arrive in one), the initial flows
// first. It is closed when the monitor stops (Close, or the connection
// dropped: see Err).
func (m *Monitor) Updates() <-chan []FlowUpdate { return m.updates }

// Err says why the monitor stopped (nil while it runs and after Close).
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Close stops the monitor.
func (m *Monitor) Close() error {
	select {
	case <-m.done:
	default:
		close(m.done)
	}
	return m.nc.Close()
}

func (m *Monitor) readLoop() {
	defer close(m.updates)
	fail := func(err error) {
		select {
		case <-m.done: // closed: not an error
		default:
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
		}
	}
	for {
		msg, arrived, err := m.read()
		if err != nil {
			fail(err)
			return
		}
		now := time.Now()
		switch msg[1] {
		case of13.Type_EchoRequest:
			_ = m.cn.writeRaw(echoReply(msg))
			continue
		case of13.Type_Experimenter:
			// The switch paused the monitor (ONF or Nicira message): it
			// dropped updates because this reader fell behind, so the
			// picture is no longer exact.
			if len(msg) >= 16 {
				exp, typ := binary.BigEndian.Uint32(msg[8:12]), binary.BigEndian.Uint32(msg[12:16])
				if exp == onfExperimenterID && typ == onfFlowMonitorPaused || exp == nxVendorID && typ == nxtFlowMonitorPaused {
					fail(errors.New("openflow monitor: the switch paused the monitor (updates lost)"))
					return
				}
			}
			continue
		}
		ups, _, ok, err := decodeMonitorReply(msg, now, arrived)
		if err != nil {
			fail(err)
			return
		}
		if !ok || len(ups) == 0 {
			continue
		}
		select {
		case m.updates <- ups:
		case <-m.done:
			return
		}
	}
}
