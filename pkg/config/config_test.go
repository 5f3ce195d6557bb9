package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md")

// clearEnv unsets every TIERFLOW_* and NODE_NAME variable for the test, so
// the machine's environment cannot leak into a case.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) || name == NodeNameEnv || name == PodNameEnv || name == PodIPsEnv {
			t.Setenv(name, "") // restores the old value after the test
			os.Unsetenv(name)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadController runs the controller binding as a main would: a cobra
// command parsing args.
func loadController(t *testing.T, args ...string) (*Controller, error) {
	t.Helper()
	var cfg *Controller
	var loadErr error
	cmd := &cobra.Command{Use: "tierflow-controller", SilenceUsage: true, SilenceErrors: true}
	b := BindController(cmd)
	cmd.RunE = func(*cobra.Command, []string) error {
		cfg, loadErr = b.Load()
		return nil
	}
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return cfg, loadErr
}

func loadAgent(t *testing.T, args ...string) (*Agent, error) {
	t.Helper()
	var cfg *Agent
	var loadErr error
	cmd := &cobra.Command{Use: "tierflow-agent", SilenceUsage: true, SilenceErrors: true}
	b := BindAgent(cmd)
	cmd.RunE = func(*cobra.Command, []string) error {
		cfg, loadErr = b.Load()
		return nil
	}
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return cfg, loadErr
}

func TestControllerDefaults(t *testing.T) {
	clearEnv(t)
	cfg, err := loadController(t)
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultController(); !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got %+v\nwant %+v", *cfg, want)
	}
	if !cfg.LeaderElection.Enabled || cfg.LeaderElection.LeaseNamespace != "kube-system" || cfg.AgentListenAddress != ":10349" {
		t.Errorf("unexpected defaults: %+v", *cfg)
	}
	if cfg.SlogLevel().String() != "INFO" {
		t.Errorf("log level %v", cfg.SlogLevel())
	}
}

func TestControllerIdentity(t *testing.T) {
	clearEnv(t)
	host, _ := os.Hostname()
	cfg, err := loadController(t)
	if err != nil || cfg.Identity != host {
		t.Fatalf("identity %q (%v), want the hostname %q", cfg.Identity, err, host)
	}
	t.Setenv(PodNameEnv, "tierflow-controller-abc")
	if cfg, err = loadController(t); err != nil || cfg.Identity != "tierflow-controller-abc" {
		t.Fatalf("identity %+v %v", cfg, err)
	}
	if cfg, err = loadController(t, "--id=replica-2", "--leader-elect-namespace=tierflow", "--leader-elect-name=lease"); err != nil ||
		cfg.Identity != "replica-2" || cfg.LeaderElection.LeaseNamespace != "tierflow" || cfg.LeaderElection.LeaseName != "lease" {
		t.Fatalf("flags %+v %v", cfg, err)
	}
}

// TestControllerLeaderService: the addresses come from POD_IPS (the
// Deployment's status.podIPs) unless set, and leaderService with its
// listeners on every address is accepted.
func TestControllerLeaderService(t *testing.T) {
	clearEnv(t)
	t.Setenv(PodIPsEnv, "10.0.0.5,fd00::5")
	file := writeFile(t, "leaderService: kube-system/tierflow-controller\nqueryAddress: \":10352\"\ntlsCAFile: /etc/tierflow/tls/ca.crt\n")
	cfg, err := loadController(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	ns, name := cfg.LeaderServiceName()
	if got := fmt.Sprint(cfg.Advertised()); got != "[10.0.0.5 fd00::5]" || ns != "kube-system" || name != "tierflow-controller" {
		t.Errorf("addresses %s, service %s/%s", got, ns, name)
	}
	if cfg, err = loadController(t, "--config", file, "--advertise-addresses=192.0.2.7", "--query-address=192.0.2.7:10352", "--agent-listen-address=192.0.2.7:10349"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.Advertised()); got != "[192.0.2.7]" {
		t.Errorf("addresses from the flag: %s", got)
	}
}

func TestAgentDefaults(t *testing.T) {
	clearEnv(t)
	t.Setenv(NodeNameEnv, "worker-1")
	cfg, err := loadAgent(t)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultAgent()
	if want.NodeName != "worker-1" || !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got %+v\nwant %+v", *cfg, want)
	}
	if got := cfg.OpenFlowSocketPath(); got != "/run/openvswitch/br-int.mgmt" {
		t.Errorf("OpenFlowSocketPath = %q", got)
	}
	if got := cfg.OVSDBSocketPath(); got != "/run/openvswitch/db.sock" {
		t.Errorf("OVSDBSocketPath = %q", got)
	}
}

