package bench

import (
	"testing"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
)

// TestFlowProbeText checks how the end-to-end driver recognizes a rule's
// flows in the agent's and in ovs-ofctl's text.
func TestFlowProbeText(t *testing.T) {
	port := flowProbe{Table: pipeline.IngressNetworkPolicy, Port: 10000, Present: true}
	peer := flowProbe{Table: pipeline.IngressNetworkPolicy, PeerIP: "10.244.2.5", Present: true}
	for _, c := range []struct {
		probe flowProbe
		text  string
		want  bool
	}{
		{port, "cookie=0x302000000000005, table=11, priority=10000,eth_type=0x0800,ip_proto=6,tcp_dst=10000 actions=conjunction(5,3/3)", true},
		{port, " cookie=0x302000000000005, duration=1.2s, table=11, n_packets=0, n_bytes=0, priority=10000,tcp,tp_dst=10000 actions=conjunction(5,3/3)", true},
		{port, "table=11, priority=10000,eth_type=0x0800,ip_proto=6,tcp_dst=100 actions=conjunction(5,3/3)", false},
		{port, "table=11, priority=10000,eth_type=0x0800,ip_proto=17,udp_dst=10000 actions=conjunction(5,3/3)", false},
		{port, "table=11, priority=10000,reg1=0x5 actions=load:0x2710->NXM_NX_REG3[]", false},
		{peer, "table=11, priority=10000,eth_type=0x0800,nw_src=10.244.2.5 actions=conjunction(5,2/3)", true},
		{peer, " cookie=0x1, table=11, priority=10000,ip,nw_src=10.244.2.4/31 actions=conjunction(5,2/3)", true},
		{peer, "table=11, priority=10000,eth_type=0x0800,nw_src=10.244.2.6/31 actions=conjunction(5,2/3)", false},
		{peer, "table=11, priority=10000,eth_type=0x0800,nw_dst=10.244.2.5 actions=conjunction(5,2/3)", false},
		{peer, "NXST_FLOW reply (xid=0x4):", false},
	} {
		if got := c.probe.matchesText(c.text); got != c.want {
			t.Errorf("%v on %q: %v, want %v", c.probe, c.text, got, c.want)
		}
	}
}
