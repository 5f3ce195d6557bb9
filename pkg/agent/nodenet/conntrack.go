package nodenet

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Taking an address off an interface makes the kernel drop every
// conntrack entry that MASQUERADE translated to that address out of that
// interface (nf_nat_masquerade's address notifier). The next packet of
// such a connection starts a new entry, which MASQUERADE gives another
// source port (kube-proxy masquerades with --random-fully): the peer
// answers with a reset. The node's own connections through Services
// (kube-proxy masquerades the host's traffic to ClusterIPs: host-network
// pods', such as the controller's to the API server) and its pods'
// masqueraded ones would end whenever the underlay moves the node's
// address (agent start and stop, userspace datapath in encap mode).
//
// keepMasqueraded re-creates those entries as plain NAT entries with the
// same translation (ctnetlink: delete, create with CTA_NAT_SRC and
// CTA_NAT_DST, mark as replied): the notifier leaves entries without a
// masquerade interface alone, and the connections go on with the address
// on its new interface. Only established TCP connections are kept (UDP
// and closing connections start anew at little cost); their window
// tracking starts over, so both directions are marked be-liberal. A
// packet that arrives between the delete and the create (microseconds)
// starts a masqueraded entry of its own: that connection ends as it did
// before. Best effort: an error leaves the rest as they were.

// ctnetlink attributes vishvananda/netlink does not name
// (linux/netfilter/nfnetlink_conntrack.h).
const (
	ctaNatSrc      = 6
	ctaNatDst      = 13
	ctaNatV4MinIP  = 1
	ctaNatV4MaxIP  = 2
	ctaNatProto    = 3
	ctaNatV6MinIP  = 4
	ctaNatV6MaxIP  = 5
	ctaProtoNatMin = 1
	ctaProtoNatMax = 2

	ipsSeenReply = 1 << 1 // IPS_SEEN_REPLY
	ipsAssured   = 1 << 2 // IPS_ASSURED
	ipsConfirmed = 1 << 3 // IPS_CONFIRMED

	tcpConntrackEstablished = 3    // TCP_CONNTRACK_ESTABLISHED
	tcpFlagBeLiberal        = 0x08 // IP_CT_TCP_FLAG_BE_LIBERAL
)

// keepMasqueraded re-creates the established TCP connections translated
// to one of addrs as entries that survive the addresses' removal from
// their interface, and returns how many it kept.
func (h *host) keepMasqueraded(addrs []netip.Addr) (int, error) {
	kept := 0
	err := h.inNetNS(func() error {
		var errs []error
		for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			flows, err := h.h.ConntrackTableList(netlink.ConntrackTable, family)
			if err != nil {
				errs = append(errs, fmt.Errorf("conntrack: listing: %w", err))
				continue
			}
			for _, f := range flows {
				if !translatedTo(f, addrs) {
					continue
				}
				created, err := recreate(f, uint8(family))
				if created {
					kept++
				}
				if err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(errs...)
	})
	return kept, err
}

// translatedTo reports whether f is an established TCP connection whose
// source was translated to one of addrs.
func translatedTo(f *netlink.ConntrackFlow, addrs []netip.Addr) bool {
	tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP)
	if f.Forward.Protocol != unix.IPPROTO_TCP || !ok || tcp.State != tcpConntrackEstablished || f.Zone != 0 {
		return false
	}
	to, ok := netip.AddrFromSlice(f.Reverse.DstIP)
	if !ok {
		return false
	}
	to = to.Unmap()
	found := false
	for _, a := range addrs {
		found = found || a == to
	}
	return found && (!f.Forward.SrcIP.Equal(f.Reverse.DstIP) || f.Forward.SrcPort != f.Reverse.DstPort)
}

