package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/netstamp"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	benchmeasure "github.com/tierflow/tierflow/test/bench/measure"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/ovsenv"
	"github.com/tierflow/tierflow/test/testbed"
)

// e2eScale is the end-to-end latency scenario's size.
type e2eScale struct {
	// Namespaces × PodsPerNamespace pods, spread round-robin over the
	// three nodes.
	Namespaces, PodsPerNamespace int
	// Rounds of the change sequence (each round: 8 timed changes).
	Rounds int
}

// e2eSizes: full mode is the 1,000 pods on three nodes (each node
// gets a /22 pod range, e2ePodCIDRBits); creating a pod (netns,
// tierflow-cni, its server process, status) costs about 0.2 s of the
// shared two cores. See METHODS.md.
func e2eSizes() e2eScale {
	if quickScale() {
		return e2eScale{Namespaces: 4, PodsPerNamespace: 15, Rounds: 3}
	}
	return e2eScale{Namespaces: 20, PodsPerNamespace: 50, Rounds: 15}
}

// e2ePodCIDRBits: a /22 per node holds 1,000 pods over three nodes.
const e2ePodCIDRBits = 22

// progressf prints a progress line on stdout, where cmd/benchreport shows
// lines starting with "bench: " while a driver runs (b.Logf output only
// appears at the end).
func progressf(format string, args ...any) {
	fmt.Printf("bench: %s\n", fmt.Sprintf(format, args...))
}

// flowProbe is a condition on a node's policy flows: flows of Table
// matching TCP port Port (when not 0) or source address PeerIP (when set)
// are present, or absent.
type flowProbe struct {
	Table  pipeline.Table
	Port   int32
	PeerIP string
	// Present: at least one flow matches; else none.
	Present bool
}

func (p flowProbe) String() string {
	return fmt.Sprintf("table=%s,%s %s", p.Table, p.ofctlFilter(), map[bool]string{true: "present", false: "absent"}[p.Present])
}

// ofctlFilter is the probe in ovs-ofctl's match syntax (for messages).
func (p flowProbe) ofctlFilter() string {
	if p.PeerIP != "" {
		return "ip,nw_src=" + p.PeerIP
	}
	return fmt.Sprintf("tcp,tp_dst=%d", p.Port)
}

// matchesText reports whether a flow's text matches the probe: the
// agent's (pkg/ovs/openflow, e.g. "cookie=0x..., table=11,
// priority=10000,eth_type=0x0800,ip_proto=6,tcp_dst=80 actions=...") or
// ovs-ofctl dump-flows' ("... priority=10000,tcp,tp_dst=80 actions=...").
// A peer address matches a flow whose nw_src prefix contains it: the
// agent merges a rule's peer addresses into aligned prefixes.
func (p flowProbe) matchesText(text string) bool {
	match, _, _ := strings.Cut(text, " actions=")
	fields := strings.FieldsFunc(match, func(r rune) bool { return r == ',' || r == ' ' })
	has := func(f string) bool { return slices.Contains(fields, f) }
	if p.PeerIP != "" {
		ip, err := netip.ParseAddr(p.PeerIP)
		if err != nil {
			return false
		}
		for _, f := range fields {
			v, ok := strings.CutPrefix(f, "nw_src=")
			if !ok {
				continue
			}
			if !strings.Contains(v, "/") {
				v += "/32"
			}
			if pfx, err := netip.ParsePrefix(v); err == nil && pfx.Contains(ip) {
				return true
			}
		}
		return false
	}
	tcp := has("ip_proto=6") || has("tcp")
	port := has(fmt.Sprintf("tcp_dst=%d", p.Port)) || has(fmt.Sprintf("tp_dst=%d", p.Port))
	return tcp && port
}

// matchesFlow reports whether a flow the bridge's monitor reported
// matches the probe (the same test as matchesText, on the decoded match).
func (p flowProbe) matchesFlow(u openflow.FlowUpdate) bool {
	if u.Table != uint8(p.Table) {
		return false
	}
	if p.PeerIP != "" {
		ip, err := netip.ParseAddr(p.PeerIP)
		pfx, ok := u.IPv4Src()
		return err == nil && ok && pfx.Contains(ip)
	}
	port, mask, ok := u.TCPDst()
	return ok && mask == 0xffff && int32(port) == p.Port
}

