package ovsctl

import (
	"context"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// TestQueryInterfaces reads a real database file with ovsdb-tool, as the
// uninstall does once OVS is gone: a bridge with its internal port, a
// gateway and a pod's veth.
func TestQueryInterfaces(t *testing.T) {
	db := filepath.Join(t.TempDir(), "conf.db")
	if out, err := exec.Command("ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema").CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create (needs Debian's openvswitch-common: make deps): %v: %s", err, out)
	}
	txn := `["Open_vSwitch",
	 {"op":"insert","table":"Interface","row":{"name":"br-int","type":"internal"},"uuid-name":"i1"},
	 {"op":"insert","table":"Interface","row":{"name":"tierflow-gw0","type":"internal"},"uuid-name":"i2"},
	 {"op":"insert","table":"Interface","row":{"name":"veth0a1b2c3d"},"uuid-name":"i3"},
	 {"op":"insert","table":"Port","row":{"name":"br-int","interfaces":["named-uuid","i1"]},"uuid-name":"p1"},
	 {"op":"insert","table":"Port","row":{"name":"tierflow-gw0","interfaces":["named-uuid","i2"]},"uuid-name":"p2"},
	 {"op":"insert","table":"Port","row":{"name":"veth0a1b2c3d","interfaces":["named-uuid","i3"]},"uuid-name":"p3"},
	 {"op":"insert","table":"Bridge","row":{"name":"br-int","ports":["set",[["named-uuid","p1"],["named-uuid","p2"],["named-uuid","p3"]]]},"uuid-name":"b"},
	 {"op":"insert","table":"Bridge","row":{"name":"tierflow-phy0","external_ids":["map",[["tierflow.io/underlay","{\"interface\":\"eth0\"}"],["x","y"]]]},"uuid-name":"u"},
	 {"op":"insert","table":"Open_vSwitch","row":{"bridges":["set",[["named-uuid","b"],["named-uuid","u"]]]}}]`
	if out, err := exec.Command("ovsdb-tool", "transact", db, txn).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool transact: %v: %s", err, out)
	}
	out, err := Run(context.Background(), nil, "ovsdb-tool", QueryInterfacesArgs(db)...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseQueryInterfaces(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Interface]bool{{"br-int", "internal"}: true, {"tierflow-gw0", "internal"}: true, {"veth0a1b2c3d", ""}: true}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for _, i := range got {
		if !want[i] {
			t.Errorf("unexpected %v in %v", i, got)
		}
	}
	if _, err := Run(context.Background(), nil, "ovsdb-tool", QueryInterfacesArgs(filepath.Join(t.TempDir(), "none.db"))...); err == nil {
		t.Error("a missing database file gave no error")
	}
	if _, err := ParseQueryInterfaces(`[{"error":"unknown table","details":"no table named Interfaces"}]`); err == nil {
		t.Error("an OVSDB error was not reported")
	}

	// The underlay bridge's record, as the uninstall reads it.
	for bridge, want := range map[string]map[string]string{
		"tierflow-phy0": {"tierflow.io/underlay": `{"interface":"eth0"}`, "x": "y"},
		"br-int":        {},
		"none":          nil,
	} {
		out, err := Run(context.Background(), nil, "ovsdb-tool", QueryBridgeExternalIDsArgs(db, bridge)...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseQueryBridgeExternalIDs(out)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("external_ids of %s: %v (%v), want %v", bridge, got, err, want)
		}
	}
}

// TestParseDpctlShow: the format of OVS 3.x's `ovs-dpctl show` (this
// machine has no openvswitch module to produce it).
func TestParseDpctlShow(t *testing.T) {
	out := `system@ovs-system:
  lookups: hit:120 missed:14 lost:0
  flows: 3
  masks: hit:130 total:2 hit/pkt:0.97
  cache: hit:100 hit-rate:74.63%
  caches:
    masks-cache: size:256
  port 0: ovs-system (internal)
  port 1: br-int (internal)
  port 2: tierflow-gw0 (internal)
  port 3: veth0a1b2c3d
  port 4: genev_sys_6081 (geneve: packet_type=ptap)
`
	want := []Datapath{{Name: "ovs-system", Ports: []string{"ovs-system", "br-int", "tierflow-gw0", "veth0a1b2c3d", "genev_sys_6081"}}}
	if got := ParseDpctlShow(out); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := ParseDpctlShow(""); len(got) != 0 {
		t.Errorf("no datapath: got %+v", got)
	}
}