func TestAgentWithoutNodeNameIsRejected(t *testing.T) {
	clearEnv(t)
	_, err := loadAgent(t)
	if err == nil || !strings.Contains(err.Error(), "nodeName") || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Fatalf("want a nodeName error naming NODE_NAME, got %v", err)
	}
}

// TestPrecedence sets one key of every value type in every layer and peels
// the layers off one by one: flags > env > file > defaults.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, `
logLevel: warn
agentListenAddress: "10.0.0.1:1000"
leaderElection:
  enabled: false
  leaseDuration: 30s
`)
	type want struct {
		logLevel string
		listen   string
		enabled  bool
		lease    time.Duration
	}
	flags := []string{"--config", file, "--log-level=error", "--agent-listen-address=:3000", "--leader-elect=true", "--leader-elect-lease-duration=50s"}
	env := map[string]string{
		"TIERFLOW_LOG_LEVEL":                      "debug",
		"TIERFLOW_AGENT_LISTEN_ADDRESS":           ":2000",
		"TIERFLOW_LEADER_ELECTION_ENABLED":        "true",
		"TIERFLOW_LEADER_ELECTION_LEASE_DURATION": "40s",
	}
	for _, tc := range []struct {
		name  string
		args  []string
		env   bool
		noFil bool
		want  want
	}{
		{"flags win", flags, true, false, want{"error", ":3000", true, 50 * time.Second}},
		{"env over file", flags[:2], true, false, want{"debug", ":2000", true, 40 * time.Second}},
		{"file over defaults", flags[:2], false, false, want{"warn", "10.0.0.1:1000", false, 30 * time.Second}},
		{"defaults", nil, false, true, want{"info", ":10349", true, 15 * time.Second}},
		{"flags over defaults without file or env", flags[2:], false, true, want{"error", ":3000", true, 50 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			if tc.env {
				for k, v := range env {
					t.Setenv(k, v)
				}
			}
			cfg, err := loadController(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			got := want{cfg.LogLevel, cfg.AgentListenAddress, cfg.LeaderElection.Enabled, cfg.LeaderElection.LeaseDuration}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			// Keys no layer set keep their defaults.
			if cfg.LeaderElection.LeaseName != "tierflow-controller" || cfg.MetricsAddress != ":10350" {
				t.Errorf("untouched keys changed: %+v", *cfg)
			}
		})
	}
}

func TestAgentLayers(t *testing.T) {
	clearEnv(t)
	t.Setenv(NodeNameEnv, "from-downward-api")
	file := writeFile(t, `
nodeName: from-file
datapathType: netdev
cni:
  mtu: 1450
  confDir: /host/etc/cni/net.d
