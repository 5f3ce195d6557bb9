package flowsync

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// ParseDumpFlows reads the cookie, table, priority and counters of each
// flow in `ovs-ofctl dump-flows` output.
func ParseDumpFlows(out string) ([]FlowStat, error) {
	var stats []FlowStat
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "cookie=") {
			continue
		}
		var st FlowStat
		fields := strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' })
		for _, f := range fields {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			var err error
			switch k {
			case "cookie":
				st.Cookie, err = strconv.ParseUint(v, 0, 64)
			case "table":
				var t uint64
				t, err = strconv.ParseUint(v, 10, 8)
				st.Table = uint8(t)
			case "priority":
				var p uint64
				p, err = strconv.ParseUint(v, 10, 16)
				st.Priority = uint16(p)
			case "n_packets":
				st.Packets, err = strconv.ParseUint(v, 10, 64)
			case "n_bytes":
				st.Bytes, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("dump-flows line %q: %s: %v", line, k, err)
			}
			if strings.HasPrefix(f, "actions=") {
				break
			}
		}
		if !strings.Contains(line, "priority=") {
			st.Priority = 32768 // ovs-ofctl omits the default priority
		}
		stats = append(stats, st)
	}
	return stats, sc.Err()
}
