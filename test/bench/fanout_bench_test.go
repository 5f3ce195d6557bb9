package bench

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/distribution/client"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/test/bench/shapes"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// selfSignedTLS returns the distribution server's TLS config (a
// self-signed certificate for serverName) and that certificate in PEM, for
// the agents to trust.
func selfSignedTLS(b *testing.B, serverName string) (srv *tls.Config, certPEM []byte) {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: serverName}, DNSNames: []string{serverName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		b.Fatal(err)
	}
	srv = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}, MinVersion: tls.VersionTLS13}
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fanoutCluster is the fan-out scenario: agents nodes, pods spread over
// them, a NetworkPolicy per namespace.
func fanoutCluster(agents, namespaces, podsPerNS int) *shapes.Cluster {
	c := &shapes.Cluster{}
	for i := 0; i < agents; i++ {
		c.Nodes = append(c.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: shapes.NodeName(i)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.%d.%d", i/250, 1+i%250)}}}})
	}
	port := intstr.FromInt32(80)
	k := 0
	for n := 0; n < namespaces; n++ {
		ns := fmt.Sprintf("ns-%d", n)
		c.Namespaces = append(c.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": fmt.Sprintf("t%d", n%10)}}})
		for p := 0; p < podsPerNS; p++ {
			ip := fmt.Sprintf("10.%d.%d.%d", 1+k/65536, k/256%256, k%256)
			c.Pods = append(c.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%d", p), Labels: map[string]string{"app": fmt.Sprintf("app-%d", p%5)}},
				Spec:       corev1.PodSpec{NodeName: shapes.NodeName(k % agents), Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
			})
			k++
		}
		c.NPs = append(c.NPs, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-app-0"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-0"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}},
		})
	}
	return c
}

// hasPolicy says whether a node's state holds the policy made from the
// AdminNetworkPolicy called name.
func hasPolicy(name string) func(*wire.NodeState) bool {
	return func(st *wire.NodeState) bool {
		for _, p := range st.Policies {
			if p.Source.Name == name && p.Source.Namespace == "" {
				return true
			}
		}
		return false
	}
}

// fanoutAgentsEnv, when set in a test binary's environment, makes it the
// agents' process of BenchmarkFanout (see TestMain): its value is the
// JSON of fanoutAgentsConfig.
const fanoutAgentsEnv = "TIERFLOW_BENCH_FANOUT_AGENTS"

// fanoutAgentsConfig tells the agents' process what to connect to.
type fanoutAgentsConfig struct {
	Address    string // the distribution server
	ServerName string
	CAFile     string // PEM of the server's certificate
	Agents     int    // nodes shapes.NodeName(0..Agents-1), tokens "token-N"
}

// fanoutAgents is the datapath-less agents of BenchmarkFanout, in a
// process of their own so that the benchmark's process holds only the
// controller (its memory is the controller's). It talks over a line
// protocol on its stdin and stdout:
//
//	-> started UNIXNANO            once every agent is started
//	<- spans JSON                  every node must hold exactly spans[node] policies
//	<- policy NAME                 every node must hold the AdminNetworkPolicy NAME
//	-> armed                       (for policy) the wait is in place
//	-> met UNIXNANO                when the last agent's state satisfied it
//	-> error TEXT                  the process gives up
//
// It stops when its stdin closes.
type fanoutAgents struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	started time.Time
}

func startFanoutAgents(b *testing.B, cfg fanoutAgentsConfig) *fanoutAgents {
	b.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fanoutAgentsEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting the agents' process: %v", err)
	}
	fa := &fanoutAgents{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	fa.out.Buffer(make([]byte, 1<<16), 1<<20)
	b.Cleanup(func() { fa.stop() })
	fa.started = fa.read(b, "started")
	return fa
}

// read waits for the agents' process's next line, which must be want
// ("started", "armed", "met"), and returns its time, if any.
func (fa *fanoutAgents) read(b *testing.B, want string) time.Time {
	b.Helper()
	if !fa.out.Scan() {
		b.Fatalf("the agents' process ended (waiting for %q): %v", want, fa.out.Err())
	}
	verb, arg, _ := strings.Cut(fa.out.Text(), " ")
	if verb != want {
		b.Fatalf("the agents' process says %q, want %q", fa.out.Text(), want)
	}
	if arg == "" {
		return time.Time{}
	}
	ns, err := strconv.ParseInt(arg, 10, 64)
	if err != nil {
		b.Fatalf("the agents' process says %q: %v", fa.out.Text(), err)
	}
	return time.Unix(0, ns)
}

