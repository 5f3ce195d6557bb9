package manifests

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestCleanupConfiguration: the cleanup reads the very agent.yaml the
// release manifest installs (for any values), runs a command the agent
// image builds, and finds what it removes on the host.
func TestCleanupConfiguration(t *testing.T) {
	for _, v := range []Values{DefaultValues(), func() Values {
		v := DefaultValues()
		v.DatapathType, v.AgentImage, v.PodMTU = "netdev", "registry.example/tierflow-agent:v1", 1400
		return v
	}()} {
		release, err := Render(v)
		if err != nil {
			t.Fatal(err)
		}
		checked, err := Check(release)
		if err != nil {
			t.Fatal(err)
		}
		cleanup, err := RenderCleanup(v)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := CheckCleanup(cleanup)
		if err != nil {
			t.Fatal(err)
		}
		releaseCM, cleanupCM := configMap(t, checked.Objects, ConfigMapName), configMap(t, cc.Objects, CleanupConfigMapName)
		if releaseCM.Data[AgentKey] == "" || releaseCM.Data[AgentKey] != cleanupCM.Data[AgentKey] {
			t.Errorf("the cleanup's agent.yaml differs from the release's:\n%s\n---\n%s", cleanupCM.Data[AgentKey], releaseCM.Data[AgentKey])
		}
		a, want := cc.Agent, checked.Agent
		if a.BridgeName != want.BridgeName || a.NodeNetwork.GatewayName != want.NodeNetwork.GatewayName || a.CNI != want.CNI {
			t.Errorf("cleanup configuration %+v, release %+v", a, want)
		}
		if a.OVSDBSocketPath() != "/host"+want.OVSDBSocketPath() || cc.Flags.OVSDatabase != "/host/var/lib/tierflow/ovs/conf.db" {
			t.Errorf("the cleanup looks for OVS at %s and %s", a.OVSDBSocketPath(), cc.Flags.OVSDatabase)
		}
		if strings.Join(cc.Flags.Remove, " ") != "/host/var/lib/tierflow /host/var/log/tierflow /host/run/openvswitch" {
			t.Errorf("the cleanup removes %v", cc.Flags.Remove)
		}
		images := 0
		for _, o := range cc.Objects {
			for _, c := range unstructuredContainers(o) {
				images++
				if c.image != v.AgentImage {
					t.Errorf("container %s runs %s, want the agent image %s", c.name, c.image, v.AgentImage)
				}
			}
		}
		if images != 2 {
			t.Errorf("%d containers, want 2 (cleanup, done)", images)
		}
	}
	df, err := os.ReadFile("../build/agent/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "./cmd/tierflow-agent ") || !strings.Contains(string(df), "openvswitch-switch") {
		t.Error("the agent image lacks tierflow-agent or the OVS tools (ovsdb-tool, ovs-dpctl) the cleanup runs")
	}
}

func configMap(t *testing.T, objs []*unstructured.Unstructured, name string) *corev1.ConfigMap {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == name {
			var cm corev1.ConfigMap
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm); err != nil {
				t.Fatal(err)
			}
			return &cm
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}

func TestCheckCleanupCatchesBrokenManifests(t *testing.T) {
	good, err := RenderCleanup(DefaultValues())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown flag", "- --remove=/host/var/log/tierflow", "- --purge=/host/var/log/tierflow", "unknown flag"},
		{"CNI directory elsewhere", "mountPath: /etc/cni/net.d", "mountPath: /host/etc/cni/net.d", "CNI directory"},
		{"removal not on the host", "- --remove=/host/run/openvswitch", "- --remove=/run/openvswitch", "/run/openvswitch is not on a volume"},
		{"no node name", "fieldPath: spec.nodeName", "fieldPath: metadata.name", "nodeName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(good), tc.old, tc.new, 1)
			if bad == string(good) {
				t.Fatalf("%q not found", tc.old)
			}
			_, err := CheckCleanup([]byte(bad))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
