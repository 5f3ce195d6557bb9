package openflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/contiv/libOpenflow/common"
	of13 "github.com/contiv/libOpenflow/openflow13"
	"github.com/contiv/libOpenflow/util"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("openflow client closed")

// ErrDisconnected is returned when the connection dropped before a reply
// arrived; the change may or may not have been applied (the reconnect hook
// is where the owner re-establishes its state).
var ErrDisconnected = errors.New("openflow connection lost")

// ConnectEvent describes a completed connection handshake.
type ConnectEvent struct {
	// Reconnect is false for the first connection of the Client.
	Reconnect bool
	// FlowsLost is true when the switch no longer has the client's sentinel
	// flow: the switch is new, ovs-vswitchd restarted, or someone deleted
	// the flows. The owner must then install its whole state again.
	FlowsLost bool
	// DatapathID is the switch's datapath ID from the features reply.
	DatapathID uint64
}

// Options configure a Client. Zero values select the defaults.
type Options struct {
	// OnConnect runs after every successful handshake (first connection and
	// reconnections), before calls waiting for the connection proceed...
	// except calls made by OnConnect itself, which may use the Client. An
	// error closes the connection and the client reconnects.
	OnConnect func(ctx context.Context, c *Client, ev ConnectEvent) error
	// EchoInterval between keep-alive echo requests (default 5s); a missing
	// echo reply after ReplyTimeout drops the connection.
	EchoInterval time.Duration
	// ReplyTimeout bounds every request without a context deadline (default 10s).
	ReplyTimeout time.Duration
	// MinBackoff and MaxBackoff bound the reconnection delay, which doubles
	// after each failed attempt (defaults 100ms and 5s).
	MinBackoff, MaxBackoff time.Duration
	// SentinelTable holds the client's sentinel flow (see ConnectEvent.FlowsLost);
	// default 253. The pipeline must not use this table.
	SentinelTable uint8
	// Logf receives connection state changes; nil discards them.
	Logf func(format string, args ...any)
	// OnPacketIn, when set, receives the packets flows send with a
	// Controller action (the client asks the switch for them on every
	// connection). It runs on one goroutine, one packet at a time;
	// packets arriving while PacketInQueue of them wait are dropped.
	OnPacketIn func(PacketIn)
	// PacketInQueue bounds the packet-ins waiting for OnPacketIn
	// (default 256).
	PacketInQueue int
}

// SentinelCookie is the cookie of the client's sentinel flow (priority 0,
// match all, drop, in Options.SentinelTable). A table nobody jumps to is
// never hit, so the flow only marks that this client's state is present.
const SentinelCookie uint64 = 0x7466_5345_4e54_494e // "tfSENTIN"

// Client is an OpenFlow 1.3 connection to one bridge that reconnects by
// itself. All methods are safe for concurrent use.
type Client struct {
	target string
	opts   Options

	xid atomic.Uint32

	mu        sync.Mutex
	conn      *conn         // nil while disconnected
	connected chan struct{} // closed while conn != nil
	closed    bool
	closeCh   chan struct{}
	done      chan struct{}
	connects  int

	packetIns chan PacketIn // nil without OnPacketIn

	// lastApplied is when the switch's confirmation of the last applied
	// change arrived (Unix nanoseconds, stamped by the read loop), see
	// LastApplied.
	lastApplied atomic.Int64
}

