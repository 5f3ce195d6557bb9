package ovsctl

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// DumpFlowsArgs are the ovs-ofctl arguments that dump bridge's flows the
// way ParseDumpFlows and the agent's query API read them: OpenFlow 1.3,
// port numbers rather than names, no statistics.
func DumpFlowsArgs(bridge string) []string {
	return []string{"-O", "OpenFlow13", "--no-names", "--no-stats", "dump-flows", bridge}
}

// TraceArgs are the ovs-appctl arguments that run ofproto/trace of flow
// (ovs-ofctl syntax) through bridge as the first packet of a new
// connection: conntrack answers "new" at each of the (at most two: source
// and destination bridge) conntrack passes. target is ovs-vswitchd's
// control socket or pidfile name ("" lets ovs-appctl find ovs-vswitchd in
// OVS_RUNDIR).
func TraceArgs(target, bridge, flow string) []string {
	var args []string
	if target != "" {
		args = append(args, "-t", target)
	}
	return append(args, "ofproto/trace", bridge, flow, "--ct-next", "trk,new", "--ct-next", "trk,new")
}

// RevalidatorWaitArgs are the ovs-appctl arguments that return once
// ovs-vswitchd's revalidator threads have finished a dump of the datapath
// flows that was going on when it was asked, or the next one (the dump
// ending after the command): a datapath flow cached before an OpenFlow
// change still acts until a dump that started after the change has
// revalidated it, so callers that need that run it twice. target as in
// TraceArgs.
func RevalidatorWaitArgs(target string) []string {
	var args []string
	if target != "" {
		args = append(args, "-t", target)
	}
	return append(args, "revalidator/wait")
}

// Timeout bounds one Run.
const Timeout = 30 * time.Second

// Run runs an OVS tool (ovs-ofctl, ovs-appctl) with env as its whole
// environment (nil: this process's) and returns its standard output; an
// error carries the command line and its standard error.
func Run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
