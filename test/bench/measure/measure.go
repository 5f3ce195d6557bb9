// Package measure holds what every benchmark driver reports besides time:
// the process's peak resident set (Linux VmHWM, resettable so one phase of
// a process can be measured alone), heap in use after a full GC, and a
// description of the machine a report was made on, with its load.
package measure

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ResetPeakRSS frees what the Go heap can return to the OS and resets the
// process's peak RSS to its current RSS (writing 5 to
// /proc/self/clear_refs), so a following PeakRSSBytes covers only what runs
// after it: building a scenario's input must not count as the engine's
// memory.
func ResetPeakRSS() error {
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting peak RSS: %w", err)
	}
	return nil
}

// PeakRSSBytes is the process's peak resident set size (VmHWM).
func PeakRSSBytes() (uint64, error) { return statusField("VmHWM:") }

// RSSBytes is the process's current resident set size (VmRSS).
func RSSBytes() (uint64, error) { return statusField("VmRSS:") }

func statusField(name string) (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, name))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected /proc/self/status line %q", line)
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", name)
}

// HeapInUseBytes runs a full GC and returns the heap in use, the figure
// the reference runs report as memory.
func HeapInUseBytes() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Machine describes the host a benchmark ran on.
type Machine struct {
	Cores     int    `json:"cores"`
	MemoryMiB uint64 `json:"memory_mib"`
	CPU       string `json:"cpu"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
}

// ReadMachine reads the machine's cores, memory and CPU model from /proc.
func ReadMachine() (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	mem, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(mem), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return m, fmt.Errorf("parsing MemTotal: %w", err)
			}
			m.MemoryMiB = kb / 1024
		}
	}
	if cpu, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(cpu), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(k))
	}
	if m.MemoryMiB == 0 {
		return m, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	return m, nil
}

// CPUTime is the CPU time (user and system) the process has used so far.
// On a busy machine wall time includes waiting for a core; CPU time
// does not, so both are reported.
func CPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// LoadAverage is the host's 1-minute load average (/proc/loadavg): how
// many processes were running or waiting for a core, the other work a
// figure shared the machine with.
func LoadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty /proc/loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

// ReportMemory reports, as metrics of b, the heap in use after a full GC
// (heap-MiB) and the peak RSS since the last ResetPeakRSS (peak-rss-MiB).
func ReportMemory(b *testing.B) {
	b.Helper()
	b.ReportMetric(float64(HeapInUseBytes())/(1<<20), "heap-MiB")
	peak, err := PeakRSSBytes()
	if err != nil {
		b.Fatalf("reading peak RSS: %v", err)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
}

// MustCPUTime is CPUTime, failing tb on error.
func MustCPUTime(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := CPUTime()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}
