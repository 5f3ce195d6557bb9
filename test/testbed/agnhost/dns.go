package agnhost

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// KindDNSUDP and KindDNSTCP answer DNS queries: the test bed's stand-in for
// a CoreDNS container (its declared DNS ports; see noderuntime). With a
// ServiceLookup (the servers have API access) it serves cluster names the
// way CoreDNS's kubernetes plugin does for Services:
// NAME.NAMESPACE.svc.cluster.local has the Service's ClusterIPs (A for
// IPv4, AAAA for IPv6), and every other name is NXDOMAIN. Without one
// every A query is answered with DNSAnswerIPv4 and every AAAA query with
// DNSAnswerIPv6, for any name. Answers are authoritative, TTL 5 s.
const (
	KindDNSUDP = "dns-udp"
	KindDNSTCP = "dns-tcp"
)

// The addresses the DNS stand-in answers with (documentation ranges).
var (
	DNSAnswerIPv4 = netip.MustParseAddr("192.0.2.53")
	DNSAnswerIPv6 = netip.MustParseAddr("2001:db8::53")
)

// IsDNSImage reports whether a container image is CoreDNS, whose declared
// ports the test bed serves with the DNS stand-in.
func IsDNSImage(image string) bool { return strings.Contains(image, "coredns") }

// ServiceLookup returns the ClusterIPs of Service namespace/name; ok is
// false when there is no such Service.
type ServiceLookup func(namespace, name string) (ips []netip.Addr, ok bool)

// clusterSuffix is the cluster's DNS domain for Services.
const clusterSuffix = ".svc.cluster.local."

// dnsAnswer builds the response to one query message (nil: not a query).
func dnsAnswer(req []byte, lookup ServiceLookup) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil
	}
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}, Questions: qs}
	for _, q := range qs {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
		answers := []netip.Addr{DNSAnswerIPv4, DNSAnswerIPv6}
		if lookup != nil {
			answers = nil
			name := strings.ToLower(q.Name.String())
			svc, ns, ok := strings.Cut(strings.TrimSuffix(name, clusterSuffix), ".")
			if ok && strings.HasSuffix(name, clusterSuffix) && !strings.Contains(ns, ".") {
				answers, ok = lookup(ns, svc)
			}
			if !ok {
				resp.RCode = dnsmessage.RCodeNameError
				continue
			}
		}
		for _, a := range answers {
			switch {
			case q.Type == dnsmessage.TypeA && a.Is4():
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
			case q.Type == dnsmessage.TypeAAAA && a.Is6():
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
	}
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

// serveDNSTCP answers DNS over TCP (messages with a 2-byte length).
func (s *Servers) serveDNSTCP(addr string) error {
	return s.serveTCP(addr, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			var n uint16
			if err := binary.Read(c, binary.BigEndian, &n); err != nil {
				return
			}
			req := make([]byte, n)
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			s.logger.Printf("DNS TCP query from %s on %s", c.RemoteAddr(), addr)
			resp := dnsAnswer(req, s.lookup)
			if resp == nil {
				return
			}
			if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp)))); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
}
