package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/e2e/framework"
	"github.com/tierflow/tierflow/test/testbed"
)

// workloads: pods a and b of every tenant namespace on different nodes.
var workloads = []framework.Workload{
	{Namespace: "x", Labels: map[string]string{"tenant": "blue"}, Pods: map[string]string{"a": "node-1", "b": "node-2"}},
	{Namespace: "y", Labels: map[string]string{"tenant": "blue"}, Pods: map[string]string{"a": "node-2", "b": "node-1"}},
	{Namespace: "z", Labels: map[string]string{"tenant": "red"}, Pods: map[string]string{"a": "node-1", "b": "node-2"}},
	{Namespace: "m", Labels: map[string]string{"role": "monitoring"}, Pods: map[string]string{"a": "node-2"}},
}

func init() {
	for i := range workloads {
		workloads[i].PodLabels = map[string]map[string]string{"a": {"app": "web"}, "b": {"app": "db"}}
	}
}

// cell is a connection whose verdict the story states.
type cell struct {
	src, dst, port string
	want           explain.Verdict
}

const (
	allow = explain.VerdictAllow
	deny  = explain.VerdictDeny
)

// stated: per scenario file, cells whose verdict follows from the story's
// text (see the comment at the top of each manifest).
var stated = map[string][]cell{
	"":                          {{"x/a", "y/a", "TCP/80", allow}, {"m/a", "z/b", "UDP/81", allow}},
	"kep2091-story1-deny.yaml":  {{"x/a", "y/a", "TCP/80", deny}, {"x/b", "y/b", "UDP/81", deny}, {"z/a", "x/b", "TCP/80", deny}, {"z/a", "x/b", "TCP/81", allow}, {"m/a", "y/b", "UDP/81", allow}},
	"kep2091-story2-allow.yaml": {{"m/a", "x/a", "TCP/80", allow}, {"y/a", "x/a", "TCP/80", deny}},
	"kep2091-story3-pass.yaml":  {{"x/a", "y/b", "TCP/80", allow}, {"x/a", "y/b", "TCP/81", deny}, {"z/a", "x/a", "TCP/80", deny}, {"x/b", "x/a", "UDP/80", allow}},
	"kep2091-story4-tenants.yaml": {{"z/a", "x/a", "TCP/80", deny}, {"x/a", "z/b", "UDP/80", deny},
		{"m/a", "x/a", "TCP/80", allow}, {"y/a", "x/b", "TCP/81", allow}},
	"kep2091-story5-baseline.yaml": {{"y/a", "x/a", "TCP/80", allow}, {"z/a", "x/a", "TCP/80", deny}, {"x/a", "x/b", "TCP/80", deny}, {"m/a", "z/a", "UDP/80", deny}},
	"npep122-4.1-overridable-tenancy.yaml": {{"y/a", "z/a", "TCP/80", deny}, {"x/a", "z/a", "TCP/80", allow},
		{"z/a", "x/a", "TCP/80", deny}, {"m/a", "x/a", "TCP/80", allow}, {"m/a", "z/a", "TCP/80", deny}},
	"npep122-4.2-strict-tenancy.yaml":    {{"x/a", "z/a", "TCP/80", deny}, {"y/b", "x/a", "TCP/80", allow}},
	"npep122-4.3-tenant-internal.yaml":   {{"y/a", "x/a", "TCP/80", allow}, {"z/a", "x/a", "TCP/80", deny}, {"m/a", "y/a", "TCP/80", deny}, {"z/b", "z/a", "UDP/81", allow}},
	"npep122-4.4-tenancy-and-admin.yaml": {{"m/a", "z/a", "TCP/80", allow}, {"z/a", "y/a", "TCP/80", deny}, {"x/a", "y/a", "TCP/80", allow}, {"x/a", "m/a", "TCP/80", deny}},
	"np-default-deny-ingress.yaml":       {{"y/a", "x/a", "TCP/80", deny}, {"x/a", "y/a", "TCP/80", allow}},
	"np-default-deny-egress.yaml":        {{"x/a", "y/a", "TCP/80", deny}, {"y/a", "x/a", "TCP/80", allow}},
	"np-allow-all-ingress.yaml":          {{"y/a", "x/a", "TCP/80", allow}, {"z/b", "x/b", "UDP/81", allow}},
	"np-namespace-isolation.yaml":        {{"x/b", "x/a", "TCP/80", allow}, {"y/a", "x/a", "TCP/80", deny}, {"x/a", "z/a", "TCP/80", allow}},
	"np-ipblock-except.yaml":             {{"x/a", "y/a", "TCP/80", deny}, {"x/a", "y/b", "TCP/80", deny}, {"x/b", "y/b", "TCP/80", allow}, {"z/b", "y/b", "TCP/80", allow}, {"z/a", "y/b", "TCP/80", deny}},
	"np-ports-endport.yaml":              {{"z/a", "y/a", "TCP/81", allow}, {"z/a", "y/a", "TCP/80", deny}, {"x/a", "y/a", "UDP/80", allow}, {"z/a", "y/a", "UDP/80", deny}},
	"np-named-ports.yaml":                {{"y/a", "z/a", "UDP/81", allow}, {"y/a", "z/a", "UDP/80", deny}, {"x/a", "y/a", "TCP/80", allow}, {"x/a", "y/a", "TCP/81", deny}, {"x/b", "y/a", "TCP/81", allow}},
	"np-pod-and-namespace-selector.yaml": {{"y/b", "x/a", "TCP/80", allow}, {"y/a", "x/a", "TCP/80", deny}, {"z/b", "x/a", "TCP/80", deny}, {"y/a", "x/b", "TCP/80", allow}},
	"svc-anp-egress-deny-namespace.yaml": {{"x/a", "y/a", "TCP/80", deny}, {"x/b", "y/b", "UDP/81", deny}, {"x/a", "z/a", "TCP/80", allow}, {"y/a", "x/a", "TCP/80", allow}},
	"svc-np-egress-to-pods-behind-service.yaml": {{"x/a", "y/b", "TCP/80", allow}, {"x/b", "y/b", "UDP/81", allow}, {"x/a", "y/a", "TCP/80", deny},
		{"x/a", "z/b", "TCP/80", deny}, {"y/a", "x/a", "TCP/80", allow}},
}

