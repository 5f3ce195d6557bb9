package ovsctl

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// DumpedFlow is one flow of `ovs-ofctl dump-flows`: what OpenFlow flow
// statistics identify a flow by (cookie, table, priority), and its
// counters (zero in --no-stats output).
type DumpedFlow struct {
	Cookie   uint64
	Table    uint8
	Priority uint16
	Packets  uint64
	Bytes    uint64
}

// DefaultPriority is OpenFlow's default flow priority, which ovs-ofctl
// leaves out of its output (as it does cookie 0 and table 0).
const DefaultPriority = 32768

// ParseDumpFlows reads `ovs-ofctl dump-flows` output, with or without
// statistics. Lines that are no flow (the reply header) are skipped.
func ParseDumpFlows(out string) ([]DumpedFlow, error) {
	var flows []DumpedFlow
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		// Every flow has actions (actions=drop at least); the header
		// ("OFPST_FLOW reply ...") has none.
		head, _, isFlow := strings.Cut(line, "actions=")
		if !isFlow {
			continue
		}
		f := DumpedFlow{Priority: DefaultPriority}
		// Only the part before the actions: they may carry fields of
		// the same names (learn(), for one).
		for _, field := range strings.FieldsFunc(head, func(r rune) bool { return r == ',' || r == ' ' }) {
			k, v, ok := strings.Cut(field, "=")
			if !ok {
				continue
			}
			var err error
			switch k {
			case "cookie":
				f.Cookie, err = strconv.ParseUint(v, 0, 64)
			case "table":
				var t uint64
				t, err = strconv.ParseUint(v, 10, 8)
				f.Table = uint8(t)
			case "priority":
				var p uint64
				p, err = strconv.ParseUint(v, 10, 16)
				f.Priority = uint16(p)
			case "n_packets":
				f.Packets, err = strconv.ParseUint(v, 10, 64)
			case "n_bytes":
				f.Bytes, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("dump-flows line %q: %s: %v", line, k, err)
			}
		}
		flows = append(flows, f)
	}
	return flows, sc.Err()
}
