package bench

import (
	"os"
	"testing"
	"time"

	"github.com/tierflow/tierflow/test/bench/measure"
)

// quickScale says whether this process runs the reduced scenario sizes.
func quickScale() bool {
	switch os.Getenv("BENCH_SCALE") {
	case "quick":
		return true
	case "full":
		return false
	}
	return os.Getenv("BENCH_QUICK") == "1"
}

const mib = 1 << 20

// reportMemory reports heap in use (after a full GC) and the peak RSS
// since the last measure.ResetPeakRSS.
func reportMemory(b *testing.B) {
	b.Helper()
	b.ReportMetric(float64(measure.HeapInUseBytes())/mib, "heap-MiB")
	peak, err := measure.PeakRSSBytes()
	if err != nil {
		b.Fatalf("reading peak RSS: %v", err)
	}
	b.ReportMetric(float64(peak)/mib, "peak-rss-MiB")
}

func resetPeak(b *testing.B) {
	b.Helper()
	if err := measure.ResetPeakRSS(); err != nil {
		b.Fatal(err)
	}
}

func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	d, err := measure.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
