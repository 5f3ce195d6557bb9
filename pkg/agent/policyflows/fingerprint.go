package policyflows

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"sort"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/model"
)

// fingerprint hashes everything a rule's flows depend on: its identity,
// rule ID, priority and content, its local applied-to pods with their named
// ports, the members of the address groups it references and, for an
// egress named port towards ipBlocks, the members of its NamedPortGroups. Equal
// fingerprints mean equal flows, so the cached flows are reused. Content is
// hashed rather than trusting group generations, so a producer that forgets
// to bump a generation cannot leave stale flows behind.
func (c *Compiler) fingerprint(in Input, pods map[model.PodRef]pipeline.LocalPod, pr placed, id uint32, prio uint16) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	var buf [8]byte
	u := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		_, _ = h.Write(buf[:])
	}
	str := func(s string) {
		u(uint64(len(s)))
		_, _ = h.WriteString(s)
	}
	addr := func(a netip.Addr) {
		// Its length (0, 4 or 16: invalid, IPv4, IPv6), bytes and zone,
		// as MarshalBinary has them, without allocating.
		u(uint64(a.BitLen() / 8))
		b := a.As16()
		_, _ = h.Write(b[:])
		str(a.Zone())
	}
	namedPorts := func(ps []model.NamedPort) {
		u(uint64(len(ps)))
		for _, p := range ps {
			str(p.Name)
			str(string(p.Protocol))
			u(uint64(p.Port))
		}
	}
	r := pr.rule
	str(pr.key)
	u(uint64(id))
	u(uint64(prio))
	u(uint64(pr.pol.Tier))
	u(uint64(pr.table))
	str(string(r.Direction))
	str(string(r.Action))
	u(uint64(len(r.Ports)))
	named := false
	for _, p := range r.Ports {
		str(string(p.Protocol))
		u(uint64(p.Port))
		u(uint64(p.EndPort))
		str(p.Name)
		named = named || p.Name != ""
	}
	u(uint64(len(r.Peer.IPBlocks)))
	for _, b := range r.Peer.IPBlocks {
		addr(b.CIDR.Addr())
		u(uint64(b.CIDR.Bits() + 1)) // +1: an invalid prefix (-1) hashes apart from /0
		u(uint64(len(b.Except)))
		for _, x := range b.Except {
			addr(x.Addr())
			u(uint64(x.Bits() + 1))
		}
	}
	for _, a := range appliedPods(in, pods, pr.pol) {
		u(uint64(a.OFPort))
		namedPorts(a.Ports)
	}
	u(0xfeedface) // separator
	u(uint64(len(r.Peer.AddressGroups)))
	for _, gid := range r.Peer.AddressGroups {
		str(gid)
		g := in.AddressGroups[gid]
		if g == nil {
			u(0)
			continue
		}
		u(uint64(len(g.Members)) + 1)
		for _, m := range g.Members {
			u(uint64(len(m.IPs)))
			for _, ip := range m.IPs {
				addr(ip)
			}
			namedPorts(m.Ports)
		}
	}
	if named && r.Direction == model.DirectionOut && len(r.Peer.IPBlocks) > 0 {
		known := namedPortMembers(in, r)
		ips := make([]netip.Addr, 0, len(known))
		for ip := range known {
			ips = append(ips, ip)
		}
		sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
		for _, ip := range ips {
			addr(ip)
			namedPorts(known[ip])
		}
	}
	return h.Sum64()
}
