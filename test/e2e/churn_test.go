package e2e

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/ovsenv"
	"github.com/tierflow/tierflow/test/testbed"
)

// churnChanges is how many backend changes TestEndpointChurn makes (make
// test-services runs the 100; make test a smoke of 20).
var churnChanges = flag.Int("churn-changes", 20, "backend changes TestEndpointChurn makes")

// TestEndpointChurn changes a Service's backends (pods leaving and joining
// its selector: the EndpointSlice controller rewrites the slice, the
// agents their flows) under continuous client load from both nodes:
//
//   - long-lived connections (HTTP keep-alive, a request every 40 ms) to
//     backends that stay in the Service never fail;
//   - a connection to a backend that left ends (its next request fails;
//     the backend may be back by the time the failure shows on a loaded
//     machine: a failure is excused iff the backend left since the last
//     request that succeeded began), within removedBound of the removal:
//     no request on it succeeds later than that while the backend is out,
//     and just before the backend is put back (it is out for removedBound
//     at least) no ESTABLISHED conntrack entry of the Service's address
//     to it is left on any node (the agents flush its connections right
//     after the bundle, and again once the switch revalidated the
//     datapath flows cached from the old tables, which can pick a
//     flushed connection up again mid-stream);
//   - new connections (one every 40 ms per client) succeed, except those
//     the switch balanced to a backend that was leaving (just before its
//     bundle, or through datapath flows not yet revalidated): the
//     conntrack flushes end them, as every connection to a removed
//     backend, and the client sees a timeout or a reset. The bridges show
//     which: such a connection's entry is gone or was picked up again
//     mid-stream (BE_LIBERAL); any other failure is a violation;
//   - none started after the client's node stopped choosing a backend,
//     and opened before the backend was put back, reaches it (the
//     backends keep running: they would answer).
func TestEndpointChurn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, OVS): run as root, e.g. through `make test`")
	}
	// The bed's cleanups log its components' tails after a failure; CI
	// keeps only the tail of the output: the violations are repeated
	// after them (this cleanup runs last).
	var verdict string
	t.Cleanup(func() {
		if verdict != "" {
			t.Log(verdict)
		}
	})
	bed := testbed.Start(t, testbed.Options{Nodes: 2})
	tf := framework.Start(t, bed, "")
	kube := bed.Cluster.Kube
	ctx := context.Background()
	const ns = "churn"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Six backends over both nodes, three in the Service at a time; two
	// clients, one per node.
	var backends []string
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("b%d", i)
		backends = append(backends, name)
		in := "no"
		if i < 3 {
			in = "yes"
		}
		createPod(t, tf, ns, name, fmt.Sprintf("node-%d", i%2+1), map[string]string{"app": "churn", "in": in},
			[]string{"/agnhost", "netexec", "--http-port=8080", "--udp-port=-1"})
	}
	for i, c := range []string{"c1", "c2"} {
		createPod(t, tf, ns, c, fmt.Sprintf("node-%d", i+1), map[string]string{"app": "client"}, []string{"/agnhost", "pause"})
	}
	svc, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "churn"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "churn", "in": "yes"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := tf.Pods(ns)
	if err != nil {
		t.Fatal(err)
	}
	ipOf := map[string]string{}
	var clients []framework.Pod
	for _, p := range pods {
		ipOf[p.Name] = p.IP
		if strings.HasPrefix(p.Name, "c") {
			clients = append(clients, p)
		}
	}
	vip := svc.Spec.ClusterIP + ":80"
	in := map[string]bool{"b0": true, "b1": true, "b2": true}
	// waitChosen waits until every node's bridge chooses exactly the
	// backends in want (the translations in ServiceDNAT), and returns when.
	waitChosen := func(want map[string]bool) time.Time {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			ok := true
			for _, n := range bed.Nodes {
				flows, err := n.Bridge.DumpFlows(int(pipeline.ServiceDNAT.ID()))
				if err != nil {
					t.Fatal(err)
				}
				text := strings.Join(flows, "\n")
				for _, b := range backends {
					if strings.Contains(text, "nat(dst="+ipOf[b]+":8080)") != want[b] {
						ok = false
					}
				}
			}
			if ok {
				return time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("the bridges do not choose exactly %v after 60s\n%s", want, tf.Logs(20))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitChosen(in)

	// outs[b] is every time b was out of the Service, oldest first. The
	// load's verdicts read it, not b's membership when a request fails:
	// on a loaded machine a request can fail seconds after b left, when b
	// may be back.
	var mu sync.Mutex
	outs := map[string][]*outWindow{}
	var violations []string
	violationPorts := map[int]bool{}
	// violate records a violation by client c's connection from port (0:
	// none opened) with the connection's conntrack entries as they are
	// now, on the client's node.
	violate := func(c framework.Pod, port int, format string, args ...any) {
		mu.Lock()
		enough := len(violations) >= 20
		mu.Unlock()
		if enough {
			return
		}
		msg := fmt.Sprintf(format, args...)
		if port != 0 {
			entries := connEntries(bed, c, svc.Spec.ClusterIP, port)
			if len(entries) == 0 {
				entries = []string{"none"}
			}
			msg += fmt.Sprintf(" [port %d; conntrack: %s]", port, strings.Join(entries, " | "))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(violations) < 20 {
			violations = append(violations, msg)
			violationPorts[port] = true
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var newConns, longRequests, endedOnRemoval, endedLeaving atomic.Int64
	// slowest is the longest a successful request took (a new
	// connection's with its opening), for the log.
	var slowest atomic.Int64
	noteSlow := func(since time.Time) {
		d := int64(time.Since(since))
		for {
			old := slowest.Load()
			if d <= old || slowest.CompareAndSwap(old, d) {
				return
			}
		}
	}

	// New connections.
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(40 * time.Millisecond):
				}
				start := time.Now()
				host, port, connected, err := hostnameOnce(c, vip)
				if err != nil {
					if port != 0 && flushed(connEntries(bed, c, svc.Spec.ClusterIP, port)) {
						endedLeaving.Add(1)
						continue
					}
					violate(c, port, "%s: new connection at %s: %v", c.Name, start.Format("15:04:05.000"), err)
					continue
				}
				newConns.Add(1)
				noteSlow(start)
				// Started after the bridges stopped choosing host and
				// connected before it was put back.
				mu.Lock()
				var at time.Time
				for _, w := range outs[host] {
					if !w.removed.IsZero() && !start.Before(w.removed) && (w.joined.IsZero() || connected.Before(w.joined)) {
						at = w.removed
					}
				}
				mu.Unlock()
				if !at.IsZero() {
					violate(c, port, "%s: new connection at %s reached %s, removed at %s", c.Name, start.Format("15:04:05.000"), host, at.Format("15:04:05.000"))
				}
			}
		}()
	}
	// Long-lived connections: each client keeps four, replacing any that
	// ends because its backend left.
	for _, c := range clients {
		for k := 0; k < 4; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					lc, err := dialKeepAlive(c, vip)
					if err != nil {
						violate(c, 0, "%s: opening a long-lived connection: %v", c.Name, err)
						time.Sleep(100 * time.Millisecond)
						continue
					}
					lastOK := time.Now()
					host, err := lc.hostname()
					if err != nil {
						if flushed(connEntries(bed, c, svc.Spec.ClusterIP, lc.localPort())) {
							endedLeaving.Add(1)
						} else {
							violate(c, lc.localPort(), "%s: first request of a long-lived connection at %s: %v", c.Name, time.Now().Format("15:04:05.000"), err)
						}
						lc.Close()
						continue
					}
					for {
						select {
						case <-stop:
							lc.Close()
							return
						case <-time.After(40 * time.Millisecond):
						}
						sent := time.Now()
						h, err := lc.hostname()
						if err == nil && h == host {
							longRequests.Add(1)
							noteSlow(sent)
							lastOK = sent
							// Sent while host was out, removedBound
							// after its removal: the flushes missed it.
							mu.Lock()
							var since time.Time
							if ws := outs[host]; len(ws) > 0 {
								if last := ws[len(ws)-1]; !last.removed.IsZero() && sent.After(last.removed.Add(removedBound)) && (last.joined.IsZero() || sent.Before(last.joined)) {
									since = last.removed
								}
							}
							mu.Unlock()
							if !since.IsZero() {
								violate(c, lc.localPort(), "%s: long-lived connection to %s answered a request sent at %s, %v after its removal at %s",
									c.Name, host, sent.Format("15:04:05.000"), sent.Sub(since).Round(time.Millisecond), since.Format("15:04:05.000"))
								lc.Close()
								break
							}
							continue
						}
						// The backend left since the last request that
						// succeeded began (and may be back by now): the
						// flush after it left ends the connection.
						mu.Lock()
						var gone bool
						if ws := outs[host]; len(ws) > 0 {
							last := ws[len(ws)-1]
							gone = last.joined.IsZero() || last.joined.After(lastOK)
						}
						mu.Unlock()
						if !gone {
							violate(c, lc.localPort(), "%s: long-lived connection to %s (still a backend) failed at %s: %q %v", c.Name, host, time.Now().Format("15:04:05.000"), h, err)
						} else {
							endedOnRemoval.Add(1)
						}
						lc.Close()
						break
					}
				}
			}()
		}
	}

	// The churn: take a backend out and put another in, one change at a
	// time, each realized before the next.
	patch := func(name, value string) {
		t.Helper()
		body := fmt.Sprintf(`{"metadata":{"labels":{"in":%q}}}`, value)
		if _, err := kube.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// stillOutCheck: b, out since removed, has no connection left
	// (called removedBound after that at least, while b is still out).
	var outChecks int
	stillOutCheck := func(b string, removed time.Time) {
		outChecks++
		if left := establishedTo(bed, svc.Spec.ClusterIP, ipOf[b]); len(left) > 0 {
			violate(framework.Pod{}, 0, "%s, removed at %s, still out %v later: ESTABLISHED connections to it:\n    %s",
				b, removed.Format("15:04:05.000"), time.Since(removed).Round(time.Millisecond), strings.Join(left, "\n    "))
		}
	}
	start := time.Now()
	var took []time.Duration
	var timeline []string
	for i := 0; i < *churnChanges; i++ {
		var name string
		mu.Lock()
		if i%2 == 1 {
			// The backend out the longest (one never in first) goes
			// back in, once it is out for removedBound: first, its
			// connections are gone.
			var removed time.Time
			for _, b := range backends {
				if in[b] {
					continue
				}
				var r time.Time
				if ws := outs[b]; len(ws) > 0 {
					r = ws[len(ws)-1].removed
				}
				if name == "" || r.Before(removed) {
					name, removed = b, r
				}
			}
			mu.Unlock()
			if !removed.IsZero() {
				time.Sleep(time.Until(removed.Add(removedBound)))
				stillOutCheck(name, removed)
			}
			mu.Lock()
		}
		if i%2 == 0 {
			// Out: the oldest backend in.
			for _, b := range backends {
				if in[b] {
					name = b
					break
				}
			}
			in[name] = false
			outs[name] = append(outs[name], &outWindow{})
		} else {
			in[name] = true
			// From the patch on, a node may choose it again.
			if ws := outs[name]; len(ws) > 0 {
				ws[len(ws)-1].joined = time.Now()
			}
		}
		want := map[string]bool{}
		for b, v := range in {
			want[b] = v
		}
		mu.Unlock()
		t0 := time.Now()
		if want[name] {
			patch(name, "yes")
		} else {
			patch(name, "no")
		}
		at := waitChosen(want)
		took = append(took, at.Sub(t0))
		timeline = append(timeline, fmt.Sprintf("%s %s: patched %s, bridges done %s", name,
			map[bool]string{true: "joins", false: "leaves"}[want[name]], t0.Format("15:04:05.000"), at.Format("15:04:05.000")))
		if !want[name] {
			mu.Lock()
			ws := outs[name]
			ws[len(ws)-1].removed = at
			mu.Unlock()
		}
		// Let the load see each state.
		time.Sleep(300 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// The backends still out.
	for _, b := range backends {
		if ws := outs[b]; !in[b] && len(ws) > 0 {
			removed := ws[len(ws)-1].removed
			time.Sleep(time.Until(removed.Add(removedBound)))
			stillOutCheck(b, removed)
		}
	}
	var total time.Duration
	var worst time.Duration
	for _, d := range took {
		total += d
		worst = max(worst, d)
	}
	t.Logf("%d backend changes in %v (label change to flows on both nodes: mean %v, worst %v); %d new connections, %d requests on long-lived ones, %d long-lived connections ended with their backend, %d connections balanced to a leaving backend ended; %d removals checked for connections left %v after; slowest successful request %v",
		len(took), time.Since(start).Round(time.Second), (total / time.Duration(len(took))).Round(time.Millisecond), worst.Round(time.Millisecond),
		newConns.Load(), longRequests.Load(), endedOnRemoval.Load(), endedLeaving.Load(), outChecks, removedBound, time.Duration(slowest.Load()).Round(time.Millisecond))
	if len(violations) > 0 {
		// The violations come last: CI keeps only the tail of the output.
		t.Logf("what the bridges say now:\n%s", churnEvidence(bed, svc.Spec.ClusterIP, violationPorts))
		t.Logf("logs:\n%s", tf.Logs(20))
		t.Logf("changes:\n  %s", strings.Join(timeline, "\n  "))
		verdict = fmt.Sprintf("%d violations (the changes, logs and bridges' state above):\n  %s", len(violations), strings.Join(violations, "\n  "))
		t.Fatal(verdict)
	}
	if endedOnRemoval.Load() == 0 || newConns.Load() < int64(len(took)) {
		t.Fatalf("the load saw too little: %d new connections, %d long-lived ones ended", newConns.Load(), endedOnRemoval.Load())
	}
}

// removedBound is how long after its removal (every bridge stopped
// choosing it) a backend may still have a connection: the agent's second
// flush waits for two dumps of ovs-vswitchd's revalidators (each well
// under a second, every 500 ms when idle), and may have to wait for the
// round before it; loaded CI machines are slow.
const removedBound = 3 * time.Second

// establishedTo is every node's ESTABLISHED conntrack entries of
// connections to vip whose reply comes from backend (port 8080).
func establishedTo(bed *testbed.Testbed, vip, backend string) []string {
	var out []string
	for _, ct := range bedConntrack(bed) {
		if ct.err != nil {
			out = append(out, ct.node+": dump-conntrack: "+ct.err.Error())
			continue
		}
		for _, l := range ct.entries {
			if strings.Contains(l, ",dst="+vip+",") && strings.Contains(l, "reply=(src="+backend+",") && strings.Contains(l, ",sport=8080,") &&
				strings.Contains(l, "=ESTABLISHED") {
				out = append(out, ct.node+": "+l)
			}
		}
	}
	return out
}

// nodeConntrack is the conntrack entries (dpctl/dump-conntrack -m, one
// per line, trimmed) of one switch of the bed, named by its first node.
type nodeConntrack struct {
	node    string
	entries []string
	err     error
}

// bedConntrack reads the conntrack of each switch of the bed once: each
// node's own on the encap bed, the shared one otherwise.
func bedConntrack(bed *testbed.Testbed) []nodeConntrack {
	seen := map[*ovsenv.Env]bool{}
	var out []nodeConntrack
	for _, n := range bed.Nodes {
		if seen[n.OVS] {
			continue
		}
		seen[n.OVS] = true
		ct, err := n.OVS.Appctl("dpctl/dump-conntrack", "-m")
		c := nodeConntrack{node: n.Name, err: err}
		for _, l := range strings.Split(ct, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				c.entries = append(c.entries, l)
			}
		}
		out = append(out, c)
	}
	return out
}

// outWindow is a time a backend was out of TestEndpointChurn's Service,
// from the patch that took it out: when every bridge stopped choosing it
// (removed; zero until then) and the patch that put it back (joined;
// zero while it is out).
type outWindow struct{ removed, joined time.Time }

// createPod creates a pod with command on node and waits for it to run.
func createPod(t *testing.T, tf *framework.Tierflow, ns, name, node string, labels map[string]string, command []string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Command: command}}}}
	if _, err := tf.Bed.Cluster.Kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := tf.Bed.Cluster.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not running: %v", ns, name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hostnameOnce asks netexec's /hostname on a new connection from pod c;
