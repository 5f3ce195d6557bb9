package testbed

import (
	"fmt"
	"log"
	"os"
	"runtime"
	"sync"
	"testing"
)

// Runner lets a long-lived command (not a test) use Start and the harnesses
// it builds on, which take a testing.TB: it records cleanups and turns
// Fatal into the end of the goroutine that called Start, like a test does.
//
// testing.TB has an unexported method, so Runner embeds the interface (left
// nil) and overrides every exported method the harnesses may call.
type Runner struct {
	testing.TB
	Logger *log.Logger

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	tempDirs []string
}

// NewRunner returns a Runner logging to logger.
func NewRunner(logger *log.Logger) *Runner { return &Runner{Logger: logger} }

// Run calls f on a fresh goroutine and reports whether it returned without
// failing (a Fatal ends the goroutine, as in a test).
func (r *Runner) Run(f func(tb testing.TB)) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return !r.Failed()
}

// Close runs the cleanups in reverse order of registration.
func (r *Runner) Close() {
	for {
		r.mu.Lock()
		if len(r.cleanups) == 0 {
			dirs := r.tempDirs
			r.tempDirs = nil
			r.mu.Unlock()
			for _, d := range dirs {
				_ = os.RemoveAll(d)
			}
			return
		}
		f := r.cleanups[len(r.cleanups)-1]
		r.cleanups = r.cleanups[:len(r.cleanups)-1]
		r.mu.Unlock()
		f()
	}
}

func (r *Runner) Helper()          {}
func (r *Runner) Name() string     { return "tierflow-testbed" }
func (r *Runner) Cleanup(f func()) { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *Runner) Failed() bool     { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *Runner) Fail()            { r.mu.Lock(); r.failed = true; r.mu.Unlock() }
func (r *Runner) FailNow()         { r.Fail(); runtime.Goexit() }
func (r *Runner) Log(args ...any)  { r.Logger.Print(fmt.Sprintln(args...)) }
func (r *Runner) Logf(format string, args ...any) {
	r.Logger.Printf(format, args...)
}
func (r *Runner) Error(args ...any)                 { r.Log(args...); r.Fail() }
func (r *Runner) Errorf(format string, args ...any) { r.Logf(format, args...); r.Fail() }
func (r *Runner) Fatal(args ...any)                 { r.Log(args...); r.FailNow() }
func (r *Runner) Fatalf(format string, args ...any) { r.Logf(format, args...); r.FailNow() }
func (r *Runner) Skip(args ...any)                  { r.Fatal(append([]any{"skip:"}, args...)...) }
func (r *Runner) Skipf(format string, args ...any)  { r.Fatalf("skip: "+format, args...) }
func (r *Runner) SkipNow()                          { r.FailNow() }
func (r *Runner) Skipped() bool                     { return false }
func (r *Runner) Setenv(key, value string)          { _ = os.Setenv(key, value) }

// TempDir returns a new directory removed by Close.
func (r *Runner) TempDir() string {
	d, err := os.MkdirTemp("", "tierflow-testbed-")
	if err != nil {
		r.Fatalf("TempDir: %v", err)
	}
	r.mu.Lock()
	r.tempDirs = append(r.tempDirs, d)
	r.mu.Unlock()
	return d
}
