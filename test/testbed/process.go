package testbed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a daemon started by the test bed or by what runs on it (the
// tierflow controller and agents of test/e2e/framework): in its own process
// group, its output appended to DIR/NAME.log, killed if the process that
// started it dies (so a crashed test leaves no daemon behind).
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartProcess starts path with args in dir.
func StartProcess(dir, name, path string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Stop sends SIGTERM to the process (which may need time to tear down what
// it created), then SIGKILL to its group after grace.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// errExitedCleanly: a daemon ended with status 0 while it should run.
var errExitedCleanly = errors.New("exited with status 0")

// ExitErr is nil while the process runs, else why it ended.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		if p.err == nil {
			return errExitedCleanly
		}
		return p.err
	default:
		return nil
	}
}

// LogTail is the last lines of the process's log.
func (p *Process) LogTail(lines int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	parts := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// supervisor keeps a daemon running: when it exits on its own it is
// started again (after a second), as a node's service manager would restart
// kwok or a kubelet; Stop ends that.
type supervisor struct {
	dir, name, path string
	args            []string

	mu       sync.Mutex
	cur      *Process
	stopping bool
	restarts int
	stopped  chan struct{}
}

func startSupervised(dir, name, path string, args ...string) (*supervisor, error) {
	p, err := StartProcess(dir, name, path, args...)
	if err != nil {
		return nil, err
	}
	s := &supervisor{dir: dir, name: name, path: path, args: args, cur: p, stopped: make(chan struct{})}
	go s.watch()
	return s, nil
}

func (s *supervisor) watch() {
	defer close(s.stopped)
	for {
		s.mu.Lock()
		p := s.cur
		s.mu.Unlock()
		<-p.done
		time.Sleep(time.Second)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.restarts++
		appendLog(p.LogPath, fmt.Sprintf("tierflow test bed: %s exited (%v); restart %d", s.name, p.cmd.ProcessState, s.restarts))
		next, err := StartProcess(s.dir, s.name, s.path, s.args...)
		if err != nil {
			appendLog(p.LogPath, fmt.Sprintf("tierflow test bed: restarting %s: %v", s.name, err))
			s.mu.Unlock()
			return
		}
		s.cur = next
		s.mu.Unlock()
	}
}

// Stop stops the daemon for good (see process.stop).
func (s *supervisor) Stop(grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	p := s.cur
	s.mu.Unlock()
	p.Stop(grace)
	<-s.stopped
}

// Restarts is how often the daemon was restarted.
func (s *supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// PID is the process ID of the running daemon.
func (s *supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.cmd.Process.Pid
}

func (s *supervisor) logTail(lines int) string {
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	return p.LogTail(lines)
}

func appendLog(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}