// port is the connection's local port (0 if it did not open), connected
// when it opened.
func hostnameOnce(c framework.Pod, addr string) (host string, port int, connected time.Time, err error) {
	lc, err := dialKeepAlive(c, addr)
	if err != nil {
		return "", 0, time.Time{}, err
	}
	connected = time.Now()
	defer lc.Close()
	host, err = lc.hostname()
	return host, lc.localPort(), connected, err
}

// connEntries is the conntrack entries (dpctl/dump-conntrack -m) of
// client c's connection from port to the Service address, in the OVS of
// c's node (the bed's shared one, or the node's own on the encap bed).
func connEntries(bed *testbed.Testbed, c framework.Pod, vip string, port int) []string {
	var ovs *ovsenv.Env
	for _, n := range bed.Nodes {
		if n.Name == c.Node {
			ovs = n.OVS
		}
	}
	if ovs == nil {
		return nil
	}
	ct, err := ovs.Appctl("dpctl/dump-conntrack", "-m")
	if err != nil {
		return []string{"(dump-conntrack: " + err.Error() + ")"}
	}
	key := fmt.Sprintf("orig=(src=%s,dst=%s,sport=%d,", c.IP, vip, port)
	var entries []string
	for _, l := range strings.Split(ct, "\n") {
		if strings.Contains(l, key) {
			entries = append(entries, strings.TrimSpace(l))
		}
	}
	return entries
}

