package bench

import (
	"os"
	"testing"
)

// TestMain runs the tests and benchmarks, or, when BenchmarkFanout
// starts this binary as its agents' process (fanoutAgentsEnv set), only
// that.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(fanoutAgentsEnv); cfg != "" {
		os.Exit(runFanoutAgents(cfg))
	}
	os.Exit(m.Run())
}