// bridgeWatch follows one node bridge's policy flows through an OpenFlow
// flow monitor (pkg/ovs/openflow) on the bridge's loopback TCP listener:
// the switch reports each committed change (an agent's bundle at once,
// right after its commit, before its reply), and the kernel's receive
// stamp of a report (taken in the switch's send call) is when the flows
// took effect there, to within the kernel's send path (see
// stampPathDelays; METHODS.md, Resolution). How long each report then
// waited to be read is recorded too (readDelays): what stamping reports
// as they are read would add.
type bridgeWatch struct {
	node string
	mon  *openflow.Monitor

	mu    sync.Mutex
	flows map[string]openflow.FlowUpdate // by openflow.FlowUpdate.Key
	waits []*flowWait
	err   error
	// readDelays: for each report after the initial flows, how long
	// after the kernel received it this process read it (Received −
	// Arrived); unstamped counts the reports the kernel gave no stamp.
	readDelays []time.Duration
	unstamped  int
}

// flowWait is a condition on a bridge's flows someone waits for: met
// receives the time of the report that made it hold.
type flowWait struct {
	holds func(flows map[string]openflow.FlowUpdate) bool
	met   chan time.Time
}

// calibrationTable is a scratch table calibrate writes to: no flow of the
// pipeline jumps there.
const calibrationTable = 250

// watchedTables are the tables the probes look at, and the scratch table.
var watchedTables = []uint8{uint8(pipeline.IngressNetworkPolicy), uint8(pipeline.IngressAdmin), calibrationTable}

func watchBridge(b *testing.B, node string, br *ovsenv.Bridge) *bridgeWatch {
	b.Helper()
	// Over loopback TCP, where the kernel stamps each report's arrival
	// (a unix socket carries no stamp).
	target, err := br.ListenTCP()
	if err != nil {
		b.Fatalf("flow monitor on %s: %v", node, err)
	}
	mon, err := openflow.DialMonitor(context.Background(), target, watchedTables...)
	if err != nil {
		b.Fatalf("flow monitor on %s: %v", node, err)
	}
	b.Cleanup(func() { mon.Close() })
	w := &bridgeWatch{node: node, mon: mon, flows: map[string]openflow.FlowUpdate{}}
	go w.run()
	return w
}

func (w *bridgeWatch) run() {
	for ups := range w.mon.Updates() {
		w.mu.Lock()
		if last := ups[len(ups)-1]; !last.Initial {
			if last.Arrived.IsZero() {
				w.unstamped++
			} else {
				w.readDelays = append(w.readDelays, last.Received.Sub(last.Arrived))
			}
		}
		for _, u := range ups {
			if u.Event == openflow.FlowDeleted {
				delete(w.flows, u.Key())
			} else {
				w.flows[u.Key()] = u
			}
		}
		at := ups[len(ups)-1].Arrived
		if at.IsZero() { // counted above: the run fails
			at = ups[len(ups)-1].Received
		}
		w.waits = slices.DeleteFunc(w.waits, func(fw *flowWait) bool {
			if fw.holds(w.flows) {
				fw.met <- at
				return true
			}
			return false
		})
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = w.mon.Err()
	if w.err == nil {
		w.err = errors.New("flow monitor closed")
	}
}

// probesHold is the condition that every probe holds.
func probesHold(probes []flowProbe) func(map[string]openflow.FlowUpdate) bool {
	return func(flows map[string]openflow.FlowUpdate) bool {
		for _, p := range probes {
			found := false
			for _, f := range flows {
				if p.matchesFlow(f) {
					found = true
					break
				}
			}
			if found != p.Present {
				return false
			}
		}
		return true
	}
}

// expect registers a wait for holds, which must not hold yet (else the
// change to be timed would be invisible).
func (w *bridgeWatch) expect(what string, holds func(map[string]openflow.FlowUpdate) bool) (*flowWait, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, fmt.Errorf("bridge of %s: %w", w.node, w.err)
	}
	if holds(w.flows) {
		return nil, fmt.Errorf("bridge of %s: %s holds before the change", w.node, what)
	}
	fw := &flowWait{holds: holds, met: make(chan time.Time, 1)}
	w.waits = append(w.waits, fw)
	return fw, nil
}

// takeReadDelays returns the reports' reading delays and the count of
// unstamped reports since the last call, and forgets them.
func (w *bridgeWatch) takeReadDelays() ([]time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d, n := w.readDelays, w.unstamped
	w.readDelays, w.unstamped = nil, 0
	return d, n
}

func (w *bridgeWatch) cancel(fw *flowWait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waits = slices.DeleteFunc(w.waits, func(x *flowWait) bool { return x == fw })
}

// changeSeen is when one change's write started, when the API server
// answered it, and when each node's bridge reported the flows that make
// the change's probes hold.
type changeSeen struct {
	start, wrote time.Time
	seen         map[string]time.Time
}

