package demo_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestDemo runs tierflow-demo as DEMO_KEEP=0 does and checks each step's
// output: the matrices (before: all allowed; after: the three policies'
// effect), both explanations, and the denying rule's flows read back from
// OVS by cookie.
func TestDemo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, OVS): run as root, e.g. through `make test`")
	}
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tierflow-demo")
	build := exec.Command("go", "build", "-o", bin, "./test/demo/cmd/tierflow-demo")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--dir", filepath.Join(dir, "bed"), "--keep=false")
	cmd.Dir = root
	// If this test dies (a timeout), the demo gets SIGTERM and tears
	// down what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := out.String()
	if err != nil {
		t.Fatalf("tierflow-demo: %v\n%s", err, text)
	}
	t.Logf("demo output:\n%s", text)

	for _, want := range []string{
		"==> 1. Starting the simulated cluster",
		"--- test/demo/1-admin-slytherin-keep-out.yaml",
		"--- test/demo/2-networkpolicy-hufflepuff.yaml",
		"--- test/demo/3-baseline-ravenclaw.yaml",
		"Why slytherin/draco -> gryffindor/harry on TCP/80?",
		"$ tierctl flows --node",
		"ovs-ofctl -O OpenFlow13 dump-flows",
		"=== tierflow demo done",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if n := strings.Count(text, "cells agree with tierctl explain"); n != 2 {
		t.Errorf("%d matrices checked against explain, want 2", n)
	}
	// Before the policies every cell is allowed; after, slytherin's row
	// has DENY in gryffindor's columns.
	grids := regexp.MustCompile(`(?m)^TCP/80 .*\n(?:\S+/\S+ .*\n)+`).FindAllString(text, -1)
	if len(grids) != 2 {
		t.Fatalf("found %d TCP/80 grids, want 2", len(grids))
	}
	if strings.Contains(grids[0], "DENY") || strings.Contains(grids[0], "ERR") {
		t.Errorf("matrix without policy has denied or failed cells:\n%s", grids[0])
	}
	if !regexp.MustCompile(`(?m)^slytherin/draco .*DENY`).MatchString(grids[1]) || strings.Contains(grids[1], "ERR") {
		t.Errorf("matrix with policies does not deny slytherin/draco:\n%s", grids[1])
	}
	if !strings.Contains(text, "slytherin-keep-out") || !strings.Contains(text, "priority=") {
		t.Errorf("explain or flow output lacks the denying policy or the flows")
	}
}
