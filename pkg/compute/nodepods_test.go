package compute

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/model"
)

// nodePodsText renders a node's pods as "ns/name uid ips gen" lines.
func nodePodsText(e *Engine, node string) string {
	np, ok := e.NodePods(node)
	if !ok {
		return "none"
	}
	var lines []string
	for _, p := range np.Pods {
		lines = append(lines, fmt.Sprintf("%s %s %v %d", p.Pod, p.UID, p.IPs, p.Generation))
	}
	return strings.Join(lines, "\n")
}

func nodePodEntry(t *testing.T, e *Engine, node, ns, name string) model.NodePod {
	t.Helper()
	np, ok := e.NodePods(node)
	if !ok {
		t.Fatalf("node %s has no pods", node)
	}
	for _, p := range np.Pods {
		if p.Pod == (model.PodRef{Namespace: ns, Name: name}) {
			return p
		}
	}
	t.Fatalf("node %s does not list %s/%s:\n%s", node, ns, name, nodePodsText(e, node))
	return model.NodePod{}
}

// A node's pods carry what its agent admits a port by: UID and addresses,
// with the generation at which the pod's memberships include them. The
// entry changes when the UID, node or addresses change (in the same call,
// so the same batch, as the groups), not for a label change.
func TestNodePodsEntries(t *testing.T) {
	e := New()
	e.UpsertNamespace(mkNS("prod"))
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod}
spec: {podSelector: {matchLabels: {app: web}}}
`))
	var batches [][]Change
	e.Subscribe(func(cs []Change) { batches = append(batches, slices.Clone(cs)) })

	// Scheduled, no address yet: listed without addresses.
	e.UpsertPod(mkPod("prod", "web1", "n1", "", []string{"app=web"}))
	web := nodePodEntry(t, e, "n1", "prod", "web1")
	if web.UID != "prod-web1" || len(web.IPs) != 0 || web.Generation == 0 {
		t.Fatalf("new pod: %+v", web)
	}
	kinds := func() []string {
		var out []string
		for _, c := range batches[len(batches)-1] {
			out = append(out, string(c.Kind))
		}
		slices.Sort(out)
		return out
	}
	if got := kinds(); !slices.Contains(got, string(KindNodePods)) || !slices.Contains(got, string(KindAppliedToGroup)) {
		t.Errorf("the pod's batch has %v, want its NodePods and its applied-to group together", got)
	}
	// Its address: a new entry generation.
	e.UpsertPod(mkPod("prod", "web1", "n1", "10.0.0.1", []string{"app=web"}))
	withIP := nodePodEntry(t, e, "n1", "prod", "web1")
	if fmt.Sprint(withIP.IPs) != "[10.0.0.1]" || withIP.Generation <= web.Generation {
		t.Fatalf("pod with its address: %+v (before: %+v)", withIP, web)
	}
	// A label change is no change of the entry.
	e.UpsertPod(mkPod("prod", "web1", "n1", "10.0.0.1", []string{"app=web", "tier=x"}))
	if got := nodePodEntry(t, e, "n1", "prod", "web1"); got.Generation != withIP.Generation {
		t.Errorf("label change moved the entry's generation: %+v", got)
	}
	// A pod of the same name with another UID (its delete missed).
	again := mkPod("prod", "web1", "n1", "10.0.0.1", []string{"app=web"})
	again.UID = "other"
	e.UpsertPod(again)
	if got := nodePodEntry(t, e, "n1", "prod", "web1"); got.UID != "other" || got.Generation <= withIP.Generation {
		t.Errorf("new UID: %+v", got)
	}
	// Deleted: gone, and the node's object with it.
	e.DeletePod("prod", "web1")
	if _, ok := e.NodePods("n1"); ok {
		t.Errorf("n1 still lists pods:\n%s", nodePodsText(e, "n1"))
	}
	if s := e.Snapshot(); len(s.NodePods) != 0 {
		t.Errorf("snapshot lists node pods %v", s.NodePods)
	}
}

// Before the kubelet reports a pod's address (it does once the sandbox is
// up, after the CNI ADD that waits for admission), the node's agent
// reports the addresses the CNI plugin attached the pod with: they become
// the pod's in its groups and entry. A report counts only for the pod of
// that UID on the reporting node.
func TestNodePodsReportedAddresses(t *testing.T) {
	e := New()
	e.UpsertNamespace(mkNS("prod"))
	e.UpsertNetworkPolicy(npYAML(t, `