// took is the change's latency: from the start of its write until the
// last node's report.
func (c changeSeen) took() time.Duration {
	var last time.Time
	for _, at := range c.seen {
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(c.start)
}

// lastNode is the node whose report came last (the one that set took).
func (c changeSeen) lastNode() string {
	var node string
	var last time.Time
	for n, at := range c.seen {
		if node == "" || at.After(last) {
			node, last = n, at
		}
	}
	return node
}

// stagesOf splits c's latency into benchmeasure.E2EStages at the stamps of the node
// whose report came last. The realization that made the flows hold is
// the last one of that node's agent that changed flows, of an update
// received after the write started, and started before the report.
func (e *e2eBed) stagesOf(c changeSeen) ([]time.Duration, error) {
	node := c.lastNode()
	seen := c.seen[node]
	u, err := agentquery.NewClient(e.tf.AgentSockets[node]).Updates(context.Background())
	if err != nil {
		return nil, fmt.Errorf("updates of %s: %w", node, err)
	}
	var ut *agentquery.UpdateTiming
	for i := range u.Updates {
		x := &u.Updates[i]
		if x.FlowChanges > 0 && !x.Received.Before(c.start) && !x.Realizing.After(seen) {
			ut = x
		}
	}
	if ut == nil {
		return nil, fmt.Errorf("no update of %s's agent changed flows between the write (%v) and the report (%v): %+v", node, c.start, seen, u.Updates)
	}
	stamps := []time.Time{c.start, ut.Changed, ut.Queued, ut.Sent, ut.Received, ut.Realizing, ut.BundleStart, ut.Committed, seen}
	out := make([]time.Duration, len(benchmeasure.E2EStages))
	for i := range out {
		if stamps[i+1].IsZero() {
			return nil, fmt.Errorf("update %d of %s's agent lacks the stamp of stage %s: %+v", ut.Version, node, benchmeasure.E2EStages[i].Key, *ut)
		}
		out[i] = stamps[i+1].Sub(stamps[i])
	}
	return out, nil
}

// do runs write and returns when it started, when the API server
// answered, and when every node's bridge reported the flows that make all
// probes hold.
func (e *e2eBed) do(nodes []string, probes []flowProbe, timeout time.Duration, write func() error) (changeSeen, error) {
	waits := map[string]*flowWait{}
	defer func() {
		for n, fw := range waits {
			e.watches[n].cancel(fw)
		}
	}()
	for _, n := range nodes {
		fw, err := e.watches[n].expect(fmt.Sprint(probes), probesHold(probes))
		if err != nil {
			return changeSeen{}, err
		}
		waits[n] = fw
	}
	c := changeSeen{start: time.Now(), seen: map[string]time.Time{}}
	if err := write(); err != nil {
		return changeSeen{}, err
	}
	c.wrote = time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(waits) > 0 {
		for n, fw := range waits {
			select {
			case at := <-fw.met:
				c.seen[n] = at
				delete(waits, n)
			case <-deadline.C:
				var still []string
				for m := range waits {
					still = append(still, m)
				}
				sort.Strings(still)
				return changeSeen{}, fmt.Errorf("after %v the bridges of %v do not report %v", timeout, still, probes)
			}
		}
	}
	return c, nil
}

// calibrate measures how late a bridge's monitor reports a change: this
// process adds one flow to the scratch table over an OpenFlow connection
// of its own (one flow-mod, which ovs-vswitchd applies and reports to
// monitors as it processes it), then deletes it the same way, and times
// each from just before the flow-mod is written until the monitor reports
// it (the kernel's stamp of the report's arrival): the round trip through ovs-vswitchd, its turn for the flow-mod
// included (so no measure of the monitor's own delay: the reading delays
// are, see bridgeWatch). Each flow-mod is
// followed by a barrier, whose reply the switch sends after the monitor's
// report (it processes the flow-mod, reporting it to monitors, before the
// barrier): afterReply is how much later the monitor's report arrived
// than this process read that reply (openflow.Client.LastApplied, stamped by the client's
// read loop) — the monitor's own reading delay, without the switch's turn
// that the bound includes (not a bound: a late reply hides as much).
func (e *e2eBed) calibrate(ctx context.Context, node string, c *openflow.Client, round int) (bound, afterReply []time.Duration, err error) {
	flow := openflow.Flow{Table: calibrationTable, Priority: 1, Cookie: uint64(0x7466_6361_6c00_0000) | uint64(round), Match: openflow.Match{InPort: 1}}
	present := func(want bool) func(map[string]openflow.FlowUpdate) bool {
		return func(fs map[string]openflow.FlowUpdate) bool {
			for _, f := range fs {
				if f.Table == calibrationTable && f.Cookie == flow.Cookie {
					return want
				}
			}
			return !want
		}
	}
	w := e.watches[node]
	for _, add := range []bool{true, false} {
		fw, err := w.expect("the calibration flow", present(add))
		if err != nil {
			return nil, nil, err
		}
		start := time.Now()
		if add {
			err = c.AddFlows(ctx, flow)
		} else {
			err = c.DeleteFlows(ctx, flow)
		}
		if err != nil {
			w.cancel(fw)
			return nil, nil, fmt.Errorf("calibration on %s: %w", node, err)
		}
		reply := c.LastApplied()
		select {
		case at := <-fw.met:
			bound = append(bound, at.Sub(start))
			afterReply = append(afterReply, at.Sub(reply))
		case <-time.After(10 * time.Second):
			w.cancel(fw)
			return nil, nil, fmt.Errorf("calibration on %s: the monitor did not report the scratch flow within 10s", node)
		}
	}
	return bound, afterReply, nil
}

// stampPathDelays measures the kernel's path from a sender's send call
// to the receive stamp on loopback TCP, which the monitors' stamps of the
// switch's reports take: n small messages over a loopback connection of
// this process, each timed from just before its write until the
// receiver's kernel stamp (pkg/netstamp). Whatever delays the sender
// between its clock read and the send call counts too, so it bounds the
// path from above.
func stampPathDelays(n int) ([]time.Duration, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		return nil, err
	}
	defer server.Close()
	r, err := netstamp.NewReader(server)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 64)
	var out []time.Duration
	for len(out) < n {
		start := time.Now()
		if _, err := client.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		// The first messages may come before the kernel turned its
		// stamps on (pkg/netstamp): no sample.
		if at := r.Last(); !at.IsZero() {
			out = append(out, at.Sub(start))
		}
		time.Sleep(time.Millisecond)
	}
	return out, nil
}

