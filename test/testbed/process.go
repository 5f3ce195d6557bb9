package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a daemon of the test bed, in its own process group, killed if
// the test bed's process dies.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

func startProcess(dir, name, path string, args ...string) (*process, error) {
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
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM to the process (which may need time to tear down what
// it created), then SIGKILL to its group after grace.
func (p *process) stop(grace time.Duration) {
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

func (p *process) logTail(lines int) string {
	data, err := os.ReadFile(p.logPath)
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
	cur      *process
	stopping bool
	restarts int
	stopped  chan struct{}
}

func startSupervised(dir, name, path string, args ...string) (*supervisor, error) {
	p, err := startProcess(dir, name, path, args...)
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
		appendLog(p.logPath, fmt.Sprintf("tierflow test bed: %s exited (%v); restart %d", s.name, p.cmd.ProcessState, s.restarts))
		next, err := startProcess(s.dir, s.name, s.path, s.args...)
		if err != nil {
			appendLog(p.logPath, fmt.Sprintf("tierflow test bed: restarting %s: %v", s.name, err))
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
	p.stop(grace)
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
	return p.logTail(lines)
}

func appendLog(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}
