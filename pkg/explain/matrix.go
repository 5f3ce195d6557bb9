package explain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tierflow/tierflow/pkg/model"
)

// PortSpec is a destination protocol and port, written PROTO/PORT.
type PortSpec struct {
	Protocol model.Protocol
	Port     int32
}

func (p PortSpec) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// ParsePortSpec parses PROTO/PORT: PROTO is TCP, UDP or SCTP in any letter
// case, PORT a number from 1 to 65535.
func ParsePortSpec(s string) (PortSpec, error) {
	proto, num, ok := strings.Cut(s, "/")
	if !ok {
		return PortSpec{}, fmt.Errorf("port %q: want PROTO/PORT, e.g. TCP/80", s)
	}
	p, err := ParseProtocol(proto)
	if err != nil {
		return PortSpec{}, fmt.Errorf("port %q: %w", s, err)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 {
		return PortSpec{}, fmt.Errorf("port %q: port number must be 1-65535", s)
	}
	return PortSpec{Protocol: p, Port: int32(n)}, nil
}

// Cell is one connection of a matrix: its ends, its port and its result.
type Cell struct {
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	Port string `json:"port"`
	Result
}

// Matrix explains every ordered pair of distinct pods of the inventory, on
// every port given, in port, source, destination order (pods sorted by
// namespace and name). A pair that cannot connect (a pod without an
// address, an IPv4-only and an IPv6-only pod) has no cell; skipped says, in
// words, which were left out.
func (e *Evaluator) Matrix(ports []PortSpec) (cells []Cell, skipped []string, err error) {
	var pods []*Pod
	for _, p := range e.inv.Pods() {
		if len(p.IPs) == 0 {
			skipped = append(skipped, fmt.Sprintf("pod %s has no IP address", p.Ref))
			continue
		}
		pods = append(pods, p)
	}
	for _, s := range pods {
		for _, d := range pods {
			if s != d {
				if _, _, err := pickAddresses(end{pod: s, ips: s.IPs}, end{pod: d, ips: d.IPs}); err != nil {
					skipped = append(skipped, fmt.Sprintf("%s to %s: %v", s.Ref, d.Ref, err))
				}
			}
		}
	}
	for _, port := range ports {
		for _, s := range pods {
			for _, d := range pods {
				if s == d {
					continue
				}
				sr, dr := s.Ref, d.Ref
				res, err := e.Explain(Query{Src: Endpoint{Pod: &sr}, Dst: Endpoint{Pod: &dr}, Protocol: port.Protocol, Port: port.Port})
				if errors.Is(err, ErrNoSharedFamily) {
					continue
				}
				if err != nil {
					return nil, nil, err
				}
				cells = append(cells, Cell{Src: sr.String(), Dst: dr.String(), Port: port.String(), Result: *res})
			}
		}
	}
	return cells, skipped, nil
}