// flushed says whether a connection with these conntrack entries was
// ended by a conntrack flush: its entry in the client node's zone is gone,
// or the connection was picked up again mid-stream (BE_LIBERAL) after the
// flush. Flushes end only connections to removed backends; a failed
// connection to a backend that stays keeps its entry.
func flushed(entries []string) bool {
	for _, l := range entries {
		if !strings.Contains(l, "BE_LIBERAL") {
			return false
		}
	}
	return true
}

// churnTimeout bounds a connection's opening and each of its requests. A
// connection to a backend that stays is never dropped or reset, so a
// failure is a failure whatever the bound; the bound only keeps a slow
// answer on a loaded machine (CI runs this beside other packages' tests,
// at a load of 5 to 15 on two cores) from reading as one. A connection
// the bridges break still fails: a reset at once, a drop at the bound.
const churnTimeout = 10 * time.Second

// keepAlive is one HTTP/1.1 connection opened in a pod's network
// namespace, reused for every request.
type keepAlive struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialKeepAlive(c framework.Pod, addr string) (*keepAlive, error) {
	var conn net.Conn
	err := ovsenv.InNetns("/run/netns/"+c.Netns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, churnTimeout)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &keepAlive{conn: conn, r: bufio.NewReader(conn)}, nil
}