// e2eBed is the test bed with tierflow, the scenario's pods and clients.
type e2eBed struct {
	tf   *framework.Tierflow
	kube kubernetes.Interface
	pol  npclient.Interface
	// pods by namespace, each with its node and IP.
	pods    map[string][]framework.Pod
	bridges map[string]*ovsenv.Bridge
	// watches follow each node bridge's flows (flow monitors); ofc are
	// OpenFlow connections of this process to each bridge, for calibrate.
	watches map[string]*bridgeWatch
	ofc     map[string]*openflow.Client
}

// bridgeHolds reads a node bridge (ovs-ofctl dump-flows of the probe's
// table, IPv4 flows): the cross-check of what the agent reported.
func (e *e2eBed) bridgeHolds(node string, p flowProbe) (bool, error) {
	out, err := e.bridges[node].Ofctl("dump-flows", fmt.Sprintf("table=%d,ip", int(p.Table)))
	if err != nil {
		return false, err
	}
	found := false
	for _, l := range strings.Split(out, "\n") {
		if p.matchesText(strings.TrimSpace(l)) {
			found = true
			break
		}
	}
	return found == p.Present, nil
}

// nodesOf lists the nodes of pods (sorted, unique).
func nodesOf(pods []framework.Pod) []string {
	var out []string
	for _, p := range pods {
		if !slices.Contains(out, p.Node) {
			out = append(out, p.Node)
		}
	}
	sort.Strings(out)
	return out
}

// e2eLabel is a workload pod's role: server pods are what the policies
// apply to, client pods their peers, idle pods neither (until relabelled).
func e2eLabel(i int) string {
	switch i % 5 {
	case 0:
		return "server"
	case 1:
		return "client"
	}
	return "idle"
}

