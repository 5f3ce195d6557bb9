package flowsync

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/tierflow/tierflow/pkg/agent/flowtext"
)

// Ofctl installs flows with `ovs-ofctl -O OpenFlow13 --bundle`, which sends
// them in one OpenFlow 1.4 bundle (OVS accepts bundles on OpenFlow 1.3
// connections as an extension) committed atomically.
type Ofctl struct {
	// Target is the bridge name or its management socket ("unix:PATH").
	Target string
	// Env is extra environment for ovs-ofctl (e.g. OVS_RUNDIR).
	Env []string
}

func (o Ofctl) run(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ovs-ofctl", append([]string{"-O", "OpenFlow13"}, args...)...)
	cmd.Env = append(cmd.Environ(), o.Env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ovs-ofctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// BundleText renders b as an ovs-ofctl flow-mod file.
func BundleText(b Bundle) string {
	var sb strings.Builder
	for _, f := range b.Add {
		sb.WriteString("add " + flowtext.Flow(f) + "\n")
	}
	for _, f := range b.Modify {
		sb.WriteString("modify_strict " + flowtext.Flow(f) + "\n")
	}
	for _, f := range b.Delete {
		sb.WriteString("delete_strict " + flowtext.Key(f) + "\n")
	}
	for _, c := range b.DeleteCookies {
		fmt.Fprintf(&sb, "delete cookie=%#x/%#x\n", c.Value, c.Mask)
	}
	return sb.String()
}

// Apply implements Installer.
func (o Ofctl) Apply(ctx context.Context, b Bundle) error {
	if b.Empty() {
		return nil
	}
	text := BundleText(b)
	_, err := o.run(ctx, text, "--bundle", "add-flows", o.Target, "-")
	if err != nil {
		// ovs-ofctl names the failing line as "-:N:"; quote it.
		if i := strings.LastIndex(err.Error(), " -:"); i >= 0 {
			rest := err.Error()[i+3:]
			if n, _, ok := strings.Cut(rest, ":"); ok {
				if i, perr := strconv.Atoi(n); perr == nil && i >= 1 {
					if lines := strings.Split(text, "\n"); i <= len(lines) {
						err = fmt.Errorf("%w (line %d: %s)", err, i, lines[i-1])
					}
				}
			}
		}
	}
	return err
}

// Stats implements Installer.
func (o Ofctl) Stats(ctx context.Context) ([]FlowStat, error) {
	out, err := o.run(ctx, "", "dump-flows", o.Target)
	if err != nil {
		return nil, err
	}
	return ParseDumpFlows(out)
}

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