// LastApplied is when the switch's confirmation of the last change this
// client applied (Apply, ApplyChanges, AddFlows...) arrived: a bundle's
// commit reply, or for a single flow-mod the reply to the barrier after
// it. The connection's read loop stamps it as it reads the reply, so
// waiting for a core after that is not in it. The zero time before any
// change. A caller that serializes its changes reads its own change's
// time right after the call returned.
func (c *Client) LastApplied() time.Time {
	ns := c.lastApplied.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Dial connects to target — "unix:PATH" (a bridge's management socket,
// e.g. unix:/var/run/openvswitch/br-int.mgmt) or "tcp:HOST:PORT" — performs
// the handshake, runs Options.OnConnect, and keeps the connection up (echo
// keep-alive, reconnection with backoff) until Close.
func Dial(ctx context.Context, target string, opts Options) (*Client, error) {
	if _, _, err := splitTarget(target); err != nil {
		return nil, err
	}
	if opts.EchoInterval <= 0 {
		opts.EchoInterval = 5 * time.Second
	}
	if opts.ReplyTimeout <= 0 {
		opts.ReplyTimeout = 10 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = 5 * time.Second
		if opts.MaxBackoff < opts.MinBackoff {
			opts.MaxBackoff = opts.MinBackoff
		}
	}
	if opts.SentinelTable == 0 {
		opts.SentinelTable = 253
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &Client{
		target:    target,
		opts:      opts,
		connected: make(chan struct{}),
		closeCh:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	c.xid.Store(0x1000)
	if opts.OnPacketIn != nil {
		if opts.PacketInQueue <= 0 {
			opts.PacketInQueue = 256
		}
		c.opts.PacketInQueue = opts.PacketInQueue
		c.packetIns = make(chan PacketIn, opts.PacketInQueue)
		go func() {
			for {
				select {
				case pi := <-c.packetIns:
					opts.OnPacketIn(pi)
				case <-c.closeCh:
					return
				}
			}
		}()
	}
	first, err := c.connectOnce(ctx)
	if err != nil {
		return nil, err
	}
	go c.maintain(first)
	return c, nil
}

func splitTarget(target string) (network, addr string, err error) {
	kind, rest, ok := strings.Cut(target, ":")
	if !ok || rest == "" {
		return "", "", fmt.Errorf("openflow target %q: want unix:PATH or tcp:HOST:PORT", target)
	}
	switch kind {
	case "unix":
		return "unix", rest, nil
	case "tcp":
		return "tcp", rest, nil
	}
	return "", "", fmt.Errorf("openflow target %q: want unix:PATH or tcp:HOST:PORT", target)
}

// Close disconnects and stops reconnecting.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closeCh)
	cn := c.conn
	c.mu.Unlock()
	if cn != nil {
		cn.close(ErrClosed)
	}
	<-c.done
	return nil
}

// Connected reports whether the client currently has a connection.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil
}

// Connects is the number of successful handshakes so far.
func (c *Client) Connects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connects
}

func (c *Client) nextXID() uint32 { return c.xid.Add(1) }

// reserveXIDs hands out n consecutive transaction ids and returns the
// first (they may wrap around zero).
func (c *Client) reserveXIDs(n int) uint32 { return c.xid.Add(uint32(n)) - uint32(n) + 1 }

// connectOnce dials, handshakes, runs OnConnect and publishes the connection.
func (c *Client) connectOnce(ctx context.Context) (*conn, error) {
	network, addr, _ := splitTarget(c.target)
	d := net.Dialer{Timeout: c.opts.ReplyTimeout}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("openflow: connect %s: %w", c.target, err)
	}
	cn := newConn(nc, c)
	// The handshake reads with socket deadlines; a cancelled ctx (Close)
	// interrupts it by closing the socket.
	stopOnCancel := context.AfterFunc(ctx, func() { cn.close(ctx.Err()) })
	dpid, err := cn.handshake(ctx)
	stopOnCancel()
	if err != nil {
		cn.close(err)
		return nil, fmt.Errorf("openflow: handshake with %s: %w", c.target, err)
	}
	go cn.readLoop()
	go cn.keepAlive()
	if c.packetIns != nil {
		if err := cn.setAsync(); err != nil {
			cn.close(err)
			return nil, fmt.Errorf("openflow: asking %s for packet-ins: %w", c.target, err)
		}
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cn.close(ErrClosed)
		return nil, ErrClosed
	}
	reconnect := c.connects > 0
	c.connects++
	c.mu.Unlock()

	// OnConnect and the sentinel check use this connection directly, before
	// it is published, so other callers wait until the owner's state is back.
	ev := ConnectEvent{Reconnect: reconnect, DatapathID: dpid}
	if ev.FlowsLost, err = c.ensureSentinel(ctx, cn); err != nil {
		cn.close(err)
		return nil, fmt.Errorf("openflow: sentinel flow on %s: %w", c.target, err)
	}
	if c.opts.OnConnect != nil {
		hookCtx := context.WithValue(ctx, connKey{}, cn)
		if err := c.opts.OnConnect(hookCtx, c, ev); err != nil {
			cn.close(err)
			return nil, fmt.Errorf("openflow: OnConnect: %w", err)
		}
	}
	c.mu.Lock()
	c.conn = cn
	close(c.connected)
	c.mu.Unlock()
	c.opts.Logf("openflow: connected to %s (dpid %016x, reconnect=%v, flowsLost=%v)", c.target, dpid, ev.Reconnect, ev.FlowsLost)
	return cn, nil
}

type connKey struct{}

