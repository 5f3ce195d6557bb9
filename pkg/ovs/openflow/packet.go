package openflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// PacketIn is a packet the switch sent to the client (a Controller
// action), with the flow that sent it.
type PacketIn struct {
	// InPort is the port the packet entered the bridge on.
	InPort uint32
	// Table and Cookie name the flow whose Controller action sent it.
	Table  uint8
	Cookie uint64
	// Data is the packet from its Ethernet header, truncated to the
	// action's MaxLen; TotalLen is its full length.
	Data     []byte
	TotalLen uint16
}

// ofptSetAsync is OpenFlow 1.3's OFPT_SET_ASYNC.
const ofptSetAsync = 28

// setAsync asks for packet-ins sent by flow actions (OFPR_ACTION) on this
// connection: a connection to the bridge's management socket receives
// none by default.
func (cn *conn) setAsync() error {
	msg := make([]byte, 32)
	msg[0], msg[1] = of13.VERSION, ofptSetAsync
	binary.BigEndian.PutUint16(msg[2:4], 32)
	binary.BigEndian.PutUint32(msg[4:8], cn.client.nextXID())
	// packet_in_mask[master/equal], packet_in_mask[slave]: OFPR_ACTION.
	binary.BigEndian.PutUint32(msg[8:12], 1<<of13.R_ACTION)
	return cn.writeRaw(msg)
}

// parsePacketIn decodes an OpenFlow 1.3 packet-in.
func parsePacketIn(msg []byte) (PacketIn, error) {
	// header(8) buffer_id(4) total_len(2) reason(1) table_id(1) cookie(8)
	// match(type 2, length 2, OXM fields, padded to 8) pad(2) data.
	if len(msg) < 32 {
		return PacketIn{}, errors.New("short packet-in")
	}
	pi := PacketIn{TotalLen: binary.BigEndian.Uint16(msg[12:14]), Table: msg[15], Cookie: binary.BigEndian.Uint64(msg[16:24])}
	mlen := int(binary.BigEndian.Uint16(msg[26:28]))
	if mlen < 4 || 24+mlen > len(msg) {
		return PacketIn{}, fmt.Errorf("packet-in: bad match length %d", mlen)
	}
	oxm := msg[28 : 24+mlen]
	for len(oxm) >= 4 {
		class := binary.BigEndian.Uint16(oxm[0:2])
		fieldID := oxm[2] >> 1
		l := int(oxm[3])
		if 4+l > len(oxm) {
			break
		}
		if class == of13.OXM_CLASS_OPENFLOW_BASIC && fieldID == of13.OXM_FIELD_IN_PORT && l == 4 {
			pi.InPort = binary.BigEndian.Uint32(oxm[4:8])
		}
		oxm = oxm[4+l:]
	}
	start := 24 + (mlen+7)/8*8 + 2
	if start > len(msg) {
		return PacketIn{}, errors.New("packet-in: truncated")
	}
	pi.Data = append([]byte(nil), msg[start:]...)
	return pi, nil
}

