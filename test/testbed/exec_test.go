package testbed

import "testing"

// TestSplitKubectlLog: kubectl's own klog lines leave the command's
// stderr; the command's lines, even ones that look alike, stay.
func TestSplitKubectlLog(t *testing.T) {
	logged := "E1126 10:24:31.165915    1516 websocket.go:296] Unknown stream id 1, discarding message\n"
	for _, c := range []struct{ in, cmd, log string }{
		{"", "", ""},
		{logged, "", logged},
		{"REFUSED\n" + logged, "REFUSED\n", logged},
		{logged + "TIMEOUT\n", "TIMEOUT\n", logged},
		{"E1126 not a log line\n", "E1126 not a log line\n", ""},
		{"error: no newline", "error: no newline", ""},
	} {
		cmd, log := splitKubectlLog(c.in)
		if cmd != c.cmd || log != c.log {
			t.Errorf("splitKubectlLog(%q) = %q, %q; want %q, %q", c.in, cmd, log, c.cmd, c.log)
		}
	}
}
