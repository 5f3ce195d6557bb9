package manifests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tierflow/tierflow/pkg/config"
)

// TestCombinedFileUpToDate: tierflow.yaml and tierflow-cleanup.yaml are
// what their parts render to, both through Render and RenderCleanup and
// through `make manifests` with the Makefile's default variables (which
// writes the cleanup manifest next to MANIFESTS_OUT).
func TestCombinedFileUpToDate(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "manifests", "MANIFESTS_OUT="+filepath.Join(dir, "tierflow.yaml"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make manifests: %v\n%s", err, b)
	}
	for file, render := range map[string]func(Values) ([]byte, error){"tierflow.yaml": Render, "tierflow-cleanup.yaml": RenderCleanup} {
		committed, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rendered, err := render(DefaultValues())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(committed, rendered) {
			t.Errorf("manifests/%s is out of date with its parts: run make manifests", file)
		}
		viaMake, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || !bytes.Equal(viaMake, committed) {
			t.Errorf("make manifests with default variables does not reproduce manifests/%s (%v): the Makefile's defaults and DefaultValues differ", file, err)
		}
	}
}

// TestRenderedConfigurationIsAccepted: the configuration each container
// loads (ConfigMap file, environment, arguments) passes pkg/config, and
// carries the values the manifest was rendered with.
func TestRenderedConfigurationIsAccepted(t *testing.T) {
	committed, err := os.ReadFile("tierflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked, err := Check(committed)
	if err != nil {
		t.Fatal(err)
	}
	ctl, agent := checked.Controller, checked.Agent
	if !ctl.LeaderElection.Enabled || ctl.LeaderElection.LeaseName != "tierflow-controller" || ctl.AgentTokenAudience != "tierflow" {
		t.Errorf("controller configuration %+v", ctl)
	}
	// Both replicas are reachable by the other (forwarding) and the leader
	// points the Service at its pod IPs.
	if ctl.QueryAddress != ":10352" || ctl.LeaderService != "kube-system/tierflow-controller" || ctl.AdvertiseAddresses != checkPodIPs || ctl.TLSCAFile != "/etc/tierflow/tls/ca.crt" {
		t.Errorf("controller configuration %+v", ctl)
	}
	if agent.NodeName != checkNodeName || agent.DatapathType != config.DatapathSystem || agent.ControllerAddress != checkClusterIP+":10349" || agent.StateDir != "/var/lib/tierflow/agent" {
		t.Errorf("agent configuration %+v", agent)
	}
	// CRDs, RBAC (with the tierflow-query ClusterRole, bound to the
	// controller only, and the unbound tierflow-metrics-reader),
	// ConfigMap, controller Service and Deployment, agent DaemonSet.
	if len(checked.Objects) != 3+13+1+2+1 {
		t.Errorf("%d objects", len(checked.Objects))
	}

	v := DefaultValues()
	v.DatapathType, v.LogLevel, v.AgentMetricsPort, v.ControllerMetricsPort, v.PodMTU = config.DatapathNetdev, "debug", 20351, 20350, 1450
	v.ControllerImage, v.AgentImage = "registry.example.com:5000/tf/controller:v1.2.3", "registry.example.com/tf/agent@sha256:"+strings.Repeat("ab", 32)
	v.ControllerMemoryRequest, v.ControllerMemoryLimit = "512Mi", "1Gi"
	rendered, err := Render(v)
	if err != nil {
		t.Fatal(err)
	}
	checked, err = Check(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if a := checked.Agent; a.DatapathType != "netdev" || a.LogLevel != "debug" || a.MetricsAddress != ":20351" || a.CNI.MTU != 1450 {
		t.Errorf("agent configuration %+v", a)
	}
	if c := checked.Controller; c.LogLevel != "debug" || c.MetricsAddress != ":20350" {
		t.Errorf("controller configuration %+v", c)
	}
	for _, want := range []string{"image: registry.example.com:5000/tf/controller:v1.2.3", "image: " + v.AgentImage, "containerPort: 20351",
		"memory: 512Mi", "memory: 1Gi", `value: "921MiB"`} {
		if !strings.Contains(string(rendered), want) {
			t.Errorf("rendered manifest lacks %q", want)
		}
	}
}

func TestRenderRejectsBadValues(t *testing.T) {
	for name, mutate := range map[string]func(*Values){
		"datapath":    func(v *Values) { v.DatapathType = "dpdk" },
		"log level":   func(v *Values) { v.LogLevel = "verbose" },
		"image":       func(v *Values) { v.AgentImage = "agent image" },
		"empty image": func(v *Values) { v.ControllerImage = "" },
		"pull policy": func(v *Values) { v.ImagePullPolicy = "Sometimes" },
		"port":        func(v *Values) { v.AgentMetricsPort = 70000 },
		"same ports":  func(v *Values) { v.AgentMetricsPort = v.ControllerMetricsPort },
		"mtu":         func(v *Values) { v.PodMTU = 20 },
		"memory":      func(v *Values) { v.ControllerMemoryLimit = "3 gigs" },
		"request":     func(v *Values) { v.ControllerMemoryRequest = "4Gi" },
		"tiny limit":  func(v *Values) { v.ControllerMemoryRequest, v.ControllerMemoryLimit = "64Mi", "128Mi" },
	} {
		v := DefaultValues()
		mutate(&v)
		if _, err := Render(v); err == nil {
			t.Errorf("%s: accepted %+v", name, v)
		}
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "manifests", "MANIFESTS_OUT="+filepath.Join(t.TempDir(), "x.yaml"), "DATAPATH_TYPE=kernel")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `datapath type "kernel"`) {
		t.Errorf("make manifests DATAPATH_TYPE=kernel: %v\n%s", err, out)
	}
}

// TestCheckCatchesBrokenManifests: edits an operator could make by hand
// that would only fail in the cluster are caught by Check.
func TestCheckCatchesBrokenManifests(t *testing.T) {
	good, err := os.ReadFile("tierflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown config key", "    bridgeName: br-int\n", "    bridgeName: br-int\n    bridge: br-int\n", "unknown key bridge"},
		{"bad datapath in ConfigMap", "datapathType: system", "datapathType: kernel", `invalid datapathType "kernel"`},
		{"token audience", "audience: tierflow", "audience: kubernetes", "audience"},
		{"unmounted state dir", "stateDir: /var/lib/tierflow/agent", "stateDir: /var/lib/other", "stateDir"},
		{"unknown flag", "- --config=/etc/tierflow/config/controller.yaml", "- --config=/etc/tierflow/config/controller.yaml\n            - --leader-elect-lease=x", "unknown flag"},
		{"agent service account", "agentServiceAccount: kube-system/tierflow-agent", "agentServiceAccount: kube-system/default", "kube-system/default"},
		{"lease name", "resourceNames: [tierflow-controller]", "resourceNames: [other]", "Lease tierflow-controller"},
		{"no service env", "$(TIERFLOW_CONTROLLER_SERVICE_HOST)", "$(CONTROLLER_HOST)", "controllerAddress"},
		{"socket dir", "mountPath: /run/openvswitch", "mountPath: /var/run/ovs", "OVSDB socket directory"},
		{"metrics port", "containerPort: 10351", "containerPort: 10999", "metricsAddress"},
		{"Service with a selector", "  type: ClusterIP\n", "  type: ClusterIP\n  selector:\n    app.kubernetes.io/component: controller\n", "must have no selector"},
		{"Service port name", "    - name: agents\n      port: 10349", "    - name: grpc\n      port: 10349", `first port must be named "agents"`},
		{"query API on loopback", `queryAddress: ":10352"`, `queryAddress: "127.0.0.1:10352"`, "must listen on advertiseAddresses"},
		{"query port", "containerPort: 10352", "containerPort: 10353", "queryAddress"},
		{"no pod IPs", "- name: POD_IPS", "- name: POD_IP", "advertiseAddresses"},
		{"slice names", "resourceNames: [tierflow-controller-ipv4, tierflow-controller-ipv6]", "resourceNames: [tierflow-controller-ipv4]", `update endpointslices "tierflow-controller-ipv6"`},
		{"tierctl server name", "value: tierflow-controller.kube-system.svc", "value: tierflow-controller", "TIERCTL_CONTROLLER_SERVER_NAME"},
		{"tierctl not bound", "  name: tierflow-query\nsubjects:", "  name: tierflow-agent\nsubjects:", "may not get queries.tierflow.io"},
		{"missing ServiceAccount", "  name: tierflow-agent\n  namespace: kube-system\n  labels:\n    app.kubernetes.io/name: tierflow\n    app.kubernetes.io/component: agent\n---", "  name: tierflow-agent-x\n  namespace: kube-system\n  labels:\n    app.kubernetes.io/name: tierflow\n    app.kubernetes.io/component: agent\n---", "ServiceAccount kube-system/tierflow-agent is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(good), tc.old, tc.new, 1)
			if bad == string(good) {
				t.Fatalf("%q not found in tierflow.yaml", tc.old)
			}
			_, err := Check([]byte(bad))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestCreateTLSSecretScriptSyntax keeps the script parseable; its run
// against a real API server is in TestApplyToRealAPIServer.
func TestCreateTLSSecretScriptSyntax(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "create-tls-secret.sh").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestImagesProvideTheCommands: every command a container of the manifest
// runs is in the image the Dockerfile builds — a program built from
// ./cmd/NAME onto the PATH, or a file copied to that absolute path.
func TestImagesProvideTheCommands(t *testing.T) {
	data, err := os.ReadFile("tierflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked, err := Check(data)
	if err != nil {
		t.Fatal(err)
	}
	dockerfiles := map[string]string{
		DefaultValues().ControllerImage: "../build/controller/Dockerfile",
		DefaultValues().AgentImage:      "../build/agent/Dockerfile",
	}
	seen := 0
	for _, obj := range checked.Objects {
		containers := unstructuredContainers(obj)
		for _, c := range containers {
			path, ok := dockerfiles[c.image]
			if !ok {
				t.Errorf("%s container %s: image %s has no Dockerfile", obj.GetName(), c.name, c.image)
				continue
			}
			df, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.command) == 0 {
				t.Errorf("%s container %s: no command (the image's entry point is not relied on)", obj.GetName(), c.name)
				continue
			}
			cmd := c.command[0]
			if strings.HasPrefix(cmd, "/") {
				if !strings.Contains(string(df), " "+cmd+"\n") {
					t.Errorf("%s container %s runs %s, which %s does not copy", obj.GetName(), c.name, cmd, path)
				}
			} else if !strings.Contains(string(df), "./cmd/"+cmd+" ") && !strings.Contains(string(df), "./cmd/"+cmd+"\n") {
				t.Errorf("%s container %s runs %s, which %s does not build", obj.GetName(), c.name, cmd, path)
			}
			seen++
		}
	}
	if seen != 4 {
		t.Errorf("checked %d containers, want 4 (controller, install-cni, ovs, agent)", seen)
	}
	// tierflow-install-cni's default --source-dir is where the agent
	// image puts the plugins.
	df, _ := os.ReadFile("../build/agent/Dockerfile")
	if !strings.Contains(string(df), "/usr/local/lib/tierflow/cni/") {
		t.Error("the agent image does not put the CNI plugins in /usr/local/lib/tierflow/cni")
	}
}

type containerInfo struct {
	name, image string
	command     []string
}

func unstructuredContainers(obj *unstructured.Unstructured) []containerInfo {
	var out []containerInfo
	for _, field := range []string{"initContainers", "containers"} {
		list, found, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", field)
		if err != nil || !found {
			continue
		}
		for _, item := range list {
			m, _ := item.(map[string]any)
			name, _, _ := unstructured.NestedString(m, "name")
			image, _, _ := unstructured.NestedString(m, "image")
			command, _, _ := unstructured.NestedStringSlice(m, "command")
			out = append(out, containerInfo{name, image, command})
		}
	}
	return out
}