// deploy creates the scenario's namespaces and pods (parallel writers) and
// waits until every pod runs with an address; it returns how long that
// took.
func (e *e2eBed) deploy(b *testing.B, sc e2eScale, nodes []string) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	type podSpec struct {
		ns, name, node, app string
	}
	var specs []podSpec
	k := 0
	for n := 0; n < sc.Namespaces; n++ {
		ns := fmt.Sprintf("lat-%d", n)
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatalf("namespace %s: %v", ns, err)
		}
		for i := 0; i < sc.PodsPerNamespace; i++ {
			specs = append(specs, podSpec{ns: ns, name: fmt.Sprintf("p%d", i), node: nodes[k%len(nodes)], app: e2eLabel(i)})
			k++
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(specs) {
					return
				}
				s := specs[i]
				// No container port: the pod's server process (test/testbed
				// noderuntime) then binds nothing, which keeps 1,000 of them
				// light; the policies here are about flows, not probes.
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns, Labels: map[string]string{"app": s.app}},
					Spec: corev1.PodSpec{NodeName: s.node, Containers: []corev1.Container{{
						Name: "main", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Command: []string{"/agnhost", "pause"},
					}}},
				}
				if _, err := e.kube.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					failed.Store(fmt.Errorf("pod %s/%s: %w", s.ns, s.name, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	progressf("created %d pods in %.1fs; waiting until they run", len(specs), time.Since(start).Seconds())
	// Pod creation is bounded by the node runtimes (about a second per
	// pod): allow for a slow machine.
	timeout := 5*time.Minute + time.Duration(len(specs))*2*time.Second
	deadline := time.Now().Add(timeout)
	lastProgress := time.Now()
	for {
		running := 0
		e.pods = map[string][]framework.Pod{}
		list, err := e.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Namespace, "lat-") || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				continue
			}
			running++
			e.pods[p.Namespace] = append(e.pods[p.Namespace], framework.Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP})
		}
		if running == len(specs) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d pods running after %v\n%s", running, len(specs), timeout, e.tf.Logs(10))
		}
		if time.Since(lastProgress) >= 30*time.Second {
			progressf("%d of %d pods running (%.0fs)", running, len(specs), time.Since(start).Seconds())
			lastProgress = time.Now()
		}
		time.Sleep(time.Second)
	}
	took := time.Since(start)
	progressf("%d pods running after %.1fs (%.2f pods/s)", len(specs), took.Seconds(), float64(len(specs))/took.Seconds())
	return took
}

// waitAgentsHavePods waits until every agent classifies exactly the pods
// of its node (so later changes meet a settled datapath).
func (e *e2eBed) waitAgentsHavePods(b *testing.B, timeout time.Duration) {
	b.Helper()
	want := map[string]int{}
	for _, pods := range e.pods {
		for _, p := range pods {
			want[p.Node]++
		}
	}
	// The agents' own pods (host network) are not attached.
	deadline := time.Now().Add(timeout)
	for {
		var why []string
		for node, sock := range e.tf.AgentSockets {
			pods, err := agentquery.NewClient(sock).Pods(context.Background())
			if err != nil {
				why = append(why, fmt.Sprintf("%s: %v", node, err))
				continue
			}
			n := 0
			for _, p := range pods.Pods {
				if strings.HasPrefix(p.Namespace, "lat-") && p.Error == "" {
					n++
				}
			}
			if n != want[node] {
				why = append(why, fmt.Sprintf("%s: %d of %d pods", node, n, want[node]))
			}
		}
		if len(why) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("agents do not classify every pod after %v: %s", timeout, strings.Join(why, "; "))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// latencyNP is the NetworkPolicy of a round: ingress to the namespace's
// server pods from its client pods on TCP port.
func latencyNP(ns string, port int32) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	p := intstr.FromInt32(port)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "latency", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}},
			}},
		},
	}
}