metadata: {name: web, namespace: prod}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}]}]
`))
	e.UpsertPod(mkPod("prod", "db1", "n1", "", []string{"app=db"}))
	report := func(node string, uid types.UID, ips ...string) {
		var addrs []netip.Addr
		for _, ip := range ips {
			addrs = append(addrs, netip.MustParseAddr(ip))
		}
		e.SetReportedPods(node, []model.NodePod{{Pod: model.PodRef{Namespace: "prod", Name: "db1"}, UID: uid, IPs: addrs}})
	}
	peers := func() []string {
		s := e.Snapshot()
		var out []string
		for _, id := range policyByName(t, s, model.KindNetworkPolicy, "prod", "web").Rules[0].Peer.AddressGroups {
			for _, m := range s.AddressGroups[id].Members {
				out = append(out, fmt.Sprintf("%s%v", m.Pod, m.IPs))
			}
		}
		return out
	}
	// Another node, another UID: ignored.
	report("n2", "prod-db1", "10.0.0.9")
	report("n1", "stale-uid", "10.0.0.8")
	if got := nodePodEntry(t, e, "n1", "prod", "db1"); len(got.IPs) != 0 {
		t.Errorf("report of another node or UID used: %+v", got)
	}
	report("n1", "prod-db1", "10.0.0.5")
	got := nodePodEntry(t, e, "n1", "prod", "db1")
	if fmt.Sprint(got.IPs) != "[10.0.0.5]" {
		t.Errorf("reported address not used: %+v", got)
	}
	equalStrings(t, "peer members", peers(), []string{"prod/db1[10.0.0.5]"})
	// The kubelet reports the same: nothing changes.
	e.UpsertPod(mkPod("prod", "db1", "n1", "10.0.0.5", []string{"app=db"}))
	if again := nodePodEntry(t, e, "n1", "prod", "db1"); again.Generation != got.Generation {
		t.Errorf("status confirming the report moved the entry: %+v -> %+v", got, again)
	}
	// The port is gone (the agent reports nothing): the status stays.
	e.SetReportedPods("n1", nil)
	equalStrings(t, "peer members", peers(), []string{"prod/db1[10.0.0.5]"})
}

// A reused address: while the pod that had it is still in the engine (it
// is terminating, its object not yet deleted), neither it nor the new pod
// is listed with the address; once it is gone the new pod is, at a new
// generation (the groups lost the old pod in that same call).
func TestNodePodsAddressConflict(t *testing.T) {
	e := New()
	e.UpsertPod(mkPod("prod", "old", "n1", "10.0.0.7", nil))
	e.UpsertPod(mkPod("prod", "new", "n1", "10.0.0.7", nil))
	for _, name := range []string{"old", "new"} {
		if got := nodePodEntry(t, e, "n1", "prod", name); len(got.IPs) != 0 {
			t.Errorf("%s listed with a conflicting address: %+v", name, got)
		}
	}
	before := nodePodEntry(t, e, "n1", "prod", "new")
	e.DeletePod("prod", "old")
	got := nodePodEntry(t, e, "n1", "prod", "new")
	if fmt.Sprint(got.IPs) != "[10.0.0.7]" || got.Generation <= before.Generation {
		t.Errorf("after the old pod is gone: %+v (before %+v)", got, before)
	}
	// A pod on another node claiming it conflicts as well.
	e.UpsertPod(mkPod("prod", "elsewhere", "n2", "10.0.0.7", nil))
	if got := nodePodEntry(t, e, "n1", "prod", "new"); len(got.IPs) != 0 {
		t.Errorf("conflict across nodes not seen: %+v", got)
	}
}
