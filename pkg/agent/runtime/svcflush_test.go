package runtime_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/pkg/agent/pipeline"
	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestServiceFlushAfterRevalidation opens, with ovs-vswitchd's
// revalidators paused (ovs-appctl revalidator/pause), the window between
// the bundle that stops choosing a Service endpoint and the revalidation
// of the datapath flows cached from the old tables, which on a loaded
// node lasts hundreds of milliseconds:
//
//   - an endpoint leaves: after the agent's first flush, the next packet
//     of a long-lived connection to it, and a new connection, still reach
//     it through the stale datapath flow (the cause, shown); once the
//     revalidators run, the agent's second flush ends both: no conntrack
//     entry to it is left, the connections fail;
//   - an endpoint leaves and comes back before the revalidation: the
//     second flush leaves it out, its connection opened after its return
//     goes on;
//   - an agent that cannot reach ovs-vswitchd's control socket counts
//     that (revalidator-wait) and flushes again after a fixed wait.
func TestServiceFlushAfterRevalidation(t *testing.T) {
	bed := startFlushBed(t, nil)
	env, a, b, e, vip, setEndpoints := bed.env, bed.a, bed.b, bed.e, bed.vip, bed.setEndpoints
	ag, opts, zone := bed.ag, bed.opts, flushZone
	metric := metricReader(t, ag)
	flushes := func(when string) int { return metric("tierflow_agent_service_conntrack_flushes_total", "when", when) }

	endpointOf := func(conn *ovsenv.Conn) (netip.Addr, string) {
		t.Helper()
		return ctEntry(t, env, zone, conn.LocalAddr())
	}
	pause, resume := bed.revalidators(t)

	// 1. b leaves for good.
	long := bed.dialB(t)
	defer long.Close()
	pause()
	f0 := flushes("bundle")
	setEndpoints(e)
	livecluster.Eventually(t, 10*time.Second, "the first flush", func() error {
		if flushes("bundle") == f0 {
			return fmt.Errorf("no flush yet")
		}
		if ep, _ := endpointOf(long); ep.IsValid() {
			return fmt.Errorf("the connection's entry is still there (to %v)", ep)
		}
		return nil
	})
	// The window: the datapath flow the connection's first packet left
	// (conntrack new → the old group's choice, b) still acts.
	revived := long.Exchange("in the window", 3*time.Second) == nil
	ep, state := endpointOf(long)
	var fresh *ovsenv.Conn
	for i := 0; i < 8 && fresh == nil; i++ {
		conn, err := a.DialTCP(vip, 2*time.Second)
		if err != nil {
			continue
		}
		if to, _ := endpointOf(conn); to == b.IPv4() {
			fresh = conn
			defer conn.Close()
		} else {
			conn.Close()
		}
	}
	t.Logf("in the window: the long-lived connection's next packet answered: %v (conntrack: to %v, %s); a new connection reached b: %v", revived, ep, state, fresh != nil)
	if !revived && fresh == nil {
		t.Fatalf("with the revalidators paused neither the long-lived connection nor a new one reached the removed endpoint: the window this test closes did not open")
	}
	r0 := flushes("revalidated")
	resume()
	livecluster.Eventually(t, 30*time.Second, "the second flush", func() error {
		if flushes("revalidated") == r0 {
			return fmt.Errorf("no second flush yet")
		}
		return nil
	})
	if left := ctEntriesTo(t, env, zone, b.IPv4()); len(left) != 0 {
		t.Fatalf("after the second flush, conntrack entries to the removed endpoint b:\n%s", strings.Join(left, "\n"))
	}
	if err := long.Exchange("after", 3*time.Second); err == nil {
		t.Errorf("the long-lived connection to the removed endpoint still answers after the second flush")
	}
	if fresh != nil {
		if err := fresh.Exchange("after", 3*time.Second); err == nil {
			t.Errorf("the connection opened to b in the window still answers after the second flush")
		}
	}

	// 2. e leaves and comes back before the revalidation: its connection
	// opened after its return stays.
	setEndpoints(b, e)
	if _, err := env.Appctl("revalidator/wait"); err != nil {
		t.Fatal(err)
	}
	pause()
	f0, back0 := flushes("bundle"), flushes("back")
	setEndpoints(b)
	livecluster.Eventually(t, 10*time.Second, "the first flush", func() error {
		if flushes("bundle") == f0 {
			return fmt.Errorf("no flush yet")
		}
		return nil
	})
	setEndpoints(b, e)
	var toE *ovsenv.Conn
	for i := 0; i < 32 && toE == nil; i++ {
		conn, err := a.DialTCP(vip, 2*time.Second)
		if err != nil {
			continue
		}
		if to, _ := endpointOf(conn); to == e.IPv4() {
			toE = conn
			defer conn.Close()
		} else {
			conn.Close()
		}
	}
	if toE == nil {
		t.Fatalf("no connection reached e after its return (32 tries)")
	}
	resume()
	livecluster.Eventually(t, 30*time.Second, "the second flush leaves the returned endpoint out", func() error {
		if flushes("back") == back0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err := toE.Exchange("after", 3*time.Second); err != nil {
		t.Errorf("the connection to e, opened after its return: %v", err)
	}
	if ep, state := endpointOf(toE); ep != e.IPv4() || state != "ESTABLISHED" {
		t.Errorf("the connection to e: conntrack to %v %s, want e ESTABLISHED", ep, state)
	}

	// 3. No control socket: the second flush comes after a fixed wait.
	ag.Stop()
	opts.VswitchdCtl = filepath.Join(t.TempDir(), "no-such.ctl")
	ag = livecluster.StartAgent(t, "n1", opts)
	ag.RealizedOn(t)
	metric = metricReader(t, ag)
	flushes = func(when string) int { return metric("tierflow_agent_service_conntrack_flushes_total", "when", when) }
	setEndpoints(b)
	livecluster.Eventually(t, 30*time.Second, "the second flush without a control socket", func() error {
		if n := flushes("revalidated"); n == 0 {
			return fmt.Errorf("no second flush yet (first: %d)", flushes("bundle"))
		}
		return nil
	})
	if n := metric("tierflow_agent_openflow_errors_total", "op", "revalidator-wait"); n == 0 {
		t.Errorf("the failed revalidator/wait is not counted")
	}
}

// flushZone is the conntrack zone of the Service flush tests' agent.
const flushZone = 3

// flushBed is the Service flush tests' node: one bridge with a client pod
// a and two pods b and e listening on TCP 8080, the Service web (port 80
// to 8080) whose EndpointSlice names b, the controller, and an agent with
// the Service proxy on, realized, whose Service answers at vip.
type flushBed struct {
	c       *livecluster.Cluster
	env     *ovsenv.Env
	br      *ovsenv.Bridge
	a, b, e *ovsenv.Pod
	vip     netip.AddrPort
	opts    runtime.Options
	ag      *livecluster.Agent
	// setEndpoints rewrites the slice and waits until the bridge chooses
	// exactly pods (read from the bridge itself).
	setEndpoints func(pods ...*ovsenv.Pod)
}

// startFlushBed starts a flushBed; tune, when set, adjusts the agent's
// options before it starts.
func startFlushBed(t *testing.T, tune func(br *ovsenv.Bridge, opts *runtime.Options)) *flushBed {
	t.Helper()
	c := livecluster.New(t)
	kubeconfig := agentKubeconfig(t, c)
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	br := env.AddBridge("n1")
	bed := &flushBed{c: c, env: env, br: br,
		a: br.AddPod("a", nil, netip.MustParsePrefix("10.0.0.1/16")),
		b: br.AddPod("b", nil, netip.MustParsePrefix("10.0.0.2/16")),
		e: br.AddPod("e", nil, netip.MustParsePrefix("10.0.0.3/16")),
	}
	bed.b.ListenTCP(8080)
	bed.e.ListenTCP(8080)
	tok := c.AddNode(t, "n1")
	c.AddPod(t, bed.a, "n1", map[string]string{"app": "a"})
	c.AddPod(t, bed.b, "n1", map[string]string{"app": "web"})
	c.AddPod(t, bed.e, "n1", map[string]string{"app": "web"})
	ctx := context.Background()
	svc, err := c.Kube.Kube.CoreV1().Services(ovsenv.PodNamespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices := c.Kube.Kube.DiscoveryV1().EndpointSlices(ovsenv.PodNamespace)
	name, proto, port := "http", corev1.ProtocolTCP, int32(8080)
	sl, err := slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{bed.b.IPv4().String()}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bed.setEndpoints = func(pods ...*ovsenv.Pod) {
		t.Helper()
		sl.Endpoints = nil
		for _, p := range pods {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IPv4().String()}})
		}
		if sl, err = slices.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		livecluster.Eventually(t, 30*time.Second, fmt.Sprintf("the bridge chooses %d endpoints", len(pods)), func() error {
			flows, err := br.DumpFlows(int(pipeline.ServiceDNAT.ID()))
			if err != nil {
				return err
			}
			text := strings.Join(flows, "\n")
			for _, p := range []*ovsenv.Pod{bed.b, bed.e} {
				want := false
				for _, q := range pods {
					want = want || q == p
				}
				if strings.Contains(text, "nat(dst="+p.IPv4().String()+":8080)") != want {
					return fmt.Errorf("pod %s chosen: %v, want %v", p.Name, !want, want)
				}
			}
			return nil
		})
	}
	c.StartController(t)
	bed.opts = c.AgentOptions(env, br, "n1", tok, flushZone)
	bed.opts.Config.ServiceProxy.Enabled = true
	bed.opts.Config.Kubeconfig = kubeconfig
	if tune != nil {
		tune(br, &bed.opts)
	}
	bed.ag = livecluster.StartAgent(t, "n1", bed.opts)
	bed.ag.RealizedOn(t)
	bed.vip = netip.MustParseAddrPort(svc.Spec.ClusterIP + ":80")
	livecluster.Eventually(t, 60*time.Second, "the Service answers", func() error { return bed.a.ProbeTCP(bed.vip, 3*time.Second) })
	return bed
}

