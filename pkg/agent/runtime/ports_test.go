package runtime

import (
	"net"
	"net/netip"
	"strings"
	"testing"

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
		return ovsdb.PortInfo{Interface: iface, OFPort: port, PodNamespace: "ns", PodName: name, MAC: m, IPs: ips}
	}
	errPort := pod("v-err", "err", 7, mac(7), ip("10.0.0.7"))
	errPort.Error = "could not open network device"
	ports := []ovsdb.PortInfo{
		pod("v-ok", "ok", 2, mac(2), ip("10.0.0.2")),
		pod("v-noport", "noport", 0, mac(3), ip("10.0.0.3")),
		errPort,
		pod("v-dup1", "dup", 4, mac(4), ip("10.0.0.4")),
		pod("v-dup2", "dup", 5, mac(5), ip("10.0.0.5")),
		pod("v-ipa", "ipa", 8, mac(8), ip("10.0.0.8")),
		pod("v-ipb", "ipb", 9, mac(9), ip("10.0.0.8")),
		pod("v-nomac", "nomac", 10, nil, ip("10.0.0.10")),
		{Interface: "uplink", OFPort: 1, Role: ovsdb.RoleUplink},
	}
	named := map[model.PodRef][]model.NamedPort{{Namespace: "ns", Name: "ok"}: {{Name: "web", Protocol: model.ProtocolTCP, Port: 80}}}
	local, all := classifyPorts(ports, named)
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
