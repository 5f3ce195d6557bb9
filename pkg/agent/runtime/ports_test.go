package runtime

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// TestClassifyPortsFailsClosed: only ports the CNI plugin fully vouched for
// are classified; a port without an OpenFlow number, with an interface
// error, or claiming a pod or an address another port claims gets no
// traffic, and says why.
func TestClassifyPortsFailsClosed(t *testing.T) {
	mac := func(i byte) net.HardwareAddr { return net.HardwareAddr{0x0a, 0x58, 0, 0, 0, i} }
	ip := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	pod := func(iface, name string, port uint32, m net.HardwareAddr, ips []netip.Addr) ovsdb.PortInfo {
		return ovsdb.PortInfo{Interface: iface, OFPort: port, PodNamespace: "ns", PodName: name, PodUID: "uid-" + name, MAC: m, IPs: ips}
	}
	errPort := pod("v-err", "err", 7, mac(7), ip("10.0.0.7"))
	errPort.Error = "could not open network device"
	ports := []ovsdb.PortInfo{
		pod("v-ok", "ok", 2, mac(2), ip("10.0.0.2")),
		pod("v-noport", "noport", 0, mac(3), ip("10.0.0.3")),
		errPort,
		pod("v-dup1", "dup", 4, mac(4), ip("10.0.0.4")),
		pod("v-dup2", "dup", 5, mac(5), ip("10.0.0.4")),
		pod("v-ipa", "ipa", 8, mac(8), ip("10.0.0.8")),
		pod("v-ipb", "ipb", 9, mac(9), ip("10.0.0.8")),
		pod("v-nomac", "nomac", 10, nil, ip("10.0.0.10")),
		{Interface: "uplink", OFPort: 1, Role: ovsdb.RoleUplink},
	}
	named := map[model.PodRef][]model.NamedPort{{Namespace: "ns", Name: "ok"}: {{Name: "web", Protocol: model.ProtocolTCP, Port: 80}}}
	// The controller admits every pod of the ports, with their addresses.
	admitted := &model.NodePods{}
	listed := map[string]bool{}
	for _, p := range ports {
		if p.PodName != "" && !listed[p.PodName] {
			listed[p.PodName] = true
			admitted.Pods = append(admitted.Pods, model.NodePod{Pod: model.PodRef{Namespace: "ns", Name: p.PodName}, UID: types.UID(p.PodUID), IPs: p.IPs})
		}
	}
	local, all := classifyPorts(ports, named, admitted)
	if len(local) != 1 || local[0].Pod.Name != "ok" || local[0].OFPort != 2 || len(local[0].Ports) != 1 {
		t.Fatalf("classified %+v, want only ns/ok with its named port", local)
	}
	want := map[string]string{
		"v-ok": "", "v-noport": "no OpenFlow port", "v-err": "interface error", "v-dup1": "two interfaces", "v-dup2": "two interfaces",
		"v-ipa": "two interfaces", "v-ipb": "two interfaces", "v-nomac": "invalid MAC",
	}
	if len(all) != len(want) {
		t.Fatalf("reported %d pods, want %d (the uplink is not a pod): %+v", len(all), len(want), all)
	}
	for _, p := range all {
		w, ok := want[p.Interface]
		if !ok {
			t.Errorf("unexpected port %s", p.Interface)
			continue
		}
		if (w == "") != (p.Error == "") || !strings.Contains(p.Error, w) {
			t.Errorf("port %s: error %q, want %q", p.Interface, p.Error, w)
		}
	}
}

// TestClassifyPortsAdmission: a valid port is classified only when the
// controller's state for the node lists its pod with the port's UID and
// addresses: a new pod has no connectivity before its policies, as a
// subject and as a peer, are computed with it; a deleted pod's port is
// not its successor's; a reused address waits for its previous owner to
// be gone.
func TestClassifyPortsAdmission(t *testing.T) {
	mac := net.HardwareAddr{0x0a, 0x58, 0, 0, 0, 2}
	ip := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	port := ovsdb.PortInfo{Interface: "v", OFPort: 2, PodNamespace: "ns", PodName: "web", PodUID: "uid-2", MAC: mac, IPs: ip("10.0.0.2")}
	ref := model.PodRef{Namespace: "ns", Name: "web"}
	for _, c := range []struct {
		name  string
		port  ovsdb.PortInfo
		state *model.NodePods
		why   string
	}{
		{"listed with its UID and addresses", port, &model.NodePods{Pods: []model.NodePod{{Pod: ref, UID: "uid-2", IPs: ip("10.0.0.2")}}}, ""},
		{"no state", port, nil, "does not list the pod"},
		{"not listed", port, &model.NodePods{Pods: []model.NodePod{{Pod: model.PodRef{Namespace: "ns", Name: "other"}, UID: "uid-2", IPs: ip("10.0.0.2")}}}, "does not list the pod"},
		{"another UID: a deleted pod's port", port, &model.NodePods{Pods: []model.NodePod{{Pod: ref, UID: "uid-3", IPs: ip("10.0.0.2")}}}, "deleted pod"},
		{"addresses not known yet", port, &model.NodePods{Pods: []model.NodePod{{Pod: ref, UID: "uid-2"}}}, "no addresses"},
		{"other addresses", port, &model.NodePods{Pods: []model.NodePod{{Pod: ref, UID: "uid-2", IPs: ip("10.0.0.9")}}}, "the port's are"},
		{"port without UID", func() ovsdb.PortInfo { p := port; p.PodUID = ""; return p }(), &model.NodePods{Pods: []model.NodePod{{Pod: ref, IPs: ip("10.0.0.2")}}}, "no pod UID"},
	} {
		local, all := classifyPorts([]ovsdb.PortInfo{c.port}, nil, c.state)
		if c.why == "" {
			if len(local) != 1 || all[0].Error != "" {
				t.Errorf("%s: not classified: %+v", c.name, all)
			}
			continue
		}
		if len(local) != 0 || !strings.Contains(all[0].Error, c.why) {
			t.Errorf("%s: classified %d, error %q, want %q", c.name, len(local), all[0].Error, c.why)
		}
	}
	// A stale port of a deleted pod next to its successor's: only the
	// successor is classified (the stale one claims neither pod nor
	// address).
	stale := port
	stale.Interface, stale.OFPort, stale.PodUID = "v-stale", 3, "uid-old"
	state := &model.NodePods{Pods: []model.NodePod{{Pod: ref, UID: "uid-2", IPs: ip("10.0.0.2")}}}
	local, _ := classifyPorts([]ovsdb.PortInfo{stale, port}, nil, state)
	if len(local) != 1 || local[0].OFPort != 2 {
		t.Errorf("with a stale port: classified %+v, want port 2 only", local)
	}
}