`)
	cfg, err := loadAgent(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "from-file" || cfg.DatapathType != DatapathNetdev || cfg.CNI.MTU != 1450 || cfg.CNI.ConfDir != "/host/etc/cni/net.d" || cfg.CNI.BinDir != "/opt/cni/bin" {
		t.Errorf("file layer: %+v", *cfg)
	}
	t.Setenv("TIERFLOW_NODE_NAME", "from-env")
	t.Setenv("TIERFLOW_CNI_MTU", "1400")
	cfg, err = loadAgent(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "from-env" || cfg.CNI.MTU != 1400 {
		t.Errorf("env layer: %+v", *cfg)
	}
	cfg, err = loadAgent(t, "--config", file, "--node-name=from-flag", "--cni-mtu=9000", "--openflow-socket=unix:/tmp/of.sock")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "from-flag" || cfg.CNI.MTU != 9000 || cfg.OpenFlowSocketPath() != "/tmp/of.sock" {
		t.Errorf("flag layer: %+v", *cfg)
	}
}

func TestEmptyFileAndNullValues(t *testing.T) {
	clearEnv(t)
	for _, content := range []string{"", "# nothing\n", "kubeconfig:\nleaderElection:\n"} {
		cfg, err := loadController(t, "--config", writeFile(t, content))
		if err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		if !reflect.DeepEqual(*cfg, DefaultController()) {
			t.Errorf("%q: got %+v", content, *cfg)
		}
	}
}

// TestRejections: every bad input stops loading with one line naming the
// key, the value, its source and what is accepted.
func TestRejections(t *testing.T) {
	for _, tc := range []struct {
		name  string
		agent bool
		file  string
		env   map[string]string
		args  []string
		want  []string // substrings of the error
	}{
		{name: "unknown key", file: "logLevel: info\nlogLvl: debug\n", want: []string{"unknown key logLvl"}},
		{name: "unknown nested key", file: "leaderElection:\n  leaseNamespce: x\n", want: []string{"unknown key leaderElection.leaseNamespce"}},
		{name: "key case matters", file: "LogLevel: debug\n", want: []string{"unknown key LogLevel"}},
		{name: "section as scalar", file: "leaderElection: true\n", want: []string{"leaderElection", "must be a mapping"}},
		{name: "list value", file: "logLevel: [info]\n", want: []string{"logLevel", "not a list"}},
		{name: "not a mapping", file: "- a\n- b\n", want: []string{"must hold a YAML mapping"}},
		{name: "bad yaml", file: "logLevel: [\n", want: []string{"not valid YAML"}},
		{name: "bad log level in file", file: "logLevel: verbose\n", want: []string{`invalid logLevel "verbose"`, "from key logLevel in", "debug, info, warn, error"}},
		{name: "bad log level in env", env: map[string]string{"TIERFLOW_LOG_LEVEL": "loud"}, want: []string{`invalid logLevel "loud"`, "from env TIERFLOW_LOG_LEVEL"}},
		{name: "bad log level flag", args: []string{"--log-level=trace"}, want: []string{`"trace"`, "from flag --log-level"}},
		{name: "negative duration", file: "leaderElection:\n  retryPeriod: -2s\n", want: []string{"invalid leaderElection.retryPeriod -2s", "must be positive"}},
		{name: "service account without namespace", args: []string{"--agent-service-account=tierflow-agent"}, want: []string{"agentServiceAccount", "NAMESPACE/NAME"}},
		{name: "zero workers", args: []string{"--workers=0"}, want: []string{"invalid workers 0", "1..64"}},
		{name: "negative crd poll", env: map[string]string{"TIERFLOW_CRD_POLL_INTERVAL": "-5s"}, want: []string{"crdPollInterval -5s", "positive"}},
		{name: "negative duration flag", args: []string{"--leader-elect-lease-duration=-1s"}, want: []string{"leaderElection.leaseDuration -1s", "from flag"}},
		{name: "duration without unit", file: "leaderElection:\n  leaseDuration: 15\n", want: []string{"leaderElection.leaseDuration 15", "with a unit"}},
		{name: "duration garbage env", env: map[string]string{"TIERFLOW_LEADER_ELECTION_RENEW_DEADLINE": "soon"}, want: []string{`"soon"`, "from env TIERFLOW_LEADER_ELECTION_RENEW_DEADLINE", "with a unit"}},
		{name: "lease shorter than renew", file: "leaderElection:\n  leaseDuration: 5s\n", want: []string{"leaderElection.leaseDuration 5s", "longer than leaderElection.renewDeadline"}},
		{name: "bool garbage", env: map[string]string{"TIERFLOW_LEADER_ELECTION_ENABLED": "maybe"}, want: []string{"leaderElection.enabled", "true or false"}},
		{name: "string as number", file: "agentListenAddress: 10349\n", want: []string{"agentListenAddress", "quote it"}},
		{name: "address without port", file: "agentListenAddress: 0.0.0.0\n", want: []string{`invalid agentListenAddress "0.0.0.0"`, "host:port"}},
		{name: "address port out of range", args: []string{"--metrics-address=:70000"}, want: []string{"metricsAddress", "0..65535"}},
		{name: "address bad host", args: []string{"--query-address=bad_host!:80"}, want: []string{"queryAddress", "IP address or a DNS name"}},
		{name: "empty listen address", args: []string{"--agent-listen-address="}, want: []string{"agentListenAddress", "must not be empty"}},
		{name: "bad lease name", file: "leaderElection:\n  leaseName: Not_A_Name\n", want: []string{"leaderElection.leaseName", "valid Kubernetes name"}},
		{name: "missing tls key", args: []string{"--tls-key-file="}, want: []string{"tlsKeyFile", "must not be empty"}},
		{name: "bad advertise address", args: []string{"--advertise-addresses=10.0.0.5,nope"}, want: []string{"advertiseAddresses", "IP addresses", "from flag --advertise-addresses"}},
		{name: "loopback advertise address", args: []string{"--advertise-addresses=127.0.0.1"}, want: []string{"advertiseAddresses", "loopback"}},
		{name: "two addresses of a family", env: map[string]string{PodIPsEnv: "10.0.0.5,10.0.0.6"}, want: []string{"advertiseAddresses", "one address per IP family", "from env POD_IPS"}},
		{name: "leader service without addresses", args: []string{"--leader-service=kube-system/tierflow-controller"}, want: []string{"advertiseAddresses", "POD_IPS"}},
		{name: "leader service without namespace", args: []string{"--leader-service=tierflow-controller"}, want: []string{"leaderService", "NAMESPACE/NAME"}},
		{name: "query API on loopback with leader service", env: map[string]string{PodIPsEnv: "10.0.0.5"}, args: []string{"--leader-service=kube-system/tierflow-controller", "--tls-ca-file=/ca.crt"},
			want: []string{`invalid queryAddress "127.0.0.1:10352"`, "must listen on advertiseAddresses"}},
		{name: "IPv4-only listener with an IPv6 address", env: map[string]string{PodIPsEnv: "10.0.0.5,fd00::5"}, args: []string{"--leader-service=kube-system/tierflow-controller", "--tls-ca-file=/ca.crt", "--query-address=0.0.0.0:10352"},
			want: []string{"queryAddress", "must listen on advertiseAddresses"}},
		{name: "leader service without CA", env: map[string]string{PodIPsEnv: "10.0.0.5"}, args: []string{"--leader-service=kube-system/tierflow-controller", "--query-address=:10352"}, want: []string{"tlsCAFile", "must not be empty"}},

		{name: "bad datapath", agent: true, file: "datapathType: dpdk\n", want: []string{`invalid datapathType "dpdk"`, `"system" or "netdev"`}},
		{name: "bad datapath env", agent: true, env: map[string]string{"TIERFLOW_DATAPATH_TYPE": "kernel"}, want: []string{`"kernel"`, "from env TIERFLOW_DATAPATH_TYPE"}},
		{name: "controller address without host", agent: true, args: []string{"--controller-address=:10349"}, want: []string{"controllerAddress", "with a host"}},
		{name: "controller address port 0", agent: true, args: []string{"--controller-address=ctl:0"}, want: []string{"controllerAddress", "1..65535"}},
		{name: "unexpanded service env", agent: true, env: map[string]string{"TIERFLOW_CONTROLLER_ADDRESS": "$(TIERFLOW_CONTROLLER_SERVICE_HOST):$(TIERFLOW_CONTROLLER_SERVICE_PORT)"}, want: []string{"controllerAddress", "from env TIERFLOW_CONTROLLER_ADDRESS"}},
		{name: "bad server name", agent: true, args: []string{"--controller-server-name=10.96.0.10:443"}, want: []string{"controllerServerName", "DNS name"}},
		{name: "long bridge name", agent: true, args: []string{"--bridge-name=a-very-long-bridge"}, want: []string{"bridgeName", "1 to 15"}},
		{name: "relative state dir", agent: true, file: "stateDir: var/lib/tierflow\n", want: []string{"stateDir", "absolute"}},
		{name: "bad mtu", agent: true, file: "cni:\n  mtu: 40\n", want: []string{"cni.mtu 40", "68..65535"}},
		{name: "fractional mtu", agent: true, file: "cni:\n  mtu: 1450.5\n", want: []string{"cni.mtu", "integer"}},
		{name: "unknown cni key", agent: true, file: "cni:\n  binDirectory: /opt\n", want: []string{"unknown key cni.binDirectory"}},
		{name: "bad node name", agent: true, env: map[string]string{"TIERFLOW_NODE_NAME": "Node_1"}, want: []string{"nodeName", "valid Kubernetes name"}},
		{name: "bad node network mode", agent: true, file: "nodeNetwork:\n  mode: overlay\n", want: []string{`invalid nodeNetwork.mode "overlay"`, `"uplink", "noEncap" or "encap"`}},
		{name: "unknown tunnel type", agent: true, file: "nodeNetwork:\n  mode: encap\n  tunnelType: gre\n", want: []string{`invalid nodeNetwork.tunnelType "gre"`, `"geneve" or "vxlan"`}},
		{name: "underlay bridge named like the gateway", agent: true, args: []string{"--underlay-bridge=tierflow-gw0"}, want: []string{"nodeNetwork.underlayBridge", "differ from bridgeName and nodeNetwork.gatewayName"}},
		{name: "encap pod MTU too small", agent: true, file: "nodeNetwork:\n  mode: encap\ncni:\n  mtu: 500\n", want: []string{"invalid cni.mtu 500", "below 576"}},
		{name: "bad gateway name", agent: true, args: []string{"--gateway-name=gw/0"}, want: []string{"nodeNetwork.gatewayName", "from flag --gateway-name"}},
		{name: "gateway named like the bridge", agent: true, env: map[string]string{"TIERFLOW_NODE_NETWORK_GATEWAY_NAME": "br-int"}, want: []string{"nodeNetwork.gatewayName", "differ from bridgeName"}},
		{name: "controller key in agent file", agent: true, file: "leaderElection:\n  enabled: true\n", want: []string{"unknown key leaderElection"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(NodeNameEnv, "node-1")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			var err error
			if tc.agent {
				_, err = loadAgent(t, args...)
			} else {
				_, err = loadController(t, args...)
			}
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			if !strings.HasPrefix(msg, "config: ") {
				t.Errorf("error does not start with config: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestMissingFile(t *testing.T) {
	clearEnv(t)
	_, err := loadController(t, "--config", "/nonexistent/tierflow.yaml")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/tierflow.yaml") {
		t.Fatalf("got %v", err)
	}
}

func TestHelpPrintsDefaultsAndSources(t *testing.T) {
	clearEnv(t)
	cmd := &cobra.Command{Use: "tierflow-agent", Run: func(*cobra.Command, []string) {}}
	BindAgent(cmd)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, w := range []string{
		"--datapath-type string", `(default "system")`, "env TIERFLOW_DATAPATH_TYPE", "file key datapathType",
		"--cni-conf-dir string", `(default "/etc/cni/net.d")`, "file key cni.confDir", "env TIERFLOW_CNI_CONF_DIR",
		"--controller-ca-file", "TIERFLOW_CONTROLLER_CA_FILE", "--config string",
	} {
		if !strings.Contains(help, w) {
			t.Errorf("--help lacks %q:\n%s", w, help)
		}
	}
	cmd = &cobra.Command{Use: "tierflow-controller", Run: func(*cobra.Command, []string) {}}
	BindController(cmd)
	out.Reset()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"--leader-elect ", "(default true)", "--leader-elect-lease-duration duration", "(default 15s)", "TIERFLOW_LEADER_ELECTION_LEASE_NAMESPACE", "--leader-elect-namespace string", "--leader-elect-name string", "--id string", "--workers int", "(default 2)"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--help lacks %q:\n%s", w, out.String())
		}
	}
}

func TestEnvNames(t *testing.T) {
	for key, want := range map[string]string{
		"logLevel":                     "TIERFLOW_LOG_LEVEL",
		"leaderElection.leaseName":     "TIERFLOW_LEADER_ELECTION_LEASE_NAME",
		"controllerCAFile":             "TIERFLOW_CONTROLLER_CA_FILE",
		"tlsCertFile":                  "TIERFLOW_TLS_CERT_FILE",
		"ovsdbSocket":                  "TIERFLOW_OVSDB_SOCKET",
		"cni.mtu":                      "TIERFLOW_CNI_MTU",
		"leaderElection.renewDeadline": "TIERFLOW_LEADER_ELECTION_RENEW_DEADLINE",
	} {
		if got := envName(key); got != want {
			t.Errorf("envName(%q) = %q, want %q", key, got, want)
		}
	}
	// No key's variable looks like one the kubelet generates for a Service
	// whose name starts with "tierflow-" (tierflow-controller: the agent
	// pod gets TIERFLOW_CONTROLLER_SERVICE_HOST, ..._PORT_10349_TCP, ...),
	// or the Service would set it.
	serviceLink := regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$`)
	for _, d := range []any{DefaultController(), DefaultAgent()} {
		for _, o := range optionsOf(reflect.TypeOf(d)) {
			if serviceLink.MatchString(o.env) {
				t.Errorf("%s: %s could be set by a Service's environment variables", o.key, o.env)
			}
		}
	}
	// Every key has a distinct variable and flag.
	for _, d := range []any{DefaultController(), DefaultAgent()} {
		seen := map[string]bool{}
		for _, o := range optionsOf(reflect.TypeOf(d)) {
			if seen[o.env] || seen["--"+o.flag] {
				t.Errorf("duplicate env or flag for %s", o.key)
			}
			seen[o.env], seen["--"+o.flag] = true, true
		}
	}
}

func TestReferenceDocUpToDate(t *testing.T) {
	clearEnv(t)
	got := ReferenceDoc()
	path := filepath.Join("docs", "configuration.md")
	if *update {
		if err := os.MkdirAll("docs", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/config -run TestReferenceDocUpToDate -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s is out of date: run go test ./pkg/config -run TestReferenceDocUpToDate -update", path)
	}
}
