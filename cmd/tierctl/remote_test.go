package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/queryapi"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/livecluster"
)

// TestRemoteAgentQueries: the controller binary forwards agent queries to
// a real agent (datapath none: no OVS, so this runs while TestLive waits
// for the host's OVS) over its distribution stream; answers equal the
// agent socket's, the agent's own errors come through as they are, and a
// node without a connected agent is "node N unreachable" - also once the
// agent stopped. TestLive does the same with flows and traces on OVS.
func TestRemoteAgentQueries(t *testing.T) {
	c := livecluster.New(t)
	tok := c.AddNode(t, "n1")
	c.AddNode(t, "n2") // a node without an agent
	kubeconfig, token := c.QueryUser(t, "viewer", true)
	nobody, _ := c.QueryUser(t, "nobody", false)
	c.StartController(t)

	cfg := config.DefaultAgent()
	cfg.NodeName = "n1"
	cfg.ControllerAddress = c.AgentAddress
	cfg.ControllerCAFile = c.CAFile
	cfg.ControllerServerName = "localhost"
	cfg.TokenFile = tok
	cfg.StateDir = filepath.Join(c.Dir, "n1-state")
	cfg.MetricsAddress = "127.0.0.1:0"
	ag := livecluster.StartAgent(t, "n1", runtime.Options{Config: &cfg, Datapath: agentquery.DatapathNone,
		QuerySocket: filepath.Join(c.Dir, "n1.sock")})

	ctx := context.Background()
	ctl, err := queryapi.NewClient(queryapi.ClientConfig{Address: c.QueryAddress, Token: token, CAFile: c.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	remote := ctl.Agent("n1")
	livecluster.Eventually(t, 60*time.Second, "n1's agent reachable through the controller", func() error {
		st, err := remote.Status(ctx)
		if err != nil {
			return err
		}
		if st.Node != "n1" || !st.ControllerConnected || !st.Ready {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	localReal, err := ag.Q.Realization(ctx)
	if err != nil {
		t.Fatal(err)
	}
	remoteReal, err := remote.Realization(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, r := mustJSON(t, localReal), mustJSON(t, remoteReal); l != r {
		t.Errorf("realization: socket %s, through the controller %s", l, r)
	}
	if nodes, err := ctl.Nodes(ctx, nil, nil); err != nil || strings.Join(nodes, ",") != "n1" {
		t.Errorf("connected nodes: %v %v, want [n1]", nodes, err)
	}

	ctlFlags := []string{"--kubeconfig", kubeconfig, "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		// The agent's own answer: it has no datapath.
		"agent error passed on": {[]string{"flows", "--node", "n1", "--table", "IngressAdmin"}, "no datapath"},
		"node without agent":    {[]string{"flows", "--node", "n2", "--table", "IngressAdmin"}, "node n2 unreachable"},
		"unknown node":          {[]string{"flows", "--node", "n9", "--check"}, "node n9 unreachable"},
		"trace unknown pod":     {[]string{"trace", "--src", "default/nope", "--dst", "default/x", "--port", "TCP/80"}, "no node hosting default/nope"},
	} {
		_, _, err := run(append(tc.args, ctlFlags...)...)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want one line containing %q", name, err, tc.want)
		}
	}
	_, _, err = run("flows", "--node", "n1", "--table", "IngressAdmin", "--kubeconfig", nobody, "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile)
	if err == nil || !strings.Contains(err.Error(), `may not get tierflow.io/queries flows`) {
		t.Errorf("flows without permission: %v", err)
	}

	// The agent stops: its node is unreachable at once.
	ag.Stop()
	livecluster.Eventually(t, 10*time.Second, "n1 unreachable after its agent stopped", func() error {
		_, err := remote.Status(ctx)
		if err == nil || !strings.Contains(err.Error(), "node n1 unreachable") {
			return fmt.Errorf("status of a stopped agent: %v", err)
		}
		return nil
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
