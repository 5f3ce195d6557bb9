package ovsctl

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// What tierflow's uninstall reads of an OVS that no longer runs: the
// interfaces its database file holds and the underlay bridge's record
// (ovsdb-tool reads the file itself), and the ports of the kernel
// datapaths (ovs-dpctl talks to the kernel module itself).

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
	rows, err := queryRows[struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}](out)
	if err != nil {
		return nil, err
	}
	ifaces := make([]Interface, 0, len(rows))
	for _, r := range rows {
		ifaces = append(ifaces, Interface{Name: r.Name, Type: r.Type})
	}
	return ifaces, nil
}

// QueryBridgeExternalIDsArgs are the ovsdb-tool arguments that read the
// external_ids of the bridge named bridge from the database file db
// without a server.
func QueryBridgeExternalIDsArgs(db, bridge string) []string {
	where, _ := json.Marshal([][]string{{"name", "==", bridge}})
	return []string{"query", db, fmt.Sprintf(`["Open_vSwitch",{"op":"select","table":"Bridge","where":%s,"columns":["external_ids"]}]`, where)}
}

// ParseQueryBridgeExternalIDs reads the output of
// QueryBridgeExternalIDsArgs: the bridge's external_ids, nil when the
// database has no such bridge.
func ParseQueryBridgeExternalIDs(out string) (map[string]string, error) {
	rows, err := queryRows[struct {
		ExternalIDs json.RawMessage `json:"external_ids"`
	}](out)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	// An OVSDB map is ["map", [[key, value], ...]].
	var m []json.RawMessage
	var kind string
	var pairs [][2]string
	if err := json.Unmarshal(rows[0].ExternalIDs, &m); err != nil || len(m) != 2 {
		return nil, fmt.Errorf("ovsdb-tool query: external_ids %s: not an OVSDB map", rows[0].ExternalIDs)
	}
	if err := json.Unmarshal(m[0], &kind); err != nil || kind != "map" {
		return nil, fmt.Errorf("ovsdb-tool query: external_ids %s: not an OVSDB map", rows[0].ExternalIDs)
	}
	if err := json.Unmarshal(m[1], &pairs); err != nil {
		return nil, fmt.Errorf("ovsdb-tool query: external_ids %s: %w", rows[0].ExternalIDs, err)
	}
	ids := make(map[string]string, len(pairs))
	for _, p := range pairs {
		ids[p[0]] = p[1]
	}
	return ids, nil
}

// queryRows reads the rows of ovsdb-tool query's output for a single
// select.
func queryRows[Row any](out string) ([]Row, error) {
	var results []struct {
		Rows    []Row  `json:"rows"`
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
	return results[0].Rows, nil
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