func TestScenarios(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, OVS): run as root, e.g. through `make test`")
	}
	files, err := filepath.Glob("scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	sort.Strings(files)
	for _, f := range files {
		if _, ok := stated[filepath.Base(f)]; !ok {
			t.Errorf("scenario %s has no stated cells in e2e_test.go", f)
		}
	}

	bed := testbed.Start(t, testbed.Options{Nodes: 2, Encap: testbed.EncapFromEnv()})
	tf := framework.Start(t, bed, "")
	pods, err := tf.Deploy(workloads...)
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, tf.Logs(20))
	}
	// Every pod behind a Service of its own: each matrix is probed by pod
	// address and through the Services (the agents' Service proxy), where
	// policy must decide the same, on the pod.
	if pods, err = tf.ExposePods(pods); err != nil {
		t.Fatalf("services: %v\n%s", err, tf.Logs(20))
	}
	for _, p := range pods {
		t.Logf("pod %s on %s at %s, Service %s", p, p.Node, p.IP, p.ServiceIP)
	}
	t.Run("no-policy", func(t *testing.T) { runScenario(t, tf, pods, "") })
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) { runScenario(t, tf, pods, f) })
	}
	t.Run("dns-through-kube-dns-service", func(t *testing.T) { dnsThroughService(t, tf, pods) })
}

func runScenario(t *testing.T, tf *framework.Tierflow, pods []framework.Pod, file string) {
	if file != "" {
		// Registered first: a manifest applied only in part is removed too.
		defer func() {
			if out, err := tf.Kubectl("", "delete", "--wait", "--ignore-not-found", "-f", file); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
			if _, err := tf.WaitRealized(90 * time.Second); err != nil {
				t.Errorf("after deleting %s: %v\n%s", file, err, tf.Logs(20))
			}
		}()
		if out, err := tf.Kubectl("", "apply", "-f", file); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	start := time.Now()
	built, err := tf.WaitRealized(90 * time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, tf.Logs(30))
	}
	for _, c := range built.Conditions {
		t.Logf("condition: %s", c)
	}
	realized := time.Since(start)
	ports := framework.ServedPorts
	expected, err := framework.Expected(built, pods, ports)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	probed := tf.Probe(pods, ports, framework.ProbeNetns)
	for _, c := range tf.Recheck(pods, probed, expected, framework.ProbeNetns) {
		t.Logf("rechecked: %s", c)
	}
	diffs := framework.Compare(probed, expected)
	viaSvc := framework.ViaServices(pods)
	probedSvc := tf.Probe(viaSvc, ports, framework.ProbeNetns)
	for _, c := range tf.Recheck(viaSvc, probedSvc, expected, framework.ProbeNetns) {
		t.Logf("rechecked through Services: %s", c)
	}
	for _, d := range framework.Compare(probedSvc, expected) {
		diffs = append(diffs, "through the Service: "+d)
	}

	// The operator's path for one row: kubectl exec from x/a.
	var src framework.Pod
	for _, p := range pods {
		if p.String() == "x/a" {
			src = p
		}
	}
	execCells := 0
	for _, port := range []explain.PortSpec{{Protocol: model.ProtocolTCP, Port: 80}, {Protocol: model.ProtocolUDP, Port: 80}} {
		for _, dst := range pods {
			if dst == src {
				continue
			}
			k := framework.Key{Src: src.String(), Dst: dst.String(), Port: port.String()}
			o := tf.ProbeOne(src, dst, port, framework.ProbeExec)
			if c, ok := expected[k]; ok && c.Verdict == explain.VerdictAllow && o.Verdict != explain.VerdictAllow {
				one := map[framework.Key]framework.Outcome{k: o}
				for _, note := range tf.Recheck(pods, one, expected, framework.ProbeExec) {
					t.Logf("rechecked: %s", note)
				}
				o = one[k]
			}
			execCells++
			switch c := expected[k]; {
			case o.Err != "":
				diffs = append(diffs, k.String()+": kubectl exec probe failed: "+o.Err)
			case o.Verdict != c.Verdict:
				diffs = append(diffs, k.String()+": kubectl exec probe "+string(o.Verdict)+", explain "+string(c.Verdict)+" ("+framework.Because(c.Result)+")")
			}
		}
	}

	for _, s := range stated[filepath.Base(file)] {
		k := framework.Key{Src: s.src, Dst: s.dst, Port: s.port}
		if c, ok := expected[k]; !ok || c.Verdict != s.want {
			diffs = append(diffs, k.String()+": the story says "+string(s.want)+", explain says "+string(c.Verdict)+" ("+framework.Because(c.Result)+")")
		}
		if o := probed[k]; o.Verdict != s.want {
			diffs = append(diffs, k.String()+": the story says "+string(s.want)+", the probe saw "+string(o.Verdict)+o.Err)
		}
		if o := probedSvc[k]; o.Verdict != s.want {
			diffs = append(diffs, k.String()+": the story says "+string(s.want)+", the probe through the Service saw "+string(o.Verdict)+o.Err)
		}
	}
	t.Logf("realized in %v; %d cells probed in netns by pod address, %d through Services, %d with kubectl exec; matrix:\n%s", realized.Round(time.Millisecond), len(probed), len(probedSvc), execCells, framework.Grid(pods, ports, probed))
	if len(diffs) > 0 {
		t.Errorf("%d cells differ:\n  %s\n%s", len(diffs), strings.Join(diffs, "\n  "), tf.Logs(10))
	}
}