// revalidators returns pause and resume of the switch's revalidators
// (ovs-appctl revalidator/pause, /resume); paused ones are resumed at the
// test's end.
func (bed *flushBed) revalidators(t *testing.T) (pause, resume func()) {
	paused := false
	appctl := func(cmd string) {
		t.Helper()
		if out, err := bed.env.Appctl(cmd); err != nil {
			t.Fatalf("%s: %v %s", cmd, err, out)
		}
		paused = cmd == "revalidator/pause"
	}
	t.Cleanup(func() {
		if paused {
			_, _ = bed.env.Appctl("revalidator/resume")
		}
	})
	return func() { t.Helper(); appctl("revalidator/pause") }, func() { t.Helper(); appctl("revalidator/resume") }
}

// dialB opens a connection from a to the Service while b is its only
// endpoint, exchanges a message, and checks that conntrack sent it to b.
func (bed *flushBed) dialB(t *testing.T) *ovsenv.Conn {
	t.Helper()
	conn, err := bed.a.DialTCP(bed.vip, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exchange("before", 3*time.Second); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if ep, _ := ctEntry(t, bed.env, flushZone, conn.LocalAddr()); ep != bed.b.IPv4() {
		out, _ := bed.env.Appctl("dpctl/dump-conntrack", "-m")
		conn.Close()
		t.Fatalf("the connection from %v went to %v, want b %v; conntrack:\n%s", conn.LocalAddr(), ep, bed.b.IPv4(), out)
	}
	return conn
}

// metricReader reads one of the agent's counters with one label (0 while
// it has no such series), from a fresh scrape each time.
func metricReader(t *testing.T, ag *livecluster.Agent) func(name, label, value string) int {
	return func(name, label, value string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + name + `\{` + label + `="` + value + `"\} (\d+)$`).FindStringSubmatch(scrape(t, ag))
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
}

var ctLine = regexp.MustCompile(`orig=\(src=([^,]+),dst=[^,]+,sport=(\d+),dport=\d+\),reply=\(src=([^,]+),dst=[^,]+,sport=\d+,dport=\d+\),(?:id=\d+,)?zone=(\d+)`)

// ctEntry is the endpoint (reply source) and TCP state of the conntrack
// entry of the connection from client in zone (invalid address: none).
func ctEntry(t *testing.T, env *ovsenv.Env, zone int, client netip.AddrPort) (netip.Addr, string) {
	t.Helper()
	out, err := env.Appctl("dpctl/dump-conntrack", "-m")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		m := ctLine.FindStringSubmatch(l)
		if m == nil || m[1] != client.Addr().String() || m[2] != strconv.Itoa(int(client.Port())) || m[4] != strconv.Itoa(zone) {
			continue
		}
		state := ""
		if s := regexp.MustCompile(`state(?:_orig)?=([A-Z_0-9]+)`).FindStringSubmatch(l); s != nil {
			state = s[1]
		}
		ep, _ := netip.ParseAddr(m[3])
		return ep, state
	}
	return netip.Addr{}, ""
}

// ctEntriesTo are zone's ESTABLISHED conntrack entries whose reply
// source is ep.
func ctEntriesTo(t *testing.T, env *ovsenv.Env, zone int, ep netip.Addr) []string {
	t.Helper()
	out, err := env.Appctl("dpctl/dump-conntrack", "-m")
	if err != nil {
		t.Fatal(err)
	}
	var res []string
	for _, l := range strings.Split(out, "\n") {
		if m := ctLine.FindStringSubmatch(l); m != nil && m[3] == ep.String() && m[4] == strconv.Itoa(zone) && strings.Contains(l, "=ESTABLISHED") {
			res = append(res, l)
		}
	}
	return res
}