// PacketOut sends data (an Ethernet frame) out of port, as if from the
// controller.
func (c *Client) PacketOut(ctx context.Context, port uint32, data []byte) error {
	if port == 0 || (port > 0xffffff00 && port != PortInPort && port != PortLocal) {
		return fmt.Errorf("packet-out: invalid port %d", port)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.current(ctx)
	if err != nil {
		return err
	}
	// header(8) buffer_id(4) in_port(4) actions_len(2) pad(6) output(16) data
	msg := make([]byte, 40, 40+len(data))
	msg[0], msg[1] = of13.VERSION, of13.Type_PacketOut
	binary.BigEndian.PutUint16(msg[2:4], uint16(40+len(data)))
	xid := c.nextXID()
	binary.BigEndian.PutUint32(msg[4:8], xid)
	binary.BigEndian.PutUint32(msg[8:12], 0xffffffff)
	binary.BigEndian.PutUint32(msg[12:16], PortController)
	binary.BigEndian.PutUint16(msg[16:18], 16)
	// ofp_action_output: type 0, len 16, port, max_len, pad.
	binary.BigEndian.PutUint16(msg[26:28], 16)
	binary.BigEndian.PutUint32(msg[28:32], port)
	msg = append(msg, data...)
	if len(msg) > 0xffff {
		return errors.New("packet-out: packet too large")
	}
	return cn.sendChecked(ctx, xid, msg)
}

// sendChecked writes a request that has no reply of its own and returns
// the error the switch answers it with, if any (a barrier marks the end).
func (cn *conn) sendChecked(ctx context.Context, xid uint32, msg []byte) error {
	w := cn.register(xid, 4)
	defer cn.unregister(xid)
	if err := cn.writeRaw(msg); err != nil {
		return err
	}
	if err := cn.barrier(ctx); err != nil {
		return err
	}
	if rep := pending(w); rep != nil && rep[1] == of13.Type_Error {
		return decodeError(rep)
	}
	return nil
}

// ConntrackTuple is one direction of a connection, partly given: zero
// values match anything.
type ConntrackTuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// ConntrackFlush selects conntrack entries of one zone to delete: those
// with protocol IPProto (0: any) whose original and reply tuples match
// Orig and Reply.
type ConntrackFlush struct {
	Zone    uint16
	IPProto uint8
	Orig    ConntrackTuple
	Reply   ConntrackTuple
}

// String names what f selects, e.g. "zone 7 proto 6 orig dst
// 10.96.0.10:80 reply src 10.244.1.5:8080" (unset fields left out).
func (f ConntrackFlush) String() string {
	s := fmt.Sprintf("zone %d", f.Zone)
	if f.IPProto != 0 {
		s += fmt.Sprintf(" proto %d", f.IPProto)
	}
	for _, t := range []struct {
		name string
		t    ConntrackTuple
	}{{"orig", f.Orig}, {"reply", f.Reply}} {
		for _, e := range []struct {
			name string
			ip   netip.Addr
			port uint16
		}{{"src", t.t.Src, t.t.SrcPort}, {"dst", t.t.Dst, t.t.DstPort}} {
			switch {
			case e.ip.IsValid():
				s += fmt.Sprintf(" %s %s %s", t.name, e.name, netip.AddrPortFrom(e.ip, e.port))
			case e.port != 0:
				s += fmt.Sprintf(" %s %s port %d", t.name, e.name, e.port)
			}
		}
	}
	return s
}

// ErrInvalidFlush is a ConntrackFlush that cannot be encoded (nothing was
// sent): sending it again would fail the same way.
var ErrInvalidFlush = errors.New("invalid conntrack flush")

// nxtCtFlush is the Nicira NXT_CT_FLUSH message subtype (OVS 3.1).
const nxtCtFlush = 32

// FlushConntrack deletes the conntrack entries each flush selects
// (OpenFlow NXT_CT_FLUSH, OVS 3.1 and later), e.g. every connection a
// removed Service endpoint answers: Reply{Src: endpoint, SrcPort: its
// port}. The messages go out together, followed by one barrier.
func (c *Client) FlushConntrack(ctx context.Context, flushes ...ConntrackFlush) error {
	if len(flushes) == 0 {
		return nil
	}
	msgs := make([][]byte, len(flushes))
	xids := make([]uint32, len(flushes))
	for i, f := range flushes {
		body, err := f.encode()
		if err != nil {
			return err
		}
		xids[i] = c.nextXID()
		msg := make([]byte, 16, 16+len(body))
		msg[0], msg[1] = of13.VERSION, of13.Type_Experimenter
		binary.BigEndian.PutUint16(msg[2:4], uint16(16+len(body)))
		binary.BigEndian.PutUint32(msg[4:8], xids[i])
		binary.BigEndian.PutUint32(msg[8:12], of13.NxExperimenterID)
		binary.BigEndian.PutUint32(msg[12:16], nxtCtFlush)
		msgs[i] = append(msg, body...)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.current(ctx)
	if err != nil {
		return err
	}
	waiters := make([]*waiter, len(msgs))
	for i, x := range xids {
		waiters[i] = cn.register(x, 2)
		defer cn.unregister(x)
	}
	for _, m := range msgs {
		if err := cn.writeRaw(m); err != nil {
			return err
		}
	}
	if err := cn.barrier(ctx); err != nil {
		return err
	}
	var errs []error
	for i, w := range waiters {
		if rep := pending(w); rep != nil && rep[1] == of13.Type_Error {
			errs = append(errs, fmt.Errorf("conntrack flush #%d: %w", i, decodeError(rep)))
		}
	}
	return errors.Join(errs...)
}

// encode builds nx_ct_flush and its properties (OVS include/openflow/
// nicira-ext.h): ip_proto, 7 bytes of padding, then the original tuple
// (type 0), the reply tuple (type 1) and the zone (type 2), each tuple a
// nested list of source (0), destination (1), source port (2) and
// destination port (3). Addresses are 16 bytes, IPv4 mapped into IPv6.
func (f ConntrackFlush) encode() ([]byte, error) {
	var family int
	for _, a := range []netip.Addr{f.Orig.Src, f.Orig.Dst, f.Reply.Src, f.Reply.Dst} {
		if !a.IsValid() {
			continue
		}
		fam := 6
		if a.Is4() {
			fam = 4
		}
		if family != 0 && fam != family {
			return nil, fmt.Errorf("%w: IPv4 and IPv6 addresses mixed", ErrInvalidFlush)
		}
		family = fam
	}
	if f.IPProto == 0 && (f.Orig.SrcPort|f.Orig.DstPort|f.Reply.SrcPort|f.Reply.DstPort) != 0 {
		return nil, fmt.Errorf("%w: ports need IPProto", ErrInvalidFlush)
	}
	out := []byte{f.IPProto, 0, 0, 0, 0, 0, 0, 0}
	out = appendTupleProp(out, 0, f.Orig)
	out = appendTupleProp(out, 1, f.Reply)
	// 16-bit values are followed by 2 bytes of padding, as OVS sends them.
	out = appendProp(out, 2, append(be16(f.Zone), 0, 0))
	return out, nil
}

// appendProp appends an OpenFlow property: type, length (header and
// value), value, padding to 8 bytes.
func appendProp(b []byte, typ uint16, value []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(value)))
	b = append(b, value...)
	pad := (8 - (4+len(value))%8) % 8
	return append(b, make([]byte, pad)...)
}

func appendTupleProp(b []byte, typ uint16, t ConntrackTuple) []byte {
	var nested []byte
	for i, a := range []netip.Addr{t.Src, t.Dst} {
		if a.IsValid() {
			// As16 maps an IPv4 address into IPv6 (::ffff:a.b.c.d).
			v := a.As16()
			nested = appendProp(nested, uint16(i), v[:])
		}
	}
	for i, p := range []uint16{t.SrcPort, t.DstPort} {
		if p != 0 {
			// A 16-bit value is followed by 2 bytes of padding.
			nested = appendProp(nested, uint16(2+i), append(be16(p), 0, 0))
		}
	}
	if len(nested) == 0 {
		return b
	}
	// A nested property's contents start 8 bytes in.
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(nested)))
	b = append(b, 0, 0, 0, 0)
	return append(b, nested...)
}
