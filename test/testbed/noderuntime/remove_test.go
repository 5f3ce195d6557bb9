package noderuntime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoveRecorded: the namespace of a pod a killed runtime still had
// recorded is removed, with its record; other namespaces are not touched.
func TestRemoveRecorded(t *testing.T) {
	dir := t.TempDir()
	uid := fmt.Sprintf("test-%d", time.Now().UnixNano())
	ns, other := NetnsPrefix+uid, NetnsPrefix+uid+"-other"
	for _, n := range []string{ns, other} {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v %s", n, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}
	record := fmt.Sprintf(`{"uid": %q, "namespace": "default", "name": "p", "netns": %q}`, uid, ns)
	if err := os.WriteFile(filepath.Join(dir, uid+".json"), []byte(record), 0o644); err != nil {
		t.Fatal(err)
	}
	removed := RemoveRecorded(dir)
	if len(removed) != 1 || removed[0] != "namespace "+ns {
		t.Errorf("removed %v, want the recorded namespace", removed)
	}
	if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
		t.Error("recorded namespace still there")
	}
	if _, err := os.Stat("/var/run/netns/" + other); err != nil {
		t.Errorf("unrecorded namespace removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, uid+".json")); err == nil {
		t.Error("record still there")
	}
}