// maintain waits for the connection to drop and reconnects with backoff.
func (c *Client) maintain(cn *conn) {
	defer close(c.done)
	for {
		select {
		case <-cn.dead:
		case <-c.closeCh:
			return
		}
		c.mu.Lock()
		if c.conn == cn {
			c.conn = nil
			c.connected = make(chan struct{})
		}
		c.mu.Unlock()
		c.opts.Logf("openflow: connection to %s lost: %v", c.target, cn.err())
		backoff := c.opts.MinBackoff
		for {
			select {
			case <-c.closeCh:
				return
			case <-time.After(backoff):
			}
			// Close cancels a reconnection in progress.
			ctx, cancel := context.WithTimeout(context.Background(), 4*c.opts.ReplyTimeout)
			go func() {
				select {
				case <-c.closeCh:
					cancel()
				case <-ctx.Done():
				}
			}()
			next, err := c.connectOnce(ctx)
			cancel()
			if err == nil {
				cn = next
				break
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			c.opts.Logf("openflow: reconnect to %s: %v", c.target, err)
			backoff *= 2
			if backoff > c.opts.MaxBackoff {
				backoff = c.opts.MaxBackoff
			}
		}
	}
}

// current returns the connection to use: the one OnConnect runs on, or the
// published one, waiting for a reconnection until ctx ends.
func (c *Client) current(ctx context.Context) (*conn, error) {
	if cn, ok := ctx.Value(connKey{}).(*conn); ok {
		return cn, nil
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		cn, wait := c.conn, c.connected
		c.mu.Unlock()
		if cn != nil {
			return cn, nil
		}
		select {
		case <-wait:
		case <-c.closeCh:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("openflow: waiting for connection to %s: %w", c.target, ctx.Err())
		}
	}
}

// withTimeout applies ReplyTimeout when ctx has no deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.ReplyTimeout)
}

// conn is one OpenFlow connection. A single goroutine reads it and hands
// each message to the request that waits for its xid, so replies are
// matched regardless of order.
type conn struct {
	nc     net.Conn
	client *Client

	wmu sync.Mutex

	mu      sync.Mutex
	waiters map[uint32]*waiter
	// ranges collect the messages of xid ranges (a bundle's adds, which
	// the switch answers only with errors).
	ranges []*xidRange
	dead   chan struct{}
	cause  error
	echoed chan struct{}
}

type waiter struct {
	ch   chan []byte
	done chan struct{}
	// arrived is when the read loop read the last message handed to ch
	// (Unix nanoseconds).
	arrived atomic.Int64
}

func newConn(nc net.Conn, c *Client) *conn {
	return &conn{nc: nc, client: c, waiters: map[uint32]*waiter{}, dead: make(chan struct{}), echoed: make(chan struct{}, 1)}
}

func (cn *conn) close(cause error) {
	cn.mu.Lock()
	select {
	case <-cn.dead:
		cn.mu.Unlock()
		return
	default:
	}
	cn.cause = cause
	close(cn.dead)
	cn.mu.Unlock()
	_ = cn.nc.Close()
}

func (cn *conn) err() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.cause
}

func (cn *conn) write(msg util.Message) error {
	data, err := msg.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode %T: %w", msg, err)
	}
	return cn.writeRaw(data)
}

func (cn *conn) writeRaw(data []byte) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	select {
	case <-cn.dead:
		return fmt.Errorf("%w: %v", ErrDisconnected, cn.err())
	default:
	}
	_ = cn.nc.SetWriteDeadline(time.Now().Add(cn.client.opts.ReplyTimeout))
	if _, err := cn.nc.Write(data); err != nil {
		cn.close(err)
		return fmt.Errorf("%w: %v", ErrDisconnected, err)
	}
	return nil
}