// latencyANP is the AdminNetworkPolicy of a round: ingress to every pod of
// namespace ns from the same namespace on TCP port, allowed.
func latencyANP(name, ns string, priority, port int32) *v1alpha1.AdminNetworkPolicy {
	nsSel := metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	ports := []v1alpha1.AdminNetworkPolicyPort{{PortNumber: &v1alpha1.Port{Protocol: corev1.ProtocolTCP, Port: port}}}
	return &v1alpha1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AdminNetworkPolicySpec{
			Priority: priority,
			Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: &nsSel},
			Ingress: []v1alpha1.AdminNetworkPolicyIngressRule{{
				Name: "from-own-namespace", Action: v1alpha1.AdminNetworkPolicyRuleActionAllow,
				From:  []v1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &nsSel}},
				Ports: &ports,
			}},
		},
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func msOf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// BenchmarkE2ELatency measures, on the simulated cluster (test/testbed:
// real kube-apiserver, kwok nodes, pods as network namespaces on one
// private OVS bridge per node) with the real tierflow-controller and one
// tierflow-agent per node (test/e2e/framework), the time from the API
// write of a policy change until its flows are on every node bridge that
// needs them, read from the bridges themselves (ovs-ofctl dump-flows with
// a match filter on the rule's table). Each round changes one namespace:
// NetworkPolicy create, update (port), a pod relabel that makes an idle
// pod a peer and back, delete; then an AdminNetworkPolicy create, update,
// delete.
func BenchmarkE2ELatency(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root (network namespaces, OVS): run as root, e.g. through `make bench`")
	}
	sc := e2eSizes()
	for b.Loop() {
		start := time.Now()
		waitOVSLock(b)
		progressf("starting the test bed (3 nodes)")
		bed := testbed.Start(b, testbed.Options{Nodes: 3, PodCIDRBits: e2ePodCIDRBits})
		tf := framework.Start(b, bed, "")
		progressf("test bed and tierflow up after %.1fs", time.Since(start).Seconds())
		cfg := fastConfig(bed.Cluster.Config)
		kube, pol := clients(b, cfg)
		e := &e2eBed{tf: tf, kube: kube, pol: pol, bridges: map[string]*ovsenv.Bridge{}, watches: map[string]*bridgeWatch{}, ofc: map[string]*openflow.Client{}}
		var nodes []string
		for _, n := range bed.Nodes {
			nodes = append(nodes, n.Name)
			e.bridges[n.Name] = n.Bridge
		}
		b.Cleanup(func() {
			if b.Failed() {
				b.Logf("tierflow logs:\n%s", tf.Logs(30))
			}
		})

		deployTime := e.deploy(b, sc, nodes)
		e.waitAgentsHavePods(b, 5*time.Minute)
		if _, err := tf.WaitRealized(2 * time.Minute); err != nil {
			b.Fatalf("before the changes: %v\n%s", err, tf.Logs(20))
		}
		flows := 0
		for _, n := range nodes {
			br := e.bridges[n]
			fl, err := br.DumpFlows(-1)
			if err != nil {
				b.Fatal(err)
			}
			flows += len(fl)
			e.watches[n] = watchBridge(b, n, br)
			c, err := openflow.Dial(context.Background(), br.MgmtEndpoint(), openflow.Options{})
			if err != nil {
				b.Fatalf("openflow connection to %s: %v", n, err)
			}
			b.Cleanup(func() { c.Close() })
			e.ofc[n] = c
		}
		progressf("agents hold every pod (%d flows on the bridges); timing %d rounds of 8 changes", flows, sc.Rounds)

		samples := map[string][]time.Duration{}
		// stages: per change kind, per benchmeasure.E2EStages, each change's time.
		stages := map[string][][]time.Duration{}
		// writes: how long each change's API write took (in the
		// samples); afterWrite: the rest, from the API server's answer
		// to the last bridge's report (controller, distribution, agents,
		// bundles).
		var writes, afterWrite, calibration, calibAfterReply, readDelays, stampPath []time.Duration
		var loads []float64
		ctx := context.Background()
		const timeout = 2 * time.Minute
		measure := func(kind string, nodes []string, probes []flowProbe, write func() error) {
			b.Helper()
			c, err := e.do(nodes, probes, timeout, write)
			if err != nil {
				// What the bridges hold tells a monitor fault from a
				// realization fault.
				var bridges []string
				for _, n := range nodes {
					for _, p := range probes {
						ok, derr := e.bridgeHolds(n, p)
						bridges = append(bridges, fmt.Sprintf("%s %v: %v %v", n, p, ok, derr))
					}
				}
				b.Fatalf("%s: %v\ndump-flows: %s\n%s", kind, err, strings.Join(bridges, "; "), tf.Logs(20))
			}
			// Cross-check what the monitors reported on the bridges
			// themselves.
			for _, n := range nodes {
				for _, p := range probes {
					ok, err := e.bridgeHolds(n, p)
					if err != nil {
						b.Fatal(err)
					}
					if !ok {
						b.Fatalf("%s: the flow monitor of %s reported %v, dump-flows of its bridge disagrees", kind, n, p)
					}
				}
			}
			took, wrote := c.took(), c.wrote.Sub(c.start)
			samples[kind] = append(samples[kind], took)
			writes, afterWrite = append(writes, wrote), append(afterWrite, took-wrote)
			st, err := e.stagesOf(c)
			if err != nil {
				b.Fatalf("%s: %v", kind, err)
			}
			if stages[kind] == nil {
				stages[kind] = make([][]time.Duration, len(benchmeasure.E2EStages))
			}
			for i, d := range st {
				stages[kind][i] = append(stages[kind][i], d)
			}
		}
		for _, n := range nodes {
			// From here on: the reports of the rounds.
			e.watches[n].takeReadDelays()
		}
		for r := 0; r < sc.Rounds; r++ {
			for _, n := range nodes {
				ds, after, err := e.calibrate(ctx, n, e.ofc[n], r)
				if err != nil {
					b.Fatal(err)
				}
				calibration = append(calibration, ds...)
				calibAfterReply = append(calibAfterReply, after...)
			}
			ds, err := stampPathDelays(20)
			if err != nil {
				b.Fatalf("loopback stamp path: %v", err)
			}
			stampPath = append(stampPath, ds...)
			ns := fmt.Sprintf("lat-%d", r%sc.Namespaces)
			pods := e.pods[ns]
			var servers []framework.Pod
			var idle *framework.Pod
			for i, p := range pods {
				switch {
				case strings.HasPrefix(p.Name, "p") && e2eLabel(podIndex(p.Name)) == "server":
					servers = append(servers, p)
				case idle == nil && e2eLabel(podIndex(p.Name)) == "idle":
					idle = &pods[i]
				}
			}
			if len(servers) == 0 || idle == nil {
				b.Fatalf("namespace %s has no server or idle pod", ns)
			}
			serverNodes := nodesOf(servers)
			allNodes := nodesOf(pods)
			// Ports unique per round and step, so a flow seen is this
			// change's and not a leftover.
			port := int32(10000 + 10*r)
			np := latencyNP(ns, port)
			measure("NetworkPolicy create", serverNodes, []flowProbe{{Table: pipeline.IngressNetworkPolicy, Port: port, Present: true}}, func() error {
				_, err := kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
				return err
			})
			measure("NetworkPolicy update", serverNodes, []flowProbe{{Table: pipeline.IngressNetworkPolicy, Port: port + 1, Present: true}, {Table: pipeline.IngressNetworkPolicy, Port: port, Present: false}}, func() error {
				patch := fmt.Sprintf(`{"spec":{"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"client"}}}],"ports":[{"protocol":"TCP","port":%d}]}]}}`, port+1)
				_, err := kube.NetworkingV1().NetworkPolicies(ns).Patch(ctx, np.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			})
			measure("pod relabel (joins peers)", serverNodes, []flowProbe{{Table: pipeline.IngressNetworkPolicy, PeerIP: idle.IP, Present: true}}, func() error {
				return e.relabel(ns, idle.Name, "client")
			})
			measure("pod relabel (leaves peers)", serverNodes, []flowProbe{{Table: pipeline.IngressNetworkPolicy, PeerIP: idle.IP, Present: false}}, func() error {
				return e.relabel(ns, idle.Name, "idle")
			})
			measure("NetworkPolicy delete", serverNodes, []flowProbe{{Table: pipeline.IngressNetworkPolicy, Port: port + 1, Present: false}}, func() error {
				return kube.NetworkingV1().NetworkPolicies(ns).Delete(ctx, np.Name, metav1.DeleteOptions{})
			})
			anp := latencyANP(fmt.Sprintf("latency-%d", r), ns, int32(100+r%800), port+2)
			measure("AdminNetworkPolicy create", allNodes, []flowProbe{{Table: pipeline.IngressAdmin, Port: port + 2, Present: true}}, func() error {
				_, err := pol.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{})
				return err
			})
			measure("AdminNetworkPolicy update", allNodes, []flowProbe{{Table: pipeline.IngressAdmin, Port: port + 3, Present: true}, {Table: pipeline.IngressAdmin, Port: port + 2, Present: false}}, func() error {
				cur, err := pol.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, anp.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				(*cur.Spec.Ingress[0].Ports)[0].PortNumber.Port = port + 3
				_, err = pol.PolicyV1alpha1().AdminNetworkPolicies().Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
			measure("AdminNetworkPolicy delete", allNodes, []flowProbe{{Table: pipeline.IngressAdmin, Port: port + 3, Present: false}}, func() error {
				return pol.PolicyV1alpha1().AdminNetworkPolicies().Delete(ctx, anp.Name, metav1.DeleteOptions{})
			})
			load, _ := benchmeasure.LoadAverage()
			loads = append(loads, load)
			progressf("round %d of %d done (load %.2f)", r+1, sc.Rounds, load)
		}

		for _, n := range nodes {
			ds, unstamped := e.watches[n].takeReadDelays()
			if unstamped > 0 {
				b.Fatalf("the kernel gave no receive timestamp for %d of the monitor reports of %s", unstamped, n)
			}
			readDelays = append(readDelays, ds...)
		}
		var all []time.Duration
		for kind, ds := range samples {
			slices.Sort(ds)
			all = append(all, ds...)
			reportPercentiles(b, e2eMetricKey(kind), ds)
		}
		allStages := make([][]time.Duration, len(benchmeasure.E2EStages))
		for kind, per := range stages {
			for i, ds := range per {
				allStages[i] = append(allStages[i], ds...)
				reportPercentiles(b, e2eMetricKey(kind)+"-"+benchmeasure.E2EStages[i].Key, ds)
			}
		}
		for i, ds := range allStages {
			reportPercentiles(b, "stage-"+benchmeasure.E2EStages[i].Key, ds)
		}
		// The two event stamps of each change's last commit — the agent's
		// read loop reading the commit reply, this process reading the
		// flow monitor's report — against each other: how well they agree
		// (the monitor stage, either sign).
		var agreement []time.Duration
		for _, d := range allStages[len(allStages)-1] {
			agreement = append(agreement, max(d, -d))
		}
		slices.Sort(agreement)
		b.ReportMetric(msOf(percentile(agreement, 99)), "ack-monitor-agreement-p99-ms")
		slices.Sort(all)
		b.ReportMetric(msOf(percentile(all, 50)), "p50-ms")
		b.ReportMetric(msOf(percentile(all, 90)), "p90-ms")
		b.ReportMetric(msOf(percentile(all, 99)), "p99-ms")
		b.ReportMetric(msOf(all[len(all)-1]), "max-ms")
		b.ReportMetric(float64(len(all)), "changes")
		// The resolution: how late the kernel's stamp of a report can be
		// after the switch's send (METHODS.md, Resolution); and how late
		// this process read the reports after that stamp.
		reportPercentiles(b, "stamp-path", stampPath)
		b.ReportMetric(msOf(percentile(stampPath, 99)), "resolution-ms")
		reportPercentiles(b, "monitor-read-delay", readDelays)
		b.ReportMetric(float64(len(readDelays)), "monitor-reports")
		slices.Sort(calibration)
		b.ReportMetric(msOf(percentile(calibration, 50)), "calib-roundtrip-p50-ms")
		b.ReportMetric(msOf(percentile(calibration, 99)), "calib-roundtrip-p99-ms")
		b.ReportMetric(msOf(calibration[len(calibration)-1]), "calib-roundtrip-max-ms")
		b.ReportMetric(float64(len(calibration)), "calib-samples")
		slices.Sort(calibAfterReply)
		b.ReportMetric(msOf(percentile(calibAfterReply, 50)), "calib-after-reply-p50-ms")
		b.ReportMetric(msOf(percentile(calibAfterReply, 99)), "calib-after-reply-p99-ms")
		for name, ds := range map[string][]time.Duration{"write": writes, "after-write": afterWrite} {
			slices.Sort(ds)
			b.ReportMetric(msOf(percentile(ds, 50)), name+"-p50-ms")
			b.ReportMetric(msOf(percentile(ds, 99)), name+"-p99-ms")
		}
		b.ReportMetric(slices.Min(loads), "rounds-load-min")
		b.ReportMetric(slices.Max(loads), "rounds-load-max")
		b.ReportMetric(float64(flows), "flows")
		b.ReportMetric(float64(sc.Namespaces*sc.PodsPerNamespace), "pods")
		b.ReportMetric(float64(len(nodes)), "nodes")
		b.ReportMetric(deployTime.Seconds(), "pods-s")
	}
}

// reportPercentiles reports p50, p90, p99 and max of ds (sorted in place)
// in ms, as metrics KEY-p50-ms etc.
func reportPercentiles(b *testing.B, key string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(msOf(percentile(ds, 50)), key+"-p50-ms")
	b.ReportMetric(msOf(percentile(ds, 90)), key+"-p90-ms")
	b.ReportMetric(msOf(percentile(ds, 99)), key+"-p99-ms")
	b.ReportMetric(msOf(ds[len(ds)-1]), key+"-max-ms")
}

// e2eMetricKey turns a change kind into a metric unit prefix.
func e2eMetricKey(kind string) string {
	r := strings.NewReplacer("NetworkPolicy", "np", "AdminNetworkPolicy", "anp", "pod relabel (joins peers)", "relabel-join",
		"pod relabel (leaves peers)", "relabel-leave", " ", "-")
	// AdminNetworkPolicy first: it contains NetworkPolicy.
	if strings.HasPrefix(kind, "AdminNetworkPolicy") {
		return "anp-" + strings.TrimPrefix(kind, "AdminNetworkPolicy ")
	}
	return r.Replace(kind)
}

// podIndex is i of a pod named "pI".
func podIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "p%d", &i); err != nil {
		return -1
	}
	return i
}

// relabel sets a pod's app label.
func (e *e2eBed) relabel(ns, name, app string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{"app":%q}}}`, app)
	_, err := e.kube.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
