package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// vsctlTimeout bounds every ovs-vsctl call, so that a dead ovsdb-server or
// ovs-vswitchd turns into an error instead of a hung runtime.
const vsctlTimeout = 20 * time.Second

// vsctl runs ovs-vsctl against one OVSDB endpoint.
type vsctl struct {
	db string
}

// exitError is a failed ovs-vsctl run with its exit status and stderr.
type exitError struct {
	args   []string
	code   int
	stderr string
}

func (e *exitError) Error() string {
	return fmt.Sprintf("ovs-vsctl %s: exit status %d: %s", strings.Join(e.args, " "), e.code, e.stderr)
}

func (v vsctl) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), vsctlTimeout)
	defer cancel()
	full := append([]string{"--db=" + v.db, "--timeout=" + strconv.Itoa(int(vsctlTimeout/time.Second))}, args...)
	cmd := exec.CommandContext(ctx, "ovs-vsctl", full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", &exitError{args: args, code: code, stderr: msg}
	}
	return strings.TrimSpace(stdout.String()), nil
}

// bridgeExists reports whether bridge exists; an error means the database
// could not be asked.
func (v vsctl) bridgeExists(bridge string) (bool, error) {
	_, err := v.run("br-exists", bridge)
	if err == nil {
		return true, nil
	}
	if ee, ok := err.(*exitError); ok && ee.code == 2 {
		return false, nil
	}
	return false, err
}

// datapathType returns the bridge's datapath_type ("" for the default, the
// kernel datapath; "netdev" for the userspace one).
func (v vsctl) datapathType(bridge string) (string, error) {
	out, err := v.run("get", "Bridge", bridge, "datapath_type")
	if err != nil {
		return "", err
	}
	return strings.Trim(out, `"`), nil
}

// addPort adds port to bridge and sets its Interface external_ids in one
// transaction, so the agent never sees the port without its pod identity.
func (v vsctl) addPort(bridge, port string, externalIDs map[string]string) error {
	args := []string{"--may-exist", "add-port", bridge, port, "--", "set", "Interface", port}
	for _, k := range sortedKeys(externalIDs) {
		args = append(args, "external_ids:"+strconv.Quote(k)+"="+strconv.Quote(externalIDs[k]))
	}
	_, err := v.run(args...)
	return err
}

// delPort removes port from whatever bridge holds it; a missing port is not
// an error.
func (v vsctl) delPort(port string) error {
	_, err := v.run("--if-exists", "del-port", port)
	return err
}

// portBridge returns the bridge holding port, or "" if there is no such
// port.
func (v vsctl) portBridge(port string) (string, error) {
	out, err := v.run("port-to-br", port)
	if err != nil {
		if ee, ok := err.(*exitError); ok && strings.Contains(ee.stderr, "no port named") {
			return "", nil
		}
		return "", err
	}
	return out, nil
}

// interfaceExternalIDs reads the external_ids of the Interface named name.
func (v vsctl) interfaceExternalIDs(name string) (map[string]string, error) {
	out, err := v.run("--format=json", "--columns=external_ids", "find", "Interface", "name="+strconv.Quote(name))
	if err != nil {
		return nil, err
	}
	return parseExternalIDsJSON(out)
}

// parseExternalIDsJSON decodes the output of
// `ovs-vsctl --format=json --columns=external_ids find Interface ...`:
// {"data":[[["map",[["k","v"],...]]]],"headings":["external_ids"]}.
func parseExternalIDsJSON(out string) (map[string]string, error) {
	var table struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &table); err != nil {
		return nil, fmt.Errorf("decode ovs-vsctl output: %w", err)
	}
	if len(table.Data) == 0 {
		return nil, nil
	}
	if len(table.Data) > 1 || len(table.Data[0]) != 1 {
		return nil, fmt.Errorf("unexpected ovs-vsctl output: %s", out)
	}
	var mapCell []json.RawMessage
	if err := json.Unmarshal(table.Data[0][0], &mapCell); err != nil || len(mapCell) != 2 {
		return nil, fmt.Errorf("unexpected external_ids cell: %s", table.Data[0][0])
	}
	var pairs [][2]string
	if err := json.Unmarshal(mapCell[1], &pairs); err != nil {
		return nil, fmt.Errorf("unexpected external_ids pairs: %s", mapCell[1])
	}
	ids := make(map[string]string, len(pairs))
	for _, p := range pairs {
		ids[p[0]] = p[1]
	}
	return ids, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
