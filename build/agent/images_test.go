package agentimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
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

// TestDockerfileProgramsBuild compiles every program the two Dockerfiles
// build (go build of several packages compiles them and discards the
// result: no linking, and the machine's build cache serves the rest).
func TestDockerfileProgramsBuild(t *testing.T) {
	pkgRef := regexp.MustCompile(`(\./cmd/[a-z0-9-]+|github\.com/containernetworking/plugins/plugins/[a-z0-9/-]+)`)
	var pkgs []string
	for _, df := range []string{"Dockerfile", "../controller/Dockerfile"} {
		data, err := os.ReadFile(df)
		if err != nil {
			t.Fatal(err)
		}
		found := pkgRef.FindAllString(string(data), -1)
		if len(found) == 0 {
			t.Fatalf("%s builds nothing?", df)
		}
		pkgs = append(pkgs, found...)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"build"}, pkgs...)...)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", pkgs, err, b)
	}
}
