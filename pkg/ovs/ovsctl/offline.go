package ovsctl

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// What tierflow's uninstall reads of an OVS that no longer runs: the
// interfaces its database file holds (ovsdb-tool reads the file itself)
// and the ports of the kernel datapaths (ovs-dpctl talks to the kernel
// module itself).

// Interface is a row of the Interface table: its name and OVS type ("" for
// a system device that OVS attached, "internal", "geneve", ...).
type Interface struct {
	Name string
	Type string
}

// QueryInterfacesArgs are the ovsdb-tool arguments that read every
// Interface of the database file db without a server.
func QueryInterfacesArgs(db string) []string {
	return []string{"query", db, `["Open_vSwitch",{"op":"select","table":"Interface","where":[],"columns":["name","type"]}]`}
}

// ParseQueryInterfaces reads the output of QueryInterfacesArgs.
func ParseQueryInterfaces(out string) ([]Interface, error) {
	var results []struct {
		Rows []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"rows"`
		Error   string `json:"error"`
		Details string `json:"details"`
	}
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		return nil, fmt.Errorf("ovsdb-tool query output: %w", err)
	}
	if len(results) != 1 {
		return nil, fmt.Errorf("ovsdb-tool query: %d results, want 1", len(results))
	}
	if results[0].Error != "" {
		return nil, fmt.Errorf("ovsdb-tool query: %s: %s", results[0].Error, results[0].Details)
	}
	ifaces := make([]Interface, 0, len(results[0].Rows))
	for _, r := range results[0].Rows {
		ifaces = append(ifaces, Interface{Name: r.Name, Type: r.Type})
	}
	return ifaces, nil
}

// Datapath is a kernel datapath and the names of its ports (the first is
// the datapath's own local port, named like the datapath).
type Datapath struct {
	Name  string // e.g. ovs-system
	Ports []string
}

// DpctlShowArgs are the ovs-dpctl arguments that list the kernel
// datapaths and their ports.
func DpctlShowArgs() []string { return []string{"show"} }

var (
	dpHeader = regexp.MustCompile(`^([a-z]+)@(\S+):$`)
	dpPort   = regexp.MustCompile(`^\s+port \d+: (\S+)`)
)

// ParseDpctlShow reads the output of DpctlShowArgs.
func ParseDpctlShow(out string) []Datapath {
	var dps []Datapath
	for _, line := range strings.Split(out, "\n") {
		if m := dpHeader.FindStringSubmatch(line); m != nil {
			dps = append(dps, Datapath{Name: m[2]})
			continue
		}
		if m := dpPort.FindStringSubmatch(line); m != nil && len(dps) > 0 {
			dps[len(dps)-1].Ports = append(dps[len(dps)-1].Ports, m[1])
		}
	}
	return dps
}