// ReadMessage reads one OpenFlow message, framed by its header's length
// (for tests that stand between a client and a switch, too).
func ReadMessage(r io.Reader) ([]byte, error) {
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[2:4]))
	if n < 8 {
		return nil, fmt.Errorf("bad OpenFlow message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr)
	if _, err := io.ReadFull(r, msg[8:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// handshake exchanges Hello messages (OpenFlow 1.3 only) and reads the
// datapath ID; it runs before the read loop starts.
func (cn *conn) handshake(ctx context.Context) (uint64, error) {
	deadline := time.Now().Add(cn.client.opts.ReplyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = cn.nc.SetDeadline(deadline)
	defer cn.nc.SetDeadline(time.Time{})
	hello, err := common.NewHello(of13.VERSION)
	if err != nil {
		return 0, err
	}
	// Advertise OpenFlow 1.3 only: the encodings here are 1.3 encodings.
	hello.Elements = []common.HelloElem{&common.HelloElemVersionBitmap{
		HelloElemHeader: common.HelloElemHeader{Type: common.HelloElemType_VersionBitmap, Length: 8},
		Bitmaps:         []uint32{1 << of13.VERSION},
	}}
	hello.Header.Xid = cn.client.nextXID()
	if err := cn.write(hello); err != nil {
		return 0, err
	}
	msg, err := ReadMessage(cn.nc)
	if err != nil {
		return 0, err
	}
	if msg[1] != of13.Type_Hello {
		return 0, fmt.Errorf("expected Hello, got message type %d", msg[1])
	}
	if !helloAccepts13(msg) {
		return 0, fmt.Errorf("switch does not speak OpenFlow 1.3 (hello version %d); set the bridge's protocols to include OpenFlow13", msg[0])
	}
	req := of13.NewFeaturesRequest()
	req.Xid = cn.client.nextXID()
	if err := cn.write(req); err != nil {
		return 0, err
	}
	for {
		msg, err := ReadMessage(cn.nc)
		if err != nil {
			return 0, err
		}
		switch msg[1] {
		case of13.Type_FeaturesReply:
			if len(msg) < 16 {
				return 0, errors.New("short features reply")
			}
			return binary.BigEndian.Uint64(msg[8:16]), nil
		case of13.Type_Error:
			return 0, decodeError(msg)
		case of13.Type_EchoRequest:
			if err := cn.writeRaw(echoReply(msg)); err != nil {
				return 0, err
			}
		}
	}
}

// helloAccepts13 checks a peer Hello: its version bitmap, or its header
// version when it has none.
func helloAccepts13(msg []byte) bool {
	body := msg[8:]
	for len(body) >= 4 {
		typ := binary.BigEndian.Uint16(body[0:2])
		l := int(binary.BigEndian.Uint16(body[2:4]))
		if l < 4 || l > len(body) {
			break
		}
		if typ == common.HelloElemType_VersionBitmap && l >= 8 {
			return binary.BigEndian.Uint32(body[4:8])&(1<<of13.VERSION) != 0
		}
		padded := (l + 7) / 8 * 8
		if padded >= len(body) {
			break
		}
		body = body[padded:]
	}
	return msg[0] >= of13.VERSION
}

func echoReply(req []byte) []byte {
	rep := append([]byte(nil), req...)
	rep[0] = of13.VERSION
	rep[1] = of13.Type_EchoReply
	return rep
}

func (cn *conn) readLoop() {
	for {
		msg, err := ReadMessage(cn.nc)
		if err != nil {
			cn.close(err)
			cn.failWaiters()
			return
		}
		switch msg[1] {
		case of13.Type_EchoRequest:
			_ = cn.writeRaw(echoReply(msg))
			continue
		case of13.Type_EchoReply:
			select {
			case cn.echoed <- struct{}{}:
			default:
			}
			continue
		case of13.Type_PacketIn:
			cn.packetIn(msg)
			continue
		case of13.Type_PortStatus, of13.Type_FlowRemoved:
			continue // asynchronous messages tierflow does not use
		}
		xid := binary.BigEndian.Uint32(msg[4:8])
		cn.mu.Lock()
		w := cn.waiters[xid]
		if w == nil {
			for _, r := range cn.ranges {
				if r.add(xid, msg) {
					break
				}
			}
		}
		cn.mu.Unlock()
		if w == nil {
			continue
		}
		w.arrived.Store(time.Now().UnixNano())
		select {
		case w.ch <- msg:
		case <-w.done:
		case <-cn.dead:
			return
		}
	}
}

// packetIn hands a packet-in to OnPacketIn's queue, or drops it when the
// queue is full (the read loop must not wait).
func (cn *conn) packetIn(msg []byte) {
	if cn.client.packetIns == nil {
		return
	}
	pi, err := parsePacketIn(msg)
	if err != nil {
		cn.client.opts.Logf("openflow: %v", err)
		return
	}
	select {
	case cn.client.packetIns <- pi:
	default:
	}
}

func (cn *conn) failWaiters() {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, w := range cn.waiters {
		select {
		case <-w.done:
		default:
			close(w.done)
		}
	}
}

// keepAlive sends echo requests and drops the connection when the switch
// stops answering.
func (cn *conn) keepAlive() {
	opts := cn.client.opts
	t := time.NewTicker(opts.EchoInterval)
	defer t.Stop()
	for {
		select {
		case <-cn.dead:
			return
		case <-t.C:
		}
		h := of13.NewEchoRequest()
		h.Xid = cn.client.nextXID()
		if err := cn.write(h); err != nil {
			return
		}
		select {
		case <-cn.echoed:
		case <-cn.dead:
			return
		case <-time.After(opts.ReplyTimeout):
			cn.close(fmt.Errorf("no echo reply within %v", opts.ReplyTimeout))
			return
		}
	}
}

// register returns a waiter for replies and errors with xid.
func (cn *conn) register(xid uint32, buf int) *waiter {
	w := &waiter{ch: make(chan []byte, buf), done: make(chan struct{})}
	cn.mu.Lock()
	cn.waiters[xid] = w
	select {
	case <-cn.dead:
		close(w.done)
	default:
	}
	cn.mu.Unlock()
	return w
}

// xidRange collects the messages whose xids fall in [first, first+n).
// The read loop adds to it under the conn's lock, never blocking.
type xidRange struct {
	first uint32
	n     uint32
	msgs  map[uint32][][]byte // guarded by the conn's mu
}

// add keeps msg if xid is in the range (unsigned arithmetic: the range
// may wrap around zero).
func (r *xidRange) add(xid uint32, msg []byte) bool {
	if xid-r.first >= r.n {
		return false
	}
	r.msgs[xid] = append(r.msgs[xid], msg)
	return true
}

// registerRange starts collecting the messages of n xids from first.
func (cn *conn) registerRange(first uint32, n int) *xidRange {
	r := &xidRange{first: first, n: uint32(n), msgs: map[uint32][][]byte{}}
	cn.mu.Lock()
	cn.ranges = append(cn.ranges, r)
	cn.mu.Unlock()
	return r
}

func (cn *conn) unregisterRange(r *xidRange) {
	cn.mu.Lock()
	cn.ranges = slices.DeleteFunc(cn.ranges, func(x *xidRange) bool { return x == r })
	cn.mu.Unlock()
}

// takeRange removes and returns the messages r collected so far, keyed
// by their index in the range.
func (cn *conn) takeRange(r *xidRange) map[int][][]byte {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	out := make(map[int][][]byte, len(r.msgs))
	for xid, ms := range r.msgs {
		out[int(xid-r.first)] = ms
	}
	clear(r.msgs)
	return out
}

func (cn *conn) unregister(xid uint32) {
	cn.mu.Lock()
	if w, ok := cn.waiters[xid]; ok {
		delete(cn.waiters, xid)
		select {
		case <-w.done:
		default:
			close(w.done)
		}
	}
	cn.mu.Unlock()
}

// wait returns the next message for w, or an error when ctx ends or the
// connection drops.
func (cn *conn) wait(ctx context.Context, w *waiter) ([]byte, error) {
	select {
	case msg := <-w.ch:
		return msg, nil
	default:
	}
	select {
	case msg := <-w.ch:
		return msg, nil
	case <-w.done:
		select {
		case msg := <-w.ch:
			return msg, nil
		default:
		}
		return nil, fmt.Errorf("%w: %v", ErrDisconnected, cn.err())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pending returns a message already delivered to w, if any.
func pending(w *waiter) []byte {
	select {
	case msg := <-w.ch:
		return msg
	default:
		return nil
	}
}

// barrier sends a barrier request and waits for its reply: every message
// sent before it has then been processed and its error, if any, delivered.
func (cn *conn) barrier(ctx context.Context) error {
	_, err := cn.barrierAt(ctx)
	return err
}

// barrierAt is barrier, also returning when its reply arrived (Unix
// nanoseconds).
func (cn *conn) barrierAt(ctx context.Context) (int64, error) {
	xid := cn.client.nextXID()
	w := cn.register(xid, 1)
	defer cn.unregister(xid)
	h := of13.NewOfp13Header()
	h.Type = of13.Type_BarrierRequest
	h.Xid = xid
	if err := cn.write(&h); err != nil {
		return 0, err
	}
	msg, err := cn.wait(ctx, w)
	if err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	if msg[1] == of13.Type_Error {
		return 0, decodeError(msg)
	}
	return w.arrived.Load(), nil
}

// Barrier waits until the switch has processed every message sent before.
func (c *Client) Barrier(ctx context.Context) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.current(ctx)
	if err != nil {
		return err
	}
	return cn.barrier(ctx)
}
