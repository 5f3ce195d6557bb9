package explain

import (
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

// Matrix explains every ordered pair of distinct pods that have an address,
// on every port given, in port, source, destination order (pods sorted by
// namespace and name). Pods without an address cannot be an end of a
// connection and are left out; skipped lists them.
func (e *Evaluator) Matrix(ports []PortSpec) (cells []Cell, skipped []model.PodRef, err error) {
	var pods []*Pod
	for _, p := range e.inv.Pods() {
		if len(p.IPs) == 0 {
			skipped = append(skipped, p.Ref)
			continue
		}
		pods = append(pods, p)
	}
	for _, port := range ports {
		for _, s := range pods {
			for _, d := range pods {
				if s == d {
					continue
				}
				sr, dr := s.Ref, d.Ref
				res, err := e.Explain(Query{Src: Endpoint{Pod: &sr}, Dst: Endpoint{Pod: &dr}, Protocol: port.Protocol, Port: port.Port})
				if err != nil {
					return nil, nil, err
				}
				cells = append(cells, Cell{Src: sr.String(), Dst: dr.String(), Port: port.String(), Result: *res})
			}
		}
	}
	return cells, skipped, nil
}
