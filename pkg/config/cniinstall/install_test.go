package cniinstall

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/pkg/config"
)

func testAgent(t *testing.T) *config.Agent {
	a := config.DefaultAgent()
	a.NodeName = "node-1"
	a.CNI.ConfDir = filepath.Join(t.TempDir(), "net.d")
	a.CNI.BinDir = filepath.Join(t.TempDir(), "bin")
	return &a
}

// TestConflistIsAcceptedByThePlugin parses the rendered list the way the
// runtime does (libcni) and each plugin configuration the way tierflow-cni
// does, so the installed file is one the plugin accepts.
func TestConflistIsAcceptedByThePlugin(t *testing.T) {
	a := testAgent(t)
	a.CNI.MTU = 1450
	a.OVSDBSocket = "unix:/var/run/openvswitch/db.sock"
	data, err := Conflist(a, []string{"10.244.1.0/24", "fd00:10:244:1::/64"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		t.Fatalf("libcni rejects the list: %v\n%s", err, data)
	}
	if list.Name != NetworkName || list.CNIVersion != CNIVersion || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != PluginName {
		t.Fatalf("unexpected list %+v", list)
	}
	// libcni adds name and cniVersion to each plugin's configuration.
	var plugin map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &plugin); err != nil {
		t.Fatal(err)
	}
	plugin["name"], plugin["cniVersion"] = list.Name, list.CNIVersion
	pluginBytes, _ := json.Marshal(plugin)
	conf, err := cni.ParseConfig(pluginBytes)
	if err != nil {
		t.Fatalf("tierflow-cni rejects its configuration: %v\n%s", err, pluginBytes)
	}
	if conf.Bridge != "br-int" || conf.MTU != 1450 || conf.OVSDBSocket != "/var/run/openvswitch/db.sock" || conf.IPAM.Type != "host-local" {
		t.Errorf("plugin configuration %+v", conf)
	}
	ipam := plugin["ipam"].(map[string]any)
	ranges, _ := json.Marshal(ipam["ranges"])
	if string(ranges) != `[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]]` {
		t.Errorf("ranges %s", ranges)
	}
	if strings.Contains(string(data), `"mtu": 0`) {
		t.Error("mtu 0 should be omitted")
	}
}

func TestConflistRejectsBadCIDRs(t *testing.T) {
	a := testAgent(t)
	for _, cidrs := range [][]string{
		nil,
		{"10.244.1.0"},
		{"10.244.1.5/24"},
		{"10.244.1.0/31"},
		{"10.0.0.0/24", "10.1.0.0/24"},
		{"garbage"},
	} {
		if _, err := Conflist(a, cidrs); err == nil {
			t.Errorf("%v accepted", cidrs)
		}
	}
}

func TestInstall(t *testing.T) {
	a := testAgent(t)
	src := t.TempDir()
	for _, name := range []string{PluginName, "host-local", "loopback"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte("new "+name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The node already has its own loopback: it is kept.
	if err := os.MkdirAll(a.CNI.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.CNI.BinDir, "loopback"), []byte("node's loopback"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An older tierflow-cni is replaced.
	if err := os.WriteFile(filepath.Join(a.CNI.BinDir, PluginName), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Install(a, []string{"10.244.2.0/24"}, src); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{PluginName: "new " + PluginName, "host-local": "new host-local", "loopback": "node's loopback"} {
		p := filepath.Join(a.CNI.BinDir, name)
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
		if st, err := os.Stat(p); err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s is not executable", name)
		}
	}
	data, err := os.ReadFile(filepath.Join(a.CNI.ConfDir, ConflistName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"subnet": "10.244.2.0/24"`) {
		t.Errorf("conflist:\n%s", data)
	}
	entries, _ := os.ReadDir(a.CNI.ConfDir)
	binEntries, _ := os.ReadDir(a.CNI.BinDir)
	if len(entries) != 1 || len(binEntries) != 3 {
		t.Errorf("temporary files left behind: %v %v", entries, binEntries)
	}
	// Idempotent.
	if err := Install(a, []string{"10.244.2.0/24"}, src); err != nil {
		t.Fatal(err)
	}
}

func TestInstallWithoutPluginFails(t *testing.T) {
	a := testAgent(t)
	err := Install(a, []string{"10.244.2.0/24"}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), PluginName) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.CNI.ConfDir, ConflistName)); err == nil {
		t.Error("configuration written although the plugin is missing")
	}
}

// TestUninstall removes exactly what Install put there: the node's own
// loopback (which Install kept) stays, as does another network's
// configuration.
func TestUninstall(t *testing.T) {
	a := testAgent(t)
	src := t.TempDir()
	for _, name := range []string{PluginName, "host-local", "loopback"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte("tierflow's "+name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for dir, files := range map[string]map[string]string{
		a.CNI.BinDir:  {"loopback": "node's loopback", "bridge": "node's bridge"},
		a.CNI.ConfDir: {"20-other.conflist": "{}"},
	} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := Install(a, []string{"10.244.2.0/24"}, src); err != nil {
		t.Fatal(err)
	}
	removed, err := Uninstall(a, src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(a.CNI.ConfDir, ConflistName), filepath.Join(a.CNI.BinDir, PluginName), filepath.Join(a.CNI.BinDir, "host-local")}
	if strings.Join(removed, " ") != strings.Join(want, " ") {
		t.Errorf("removed %v, want %v", removed, want)
	}
	names := func(dir string) (out []string) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	if got := strings.Join(names(a.CNI.BinDir), " "); got != "bridge loopback" {
		t.Errorf("left in the bin directory: %s", got)
	}
	if got := strings.Join(names(a.CNI.ConfDir), " "); got != "20-other.conflist" {
		t.Errorf("left in the configuration directory: %s", got)
	}
	if removed, err := Uninstall(a, src); err != nil || len(removed) != 0 {
		t.Errorf("second uninstall: removed %v, %v", removed, err)
	}
}
