package testbed

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSupervisorRestartsAndStops(t *testing.T) {
	dir := t.TempDir()
	s, err := startSupervised(dir, "sleeper", "/bin/sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	first := s.PID()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Restarts() != 1 || s.PID() == first {
		if time.Now().After(deadline) {
			t.Fatalf("not restarted: restarts %d, pid %d (was %d)", s.Restarts(), s.PID(), first)
		}
		time.Sleep(50 * time.Millisecond)
	}
	second := s.PID()
	if !strings.Contains(s.logTail(5), "restart 1") {
		t.Errorf("log does not record the restart: %q", s.logTail(5))
	}
	s.Stop(5 * time.Second)
	time.Sleep(1500 * time.Millisecond) // longer than the restart delay
	if syscall.Kill(second, 0) == nil {
		t.Errorf("process %d still runs after Stop", second)
	}
	if s.Restarts() != 1 {
		t.Errorf("restarted after Stop: %d restarts", s.Restarts())
	}
}
