package agentimage

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeImagesNeedsAnEngine: `make images` stops with a clear message,
// before building anything, when the container engine is missing or does
// not answer. (Building the images needs a real engine: see
// build/README.md.)
func TestMakeImagesNeedsAnEngine(t *testing.T) {
	for _, tc := range []struct{ docker, want string }{
		{"tierflow-no-such-engine", "'tierflow-no-such-engine' not found"},
		{"false", "no container engine reachable ('false info' failed)"},
	} {
		out, err := exec.Command("make", "--no-print-directory", "-C", "../..", "images", "DOCKER="+tc.docker).CombinedOutput()
		if err == nil {
			t.Errorf("DOCKER=%s: make images succeeded:\n%s", tc.docker, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) || strings.Contains(string(out), " build ") {
			t.Errorf("DOCKER=%s: output lacks %q or went on building:\n%s", tc.docker, tc.want, out)
		}
	}
}