// recreate replaces f by an entry with the same translation and no
// masquerade interface, and says whether it made one. It runs in the
// node's network namespace (the requests open their socket in the calling
// thread's).
func recreate(f *netlink.ConntrackFlow, family uint8) (bool, error) {
	del := ctRequest(nl.IPCTNL_MSG_CT_DELETE, unix.NLM_F_ACK, family)
	del.AddData(ctTuple(nl.CTA_TUPLE_ORIG, f.Forward, family))
	if _, err := del.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // ended meanwhile
		}
		return false, fmt.Errorf("conntrack: deleting %s: %w", flowName(f), err)
	}
	// The reply tuple given is the untranslated one: the kernel applies
	// CTA_NAT_DST and CTA_NAT_SRC to it (and sets the NAT status bits
	// only for a translation that changes it).
	add := ctRequest(nl.IPCTNL_MSG_CT_NEW, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, family)
	add.AddData(ctTuple(nl.CTA_TUPLE_ORIG, f.Forward, family))
	add.AddData(ctTuple(nl.CTA_TUPLE_REPLY, netlink.IPTuple{Protocol: f.Forward.Protocol,
		SrcIP: f.Forward.DstIP, SrcPort: f.Forward.DstPort, DstIP: f.Forward.SrcIP, DstPort: f.Forward.SrcPort}, family))
	add.AddData(ctNAT(ctaNatDst, f.Reverse.SrcIP, f.Reverse.SrcPort, family))
	add.AddData(ctNAT(ctaNatSrc, f.Reverse.DstIP, f.Reverse.DstPort, family))
	add.AddData(nl.NewRtAttr(nl.CTA_TIMEOUT, nl.BEUint32Attr(f.TimeOut)))
	add.AddData(nl.NewRtAttr(nl.CTA_MARK, nl.BEUint32Attr(f.Mark)))
	info := nl.NewRtAttr(unix.NLA_F_NESTED|nl.CTA_PROTOINFO, nil)
	tcp := info.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_PROTOINFO_TCP, nil)
	tcp.AddRtAttr(nl.CTA_PROTOINFO_TCP_STATE, []byte{tcpConntrackEstablished})
	tcp.AddRtAttr(nl.CTA_PROTOINFO_TCP_FLAGS_ORIGINAL, []byte{tcpFlagBeLiberal, tcpFlagBeLiberal})
	tcp.AddRtAttr(nl.CTA_PROTOINFO_TCP_FLAGS_REPLY, []byte{tcpFlagBeLiberal, tcpFlagBeLiberal})
	add.AddData(info)
	if _, err := add.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		return false, fmt.Errorf("conntrack: re-creating %s: %w", flowName(f), err)
	}
	// The kernel refuses status bits in a create with NAT; an update sets
	// them: replied and assured, as the entry was (its packets are ctstate
	// ESTABLISHED again, not NEW until the next reply). An update must
	// repeat the bits it cannot change (confirmed); the NAT bits it
	// ignores.
	upd := ctRequest(nl.IPCTNL_MSG_CT_NEW, unix.NLM_F_ACK, family)
	upd.AddData(ctTuple(nl.CTA_TUPLE_ORIG, f.Forward, family))
	upd.AddData(nl.NewRtAttr(nl.CTA_STATUS, nl.BEUint32Attr(ipsConfirmed|ipsSeenReply|ipsAssured)))
	if _, err := upd.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		return true, fmt.Errorf("conntrack: marking %s replied: %w", flowName(f), err)
	}
	return true, nil
}

func flowName(f *netlink.ConntrackFlow) string {
	return fmt.Sprintf("%s -> %s",
		net.JoinHostPort(f.Forward.SrcIP.String(), fmt.Sprint(f.Forward.SrcPort)),
		net.JoinHostPort(f.Forward.DstIP.String(), fmt.Sprint(f.Forward.DstPort)))
}

func ctRequest(op, flags int, family uint8) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(int(netlink.ConntrackTable)<<8|op, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	return req
}

func ipBytes(ip net.IP, family uint8) []byte {
	if family == unix.AF_INET {
		return ip.To4()
	}
	return ip.To16()
}

func ctTuple(typ int, t netlink.IPTuple, family uint8) *nl.RtAttr {
	src, dst := nl.CTA_IP_V4_SRC, nl.CTA_IP_V4_DST
	if family == unix.AF_INET6 {
		src, dst = nl.CTA_IP_V6_SRC, nl.CTA_IP_V6_DST
	}
	a := nl.NewRtAttr(unix.NLA_F_NESTED|typ, nil)
	ip := a.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_IP, nil)
	ip.AddRtAttr(src, ipBytes(t.SrcIP, family))
	ip.AddRtAttr(dst, ipBytes(t.DstIP, family))
	proto := a.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_PROTO, nil)
	proto.AddRtAttr(nl.CTA_PROTO_NUM, []byte{t.Protocol})
	proto.AddRtAttr(nl.CTA_PROTO_SRC_PORT, nl.BEUint16Attr(t.SrcPort))
	proto.AddRtAttr(nl.CTA_PROTO_DST_PORT, nl.BEUint16Attr(t.DstPort))
	return a
}

// ctNAT is a CTA_NAT_SRC or CTA_NAT_DST translating to exactly ip:port.
func ctNAT(typ int, ip net.IP, port uint16, family uint8) *nl.RtAttr {
	minIP, maxIP := ctaNatV4MinIP, ctaNatV4MaxIP
	if family == unix.AF_INET6 {
		minIP, maxIP = ctaNatV6MinIP, ctaNatV6MaxIP
	}
	a := nl.NewRtAttr(unix.NLA_F_NESTED|typ, nil)
	a.AddRtAttr(minIP, ipBytes(ip, family))
	a.AddRtAttr(maxIP, ipBytes(ip, family))
	proto := a.AddRtAttr(unix.NLA_F_NESTED|ctaNatProto, nil)
	proto.AddRtAttr(ctaProtoNatMin, nl.BEUint16Attr(port))
	proto.AddRtAttr(ctaProtoNatMax, nl.BEUint16Attr(port))
	return a
}