func (fa *fanoutAgents) send(b *testing.B, line string) {
	b.Helper()
	if _, err := io.WriteString(fa.in, line+"\n"); err != nil {
		b.Fatalf("telling the agents' process %q: %v", line, err)
	}
}

// stop ends the agents' process and returns its peak RSS in MiB.
func (fa *fanoutAgents) stop() float64 {
	if fa.in == nil {
		return 0
	}
	fa.in.Close()
	fa.in = nil
	_ = fa.cmd.Wait()
	if ru, ok := fa.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return float64(ru.Maxrss) / 1024
	}
	return 0
}

// runFanoutAgents is the agents' process (see fanoutAgents).
func runFanoutAgents(js string) int {
	fail := func(err error) int {
		fmt.Printf("error %v\n", err)
		return 1
	}
	var cfg fanoutAgentsConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		return fail(err)
	}
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return fail(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fail(errors.New("no certificate in the CA file"))
	}
	cliTLS := &tls.Config{RootCAs: pool, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS13}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rts := make([]*nodatapath.Runtime, cfg.Agents)
	for i := range rts {
		token := fmt.Sprintf("token-%d", i)
		rt, err := nodatapath.Start(ctx, client.Config{Address: cfg.Address, TLS: cliTLS, Node: shapes.NodeName(i),
			Token: func() (string, error) { return token, nil }, Logger: quiet})
		if err != nil {
			return fail(err)
		}
		rts[i] = rt
	}
	defer func() {
		for _, rt := range rts {
			rt.Stop()
		}
	}()
	fmt.Printf("started %d\n", time.Now().UnixNano())
	// waitAll waits until cond holds for every agent and returns when the
	// last one's state satisfied it.
	waitAll := func(cond func(*wire.NodeState) bool, armed func()) (time.Time, error) {
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Minute)
		defer wcancel()
		var mu sync.Mutex
		var last time.Time
		var firstErr error
		var wg sync.WaitGroup
		for _, rt := range rts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := rt.WaitFor(wctx, cond)
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if now.After(last) {
					last = now
				}
			}()
		}
		if armed != nil {
			armed()
		}
		wg.Wait()
		return last, firstErr
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<26)
	for in.Scan() {
		verb, arg, _ := strings.Cut(in.Text(), " ")
		var last time.Time
		var err error
		switch verb {
		case "spans":
			spans := map[string]int{}
			if err := json.Unmarshal([]byte(arg), &spans); err != nil {
				return fail(err)
			}
			last, err = waitAll(func(st *wire.NodeState) bool { return len(st.Policies) == spans[st.Node] }, nil)
		case "policy":
			last, err = waitAll(hasPolicy(arg), func() { fmt.Println("armed") })
		default:
			return fail(fmt.Errorf("unknown command %q", in.Text()))
		}
		if err != nil {
			return fail(fmt.Errorf("agents did not converge: %w", err))
		}
		fmt.Printf("met %d\n", last.UnixNano())
	}
	return 0
}

// fanoutSizes: full mode is the 1,000 agents and 100,000 pods
// (1,000 namespaces of 100); quick mode 100 agents and 400 pods.
func fanoutSizes() (agents, namespaces, podsPerNS, changes int) {
	if quickScale() {
		return 100, 20, 20, 5
	}
	return 1000, 1000, 100, 9
}