func (k *keepAlive) hostname() (string, error) {
	_ = k.conn.SetDeadline(time.Now().Add(churnTimeout))
	if _, err := fmt.Fprintf(k.conn, "GET /hostname HTTP/1.1\r\nHost: churn\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
		return "", err
	}
	return b.String(), nil
}

func (k *keepAlive) Close() { k.conn.Close() }

func (k *keepAlive) localPort() int {
	if a, ok := k.conn.LocalAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// churnEvidence is what the bridges say after a failed run: the drop
// flows that dropped packets, the conntrack entries of the Service's
// address from the violations' ports (all of them are too many to read:
// the rest only counted by zone and state) and the fabric's MAC table.
func churnEvidence(bed *testbed.Testbed, vip string, ports map[int]bool) string {
	var b strings.Builder
	for _, n := range bed.Nodes {
		flows, _ := n.Bridge.DumpFlowsWithStats(-1)
		for _, f := range flows {
			if strings.Contains(f, "n_packets=0,") || !(strings.HasSuffix(f, "actions=drop") || strings.Contains(f, "actions=controller")) {
				continue
			}
			fmt.Fprintf(&b, "%s dropped: %s\n", n.Name, f)
		}
	}
	for _, ct := range bedConntrack(bed) {
		counts := map[string]int{}
		for _, l := range ct.entries {
			if !strings.Contains(l, "dst="+vip+",") {
				continue
			}
			if m := sportRe.FindStringSubmatch(l); m != nil {
				if p, _ := strconv.Atoi(m[1]); ports[p] {
					fmt.Fprintf(&b, "%s conntrack: %s\n", ct.node, l)
				}
			}
			zone, state := "0", "?"
			if m := zoneRe.FindStringSubmatch(l); m != nil {
				zone = m[1]
			}
			if m := stateRe.FindStringSubmatch(l); m != nil {
				state = m[1]
			}
			counts["zone="+zone+" "+state]++
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s conntrack of %s: %s: %d\n", ct.node, vip, k, counts[k])
		}
	}
	if bed.Fabric != nil {
		fdb, _ := bed.OVS.Appctl("fdb/show", bed.Fabric.Name)
		fmt.Fprintf(&b, "fabric fdb:\n%s", fdb)
	}
	return b.String()
}

var (
	sportRe = regexp.MustCompile(`orig=\(src=[^,]*,dst=[^,]*,sport=(\d+),`)
	zoneRe  = regexp.MustCompile(`zone=(\d+)`)
	stateRe = regexp.MustCompile(`state(?:_orig)?=(\w+)`)
)