// dnsThroughService is the most common policy of all: default-deny egress
// in a namespace, then "allow UDP and TCP 53 to the kube-dns pods". DNS
// through the kube-dns ClusterIP must then work (the Service proxy
// translates it to the DNS pod before egress policy), and stop without the
// allow rule.
func dnsThroughService(t *testing.T, tf *framework.Tierflow, pods []framework.Pod) {
	denyAll := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny-egress, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Egress]
`
	allowDNS := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-dns, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
      podSelector: {matchLabels: {k8s-app: kube-dns}}
    ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
`
	apply := func(yaml string) {
		t.Helper()
		if out, err := tf.Kubectl(yaml, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if _, err := tf.WaitRealized(90 * time.Second); err != nil {
			t.Fatalf("%v\n%s", err, tf.Logs(20))
		}
	}
	defer func() {
		for _, y := range []string{allowDNS, denyAll} {
			if out, err := tf.Kubectl(y, "delete", "--wait", "--ignore-not-found", "-f", "-"); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		}
		if _, err := tf.WaitRealized(90 * time.Second); err != nil {
			t.Errorf("%v", err)
		}
	}()
	// The test bed's cluster DNS: kube-system/kube-dns in front of a
	// CoreDNS pod (testbed.ClusterDNS), answering Service names.
	server := netip.AddrPortFrom(netip.MustParseAddr(testbed.ClusterDNS), 53)
	kubernetesSvc, err := tf.Bed.Cluster.Kube.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := netip.MustParseAddr(kubernetesSvc.Spec.ClusterIP)
	var xa, ya framework.Pod
	for _, p := range pods {
		switch p.String() {
		case "x/a":
			xa = p
		case "y/a":
			ya = p
		}
	}
	query := func(tcp bool) error {
		addr, err := framework.QueryDNS(xa, server, tcp, "kubernetes.default.svc.cluster.local.", 2*time.Second)
		if err == nil && addr != want {
			err = fmt.Errorf("answer %v, want %v", addr, want)
		}
		return err
	}
	// Without policy, once the Service is realized.
	deadline := time.Now().Add(60 * time.Second)
	for err := query(false); err != nil; err = query(false) {
		if time.Now().After(deadline) {
			t.Fatalf("DNS through %s without policy: %v\n%s", server, err, tf.Logs(20))
		}
		time.Sleep(500 * time.Millisecond)
	}
	apply(denyAll)
	for _, tcp := range []bool{false, true} {
		if err := query(tcp); err == nil {
			t.Errorf("DNS (tcp %v) through %s under default-deny egress: answered, want blocked", tcp, server)
		}
	}
	apply(allowDNS)
	for _, tcp := range []bool{false, true} {
		var err error
		for i := 0; i < 3; i++ {
			if err = query(tcp); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("DNS (tcp %v) through %s with egress allowed to the kube-dns pods: %v", tcp, server, err)
		}
	}
	// The rest of x's egress stays denied, by pod address and through Services.
	port := explain.PortSpec{Protocol: model.ProtocolTCP, Port: 80}
	for _, dst := range []framework.Pod{ya, ya.ViaService()} {
		if o := tf.ProbeOne(xa, dst, port, framework.ProbeNetns); o.Verdict != explain.VerdictDeny {
			t.Errorf("x/a -> %s TCP/80 with only DNS allowed: %s%s, want deny", dst.IP, o.Verdict, o.Err)
		}
	}
}