// BenchmarkFanout runs the controller (informers on a real kube-apiserver,
// engine, distribution server over gRPC/TLS) in this process and many
// datapath-less agents (pkg/agent/nodatapath) in a process of their own
// (so this process's memory is the controller's). It times the initial
// convergence (every agent has exactly the policies spanning its node)
// and, several times, an AdminNetworkPolicy that selects every namespace
// created through the API, until every agent has it: the first one brings
// every agent a new address group of a tenth of the pods, the later ones
// reuse it.
func BenchmarkFanout(b *testing.B) {
	klog.SetLogger(logr.Discard()) // the controller's progress logs are not the point
	agents, namespaces, podsPerNS, changes := fanoutSizes()
	c := fanoutCluster(agents, namespaces, podsPerNS)
	api := kubeapi.Start(b)
	installCRDs(b, api)
	progressf("loading %d nodes, %d namespaces, %d pods and %d policies into the API server", len(c.Nodes), len(c.Namespaces), len(c.Pods), len(c.NPs))
	loadStart := time.Now()
	loadAPI(b, fastConfig(api.Config), c)
	progressf("loaded in %.0fs", time.Since(loadStart).Seconds())
	wantPolicies, wantPods := len(c.NPs), len(c.Pods)
	c = nil
	cfg := fastConfig(api.Config)
	kube, pol := clients(b, cfg)
	resetPeak(b)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		b.Cleanup(func() { cancel(); wg.Wait() })
		ctl, err := controller.New(controller.Config{Kube: kube, Policy: pol, Identity: "tierflow-bench"})
		if err != nil {
			b.Fatal(err)
		}
		tokens := server.StaticTokens{}
		for i := 0; i < agents; i++ {
			tokens[fmt.Sprintf("token-%d", i)] = shapes.NodeName(i)
		}
		srv := server.New(ctl.Engine(), tokens, server.Options{Logger: quiet})
		srvTLS, cert := selfSignedTLS(b, "tierflow-controller")
		g := srv.GRPCServer(srvTLS)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(3)
		go func() { defer wg.Done(); _ = ctl.Run(ctx) }()
		go func() { defer wg.Done(); srv.Run(ctx) }()
		go func() { defer wg.Done(); _ = g.Serve(lis) }()
		b.Cleanup(g.Stop)

		caFile := filepath.Join(b.TempDir(), "ca.pem")
		if err := os.WriteFile(caFile, cert, 0o600); err != nil {
			b.Fatal(err)
		}
		fa := startFanoutAgents(b, fanoutAgentsConfig{Address: lis.Addr().String(), ServerName: "tierflow-controller", CAFile: caFile, Agents: agents})
		progressf("%d agents connecting", agents)

		// What each node must receive: the policies whose span holds it,
		// once the engine has computed every object.
		spans := map[string]int{}
		for deadline := time.Now().Add(20 * time.Minute); ; {
			if ctl.HasSynced() {
				snap := ctl.Engine().Snapshot()
				if len(snap.Policies) == wantPolicies && computedPods(snap) == wantPods {
					for _, p := range snap.Policies {
						for _, n := range p.Span {
							spans[n]++
						}
					}
					break
				}
			}
			if time.Now().After(deadline) {
				b.Fatal("the controller did not compute the fan-out scenario in 20m")
			}
			time.Sleep(50 * time.Millisecond)
		}
		js, err := json.Marshal(spans)
		if err != nil {
			b.Fatal(err)
		}
		fa.send(b, "spans "+string(js))
		initial := fa.read(b, "met").Sub(fa.started)
		progressf("agents converged %.1fs after they started; timing %d changes", initial.Seconds(), changes)

		var ds []time.Duration
		for i := 0; i < changes; i++ {
			name := fmt.Sprintf("fanout-%d", i)
			anp := &v1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
			anp.Spec.Priority = int32(10 + i)
			anp.Spec.Subject.Namespaces = &metav1.LabelSelector{}
			anp.Spec.Ingress = []v1alpha1.AdminNetworkPolicyIngressRule{{Name: "deny-team-1", Action: v1alpha1.AdminNetworkPolicyRuleActionDeny,
				From: []v1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "t1"}}}}}}
			fa.send(b, "policy "+name)
			fa.read(b, "armed")
			t0 := time.Now()
			if _, err := pol.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
				b.Fatalf("creating %s: %v", name, err)
			}
			d := fa.read(b, "met").Sub(t0)
			ds = append(ds, d)
			progressf("change %d of %d: every agent holds %s after %.0f ms", i+1, changes, name, msOf(d))
		}
		reportMemory(b)
		agentsRSS := fa.stop()
		// The first policy brings a new address group (a tenth of the
		// pods) to every agent; the later ones reuse it.
		first, rest := ds[0], slices.Clone(ds[1:])
		slices.Sort(rest)
		b.ReportMetric(float64(agents), "agents")
		b.ReportMetric(float64(wantPods), "pods")
		b.ReportMetric(float64(wantPolicies), "policies")
		b.ReportMetric(initial.Seconds(), "initial-s")
		b.ReportMetric(msOf(first), "first-change-ms")
		b.ReportMetric(msOf(rest[len(rest)/2]), "change-p50-ms")
		b.ReportMetric(msOf(rest[len(rest)-1]), "change-max-ms")
		b.ReportMetric(float64(changes), "changes")
		b.ReportMetric(agentsRSS, "agents-rss-MiB")
		b.ReportMetric(time.Since(loadStart).Seconds(), "total-s")
	}
}
