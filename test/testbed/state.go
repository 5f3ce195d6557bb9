package testbed

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// State describes a running test bed in DIR/state.json: what
// `tierflow-testbed down` needs to stop it and what an operator (or a
// tool such as make conformance) needs to use it. `tierflow-testbed up`
// and `make demo` write it.
type State struct {
	// PID is the process that holds the test bed up; SIGTERM stops it.
	PID        int    `json:"pid"`
	Kubeconfig string `json:"kubeconfig"`
	Kubectl    string `json:"kubectl"`
	// OVSDBSocket, OVSDir and Fabric: the uplink bed's one OVS and fabric
	// bridge (empty on the encap bed: see NodeState).
	OVSDBSocket string `json:"ovsdbSocket,omitempty"`
	OVSDir      string `json:"ovsDir,omitempty"`
	Fabric      string `json:"fabricBridge,omitempty"`
	NodeIface   string `json:"nodeInterface"`
	// Router is the encap bed's router namespace.
	Router string      `json:"router,omitempty"`
	Nodes  []NodeState `json:"nodes"`
	// Tierflow is set when the controller and agents run on the bed.
	Tierflow *TierflowState `json:"tierflow,omitempty"`
}

// NodeState describes one node: what an agent for it needs.
type NodeState struct {
	Name       string   `json:"name"`
	IP         string   `json:"ip"`
	Bridge     string   `json:"bridge"`
	UplinkPort string   `json:"uplinkPort"`
	PodCIDRs   []string `json:"podCIDRs"`
	CNIConfig  string   `json:"cniConfig"`
	// Netns, OVSDBSocket and OVSDir: the encap bed node's own namespace
	// and OVS.
	Netns       string `json:"netns,omitempty"`
	OVSDBSocket string `json:"ovsdbSocket,omitempty"`
	OVSDir      string `json:"ovsDir,omitempty"`
}

// TierflowState is where tierflow's parts listen on a running bed.
type TierflowState struct {
	// QueryAddress is the controller's query API (HTTPS, CAFile).
	QueryAddress string `json:"queryAddress"`
	CAFile       string `json:"caFile"`
	// BinDir holds tierflow-controller, tierflow-agent and tierctl.
	BinDir string `json:"binDir"`
	// AgentSockets maps a node name to its agent's query socket.
	AgentSockets map[string]string `json:"agentSockets"`
	// EnvFile is a shell file to source: KUBECONFIG, PATH, TIERCTL_*.
	EnvFile string `json:"envFile,omitempty"`
}

// StatePath is DIR/state.json.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

// State returns the description of t for a bed held up by process pid
// (Tierflow left unset).
func (t *Testbed) State(pid int) State {
	st := State{
		PID: pid, Kubeconfig: t.Cluster.Kubeconfig, Kubectl: filepath.Join(t.Cluster.BinDir, "kubectl"),
		NodeIface: t.NodeInterface, Router: t.Router,
	}
	if t.OVS != nil {
		st.OVSDBSocket, st.OVSDir, st.Fabric = t.OVS.DBSocketPath(), t.OVS.Dir, t.Fabric.Name
	}
	for _, n := range t.Nodes {
		ns := NodeState{Name: n.Name, IP: n.IP, Bridge: n.Bridge.Name, UplinkPort: n.UplinkPort, PodCIDRs: n.PodCIDRs, CNIConfig: n.CNIConfig}
		if t.Encap {
			ns.Netns, ns.OVSDBSocket, ns.OVSDir = n.OVS.Netns(), n.OVS.DBSocketPath(), n.OVS.Dir
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st
}

// WriteState copies the bed's kubeconfig to DIR/kubeconfig (the fixed
// path other tools use) and then writes DIR/state.json atomically, so a
// reader that finds state.json finds a usable bed.
func WriteState(dir string, st State) error {
	kc, err := os.ReadFile(st.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kc, 0o600); err != nil {
		return err
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := StatePath(dir) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, StatePath(dir))
}

// ReadState reads DIR/state.json.
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(StatePath(dir))
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("%s: %w", StatePath(dir), err)
	}
	return st, nil
}
