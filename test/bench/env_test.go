package bench

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierflow/tierflow/test/bench/measure"
	"github.com/tierflow/tierflow/test/bench/shapes"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// quickScale says whether this process runs the reduced scenario sizes.
func quickScale() bool { return shapes.QuickScale() }

const mib = 1 << 20

// reportMemory reports heap in use (after a full GC) and the peak RSS
// since the last measure.ResetPeakRSS.
func reportMemory(b *testing.B) { measure.ReportMemory(b) }

func resetPeak(b *testing.B) {
	b.Helper()
	if err := measure.ResetPeakRSS(); err != nil {
		b.Fatal(err)
	}
}

func cpuTime(b *testing.B) time.Duration { return measure.MustCPUTime(b) }

// waitOVSLock waits, showing progress, until no other process holds the
// host-wide OVS lock (test/ovsenv: one private ovs-vswitchd per host), so
// that a driver's own time limit does not run while it queues behind
// other test processes. It does not take the lock: ovsenv.Start does,
// right after (if another process wins that race, ovsenv waits again and
// says so in the log).
func waitOVSLock(b *testing.B) {
	b.Helper()
	f, err := os.OpenFile(ovsenv.HostLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		b.Fatalf("opening the OVS host lock: %v", err)
	}
	defer f.Close()
	start := time.Now()
	var last time.Time
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			if !last.IsZero() {
				progressf("OVS host lock free after %.0fs", time.Since(start).Seconds())
			}
			return
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			b.Fatalf("OVS host lock %s: %v", ovsenv.HostLockPath, err)
		}
		if time.Since(last) >= 30*time.Second {
			progressf("waiting for the OVS host lock %s (%.0fs so far), held by %s", ovsenv.HostLockPath, time.Since(start).Seconds(), lockHolder(f))
			last = time.Now()
		}
		if time.Since(start) > ovsLockWait {
			b.Fatalf("the OVS host lock %s was held by %s for %v", ovsenv.HostLockPath, lockHolder(f), ovsLockWait)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ovsLockWait bounds waiting for the OVS host lock; cmd/benchreport adds
// it to the time limit of the drivers that need OVS.
const ovsLockWait = 55 * time.Minute

// lockHolder names the process holding a flock on f, from /proc/locks.
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "an unknown process"
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return "an unknown process"
	}
	suffix := fmt.Sprintf(":%d", st.Ino)
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		// 1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF
		if len(f) < 6 || f[1] != "FLOCK" || !strings.HasSuffix(f[5], suffix) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + f[4] + "/cmdline")
		args := strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " "))
		if len(args) > 3 {
			args = args[:3]
		}
		return fmt.Sprintf("pid %s (%s)", f[4], strings.Join(args, " "))
	}
	return "an unknown process"
}
