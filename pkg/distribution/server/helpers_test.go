package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/client"
	"github.com/tierflow/tierflow/pkg/distribution/client/statestore"
	"github.com/tierflow/tierflow/pkg/distribution/disttest"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// env is a controller (compute engine + distribution server) in this
// process, restartable on the same address.
type env struct {
	t          testing.TB
	engine     *compute.Engine
	serverTLS  *tls.Config
	clientTLS  *tls.Config
	addr       string
	auth       server.Authenticator
	opts       server.Options
	srv        *server.Server
	grpcServer *grpc.Server
	stopRun    context.CancelFunc
	runDone    chan struct{}
	reg        *prometheus.Registry
	// grpcOpts are added to the gRPC server's options (interceptors).
	grpcOpts []grpc.ServerOption

	sumMu     sync.Mutex
	summaries map[string]server.Summary
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newEnv(t testing.TB, auth server.Authenticator, opts server.Options) *env {
	e := &env{t: t, engine: compute.New(), auth: auth, opts: opts, addr: "127.0.0.1:0", summaries: map[string]server.Summary{}}
	e.serverTLS, e.clientTLS = disttest.TLS(t)
	e.startServer()
	t.Cleanup(e.stopServer)
	return e
}

// startServer starts a new server process-equivalent (new epoch) on the
// env's address.
func (e *env) startServer() {
	e.t.Helper()
	opts := e.opts
	e.reg = prometheus.NewRegistry()
	opts.Registerer = e.reg
	opts.Logger = quietLogger()
	opts.OnSummary = func(s server.Summary) {
		e.sumMu.Lock()
		defer e.sumMu.Unlock()
		if s.Deleted {
			delete(e.summaries, s.PolicyID)
		} else {
			e.summaries[s.PolicyID] = s
		}
	}
	e.srv = server.New(e.engine, e.auth, opts)
	ctx, cancel := context.WithCancel(context.Background())
	e.stopRun, e.runDone = cancel, make(chan struct{})
	go func() { defer close(e.runDone); e.srv.Run(ctx) }()
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old listener's port may take a moment to free
		if lis, err = net.Listen("tcp", e.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("listen: %v", err)
	}
	e.addr = lis.Addr().String()
	g := e.srv.GRPCServer(e.serverTLS, e.grpcOpts...)
	e.grpcServer = g
	go func() { _ = g.Serve(lis) }()
}

func (e *env) stopServer() {
	if e.grpcServer == nil {
		return
	}
	e.grpcServer.Stop()
	e.stopRun()
	<-e.runDone
	e.grpcServer = nil
}

func (e *env) summary(id string) (server.Summary, bool) {
	e.sumMu.Lock()
	defer e.sumMu.Unlock()
	s, ok := e.summaries[id]
	return s, ok
}

// agentConfig is the client config of an agent authenticating with token.
func (e *env) agentConfig(node, token, addr, stateDir string) client.Config {
	e.t.Helper()
	cfg := clientConfig(node, token, addr, e.clientTLS)
	if stateDir != "" {
		st, err := statestore.Open(stateDir)
		if err != nil {
			e.t.Fatal(err)
		}
		cfg.Store = st
	}
	return cfg
}

func (e *env) startAgent(cfg client.Config) *nodatapath.Runtime {
	e.t.Helper()
	r, err := nodatapath.Start(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(r.Stop)
	return r
}

// want is what node must hold now, from the engine's own snapshot.
func (e *env) want(node string) *wire.NodeState { return wire.ForNode(e.engine.Snapshot(), node) }

// waitConverged waits until every agent's state (the one its client handed
// it) and its client's state equal the engine's snapshot filtered to its
// node.
func (e *env) waitConverged(agents ...*nodatapath.Runtime) {
	e.t.Helper()
	waitConverged(e.t, e.engine, agents...)
}

// waitConverged waits until every agent's state and its client's state
// equal engine's snapshot filtered to its node.
func waitConverged(t testing.TB, engine *compute.Engine, agents ...*nodatapath.Runtime) {
	t.Helper()
	// Generous: under -race on a loaded machine a multi-megabyte full
	// update takes seconds to encode and decode.
	deadline := time.Now().Add(60 * time.Second)
	for _, a := range agents {
		for {
			changed := a.Client.Changed()
			checkStart := time.Now()
			want := wire.ForNode(engine.Snapshot(), a.Node())
			_, _, st := a.Client.State()
			d := wire.Diff(want, a.State())
			d = append(d, wire.Diff(want, st)...)
			if len(d) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s did not converge (client %+v, connected %v):\n%s", want.Node, a.Client.Stats(), a.Client.Connected(), strings.Join(d, "\n"))
			}
			// Comparing a large state is costly: do not starve the agent
			// being waited for by checking more often than it takes.
			select {
			case <-changed:
			case <-time.After(max(50*time.Millisecond, 2*time.Since(checkStart))):
			}
		}
	}
}

// Object builders.

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, UID: types.UID("ns-" + name)}}
}

func node(name, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name), Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

func pod(ns, name, nodeName, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("pod-" + ns + "-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{
			Name: "c", Image: "agnhost", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// allowFrom is a NetworkPolicy in ns selecting app=target, allowing
// ingress on port 8080 from pods app=from in namespaces team=fromTeam.
func allowFrom(ns, name, target, fromTeam, from string) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(8080)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("np-" + ns + "-" + name), Generation: 1},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *sel("app", target),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", fromTeam), PodSelector: sel("app", from)}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// denyEgress is an AdminNetworkPolicy applying to namespaces team=subject
// that denies egress to pods app=to in namespaces team=toTeam.
func denyEgress(name string, priority int32, subject, toTeam, to string) *v1alpha1.AdminNetworkPolicy {
	return &v1alpha1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("anp-" + name), Generation: 1},
		Spec: v1alpha1.AdminNetworkPolicySpec{
			Priority: priority,
			Subject:  v1alpha1.AdminNetworkPolicySubject{Namespaces: sel("team", subject)},
			Egress: []v1alpha1.AdminNetworkPolicyEgressRule{{
				Name:   "deny-" + to,
				Action: v1alpha1.AdminNetworkPolicyRuleActionDeny,
				To:     []v1alpha1.AdminNetworkPolicyEgressPeer{{Pods: &v1alpha1.NamespacedPod{NamespaceSelector: *sel("team", toTeam), PodSelector: *sel("app", to)}}},
			}},
		},
	}
}

func ip(n int) string {
	return netip.AddrFrom4([4]byte{10, 0, byte(n / 250), byte(n%250 + 1)}).String()
}

// metric returns the value of a counter or gauge of the current server
// (summed over series whose label values include labelValue, or all when
// empty).
func (e *env) metric(name, labelValue string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := labelValue == ""
			for _, l := range m.GetLabel() {
				if l.GetValue() == labelValue {
					match = true
				}
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// clientConfig is an agent's client config with a fixed token and short
// backoffs.
func clientConfig(node, token, addr string, tlsConfig *tls.Config) client.Config {
	return client.Config{
		Address:    addr,
		TLS:        tlsConfig,
		Token:      func() (string, error) { return token, nil },
		Node:       node,
		MinBackoff: 50 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond,
		Logger:     quietLogger(),
	}
}
