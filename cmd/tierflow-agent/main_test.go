package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/pkg/distribution/client/statestore"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tierflow-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building tierflow-agent: %v\n%s", err, out)
	}
	return bin
}

// TestBadFlags: configuration mistakes exit 1 with one line naming the
// problem.
func TestBadFlags(t *testing.T) {
	bin := buildAgent(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-name=n1", "--datapath=kernel"}, "invalid --datapath"},
		{[]string{"--node-name=n1", "--datapath-type=fast"}, "datapathType"},
		{[]string{"--node-name=", "--datapath=none"}, "nodeName"},
		{[]string{"--node-name=n1", "--controller-address=nowhere"}, "controllerAddress"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "NODE_NAME=")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%v: %v, want exit status 1\n%s", tc.args, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: output %q lacks %q", tc.args, out, tc.want)
		}
	}
}

// TestBinaryRestoresStateWithoutController runs the binary with no
// datapath and no reachable controller: it serves the state it saved
// earlier on its query socket, and stops cleanly on SIGTERM.
func TestBinaryRestoresStateWithoutController(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	certPEM, _, err := certutil.GenerateSelfSignedCertKey("localhost", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	token := filepath.Join(dir, "token")
	for f, b := range map[string][]byte{ca: certPEM, token: []byte("t")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := filepath.Join(dir, "state")
	store, err := statestore.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	st := wire.NewNodeState("n1")
	st.Policies["p1"] = &model.Policy{Meta: model.Meta{ID: "p1", Generation: 3},
		Source: model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "saved"}, Tier: model.TierAdmin, Priority: 5}
	if err := store.Save("epoch-1", 7, st); err != nil {
		t.Fatal(err)
	}
	// A port nobody listens on: the controller is down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close()

	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command(bin, "--node-name=n1", "--datapath=none", "--query-socket="+sock, "--metrics-address=127.0.0.1:0",
		"--controller-address="+deadAddr, "--controller-ca-file="+ca, "--controller-server-name=localhost",
		"--token-file="+token, "--state-dir="+stateDir)
	logPath := filepath.Join(dir, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", b)
		}
	}()

	q := agentquery.NewClient(sock)
	var r *agentquery.Realization
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err = q.Realization(context.Background())
		if err == nil && len(r.Policies) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("realization from the saved state: %+v, %v", r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p := r.Policies[0]; p.ID != "p1" || p.Generation != 3 || p.Error != "" {
		t.Errorf("restored policy %+v", p)
	}
	s, err := q.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Restored || !s.Ready || s.ControllerConnected || s.Epoch != "epoch-1" || s.Version != 7 {
		t.Errorf("status %+v", s)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("query socket left behind: %v", err)
	}
}
