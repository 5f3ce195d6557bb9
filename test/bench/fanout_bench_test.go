package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
// self-signed certificate for serverName) and the agents' config trusting
// it.
func selfSignedTLS(b *testing.B, serverName string) (srv, cli *tls.Config) {
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
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	srv = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}, MinVersion: tls.VersionTLS13}
	cli = &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13}
	return srv, cli
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

// BenchmarkFanout runs the controller (informers on a real kube-apiserver,
// engine, distribution server over gRPC/TLS) and many datapath-less agents
// (pkg/agent/nodatapath) in this process. It times the initial convergence
// (every agent has its full span) and, several times, an
// AdminNetworkPolicy created through the API until every agent has it.
// Memory is the whole process: controller and the agents' states.
func BenchmarkFanout(b *testing.B) {
	agents, namespaces, podsPerNS, changes := 300, 100, 30, 9
	if quickScale() {
		agents, namespaces, podsPerNS, changes = 100, 20, 20, 5
	}
	c := fanoutCluster(agents, namespaces, podsPerNS)
	api := kubeapi.Start(b)
	installCRDs(b, api)
	loadAPI(b, fastConfig(api.Config), c)
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
		srvTLS, cliTLS := selfSignedTLS(b, "tierflow-controller")
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

		start := time.Now()
		var rts []*nodatapath.Runtime
		for i := 0; i < agents; i++ {
			token := fmt.Sprintf("token-%d", i)
			rt, err := nodatapath.Start(ctx, client.Config{Address: lis.Addr().String(), TLS: cliTLS, Node: shapes.NodeName(i),
				Token: func() (string, error) { return token, nil }, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			rts = append(rts, rt)
			b.Cleanup(rt.Stop)
		}
		// Initial convergence: every agent has every namespace's policy that
		// spans its node (every namespace has pods on most nodes, so at
		// least one policy per agent).
		waitAll := func(cond func(*wire.NodeState) bool) {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
			defer wcancel()
			var wg sync.WaitGroup
			errs := make(chan error, len(rts))
			for _, rt := range rts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := rt.WaitFor(wctx, cond); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatalf("agents did not converge: %v", err)
			}
		}
		// What each node must receive: the policies whose span holds it,
		// once the engine has computed every object.
		var spans map[string]int
		for deadline := time.Now().Add(10 * time.Minute); ; {
			if ctl.HasSynced() {
				snap := ctl.Engine().Snapshot()
				if len(snap.Policies) == len(c.NPs) && computedPods(snap) == len(c.Pods) {
					spans = map[string]int{}
					for _, p := range snap.Policies {
						for _, n := range p.Span {
							spans[n]++
						}
					}
					break
				}
			}
			if time.Now().After(deadline) {
				b.Fatal("the controller did not compute the fan-out scenario in 10m")
			}
			time.Sleep(50 * time.Millisecond)
		}
		waitAll(func(st *wire.NodeState) bool { return len(st.Policies) == spans[st.Node] })
		initial := time.Since(start)

		var ds []time.Duration
		for i := 0; i < changes; i++ {
			name := fmt.Sprintf("fanout-%d", i)
			anp := &v1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
			anp.Spec.Priority = int32(10 + i)
			anp.Spec.Subject.Namespaces = &metav1.LabelSelector{}
			anp.Spec.Ingress = []v1alpha1.AdminNetworkPolicyIngressRule{{Name: "deny-team-1", Action: v1alpha1.AdminNetworkPolicyRuleActionDeny,
				From: []v1alpha1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "t1"}}}}}}
			t0 := time.Now()
			if _, err := pol.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
				b.Fatalf("creating %s: %v", name, err)
			}
			waitAll(hasPolicy(name))
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		b.ReportMetric(float64(agents), "agents")
		b.ReportMetric(float64(len(c.Pods)), "pods")
		b.ReportMetric(initial.Seconds(), "initial-s")
		b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e6, "change-p50-ms")
		b.ReportMetric(float64(ds[len(ds)-1].Nanoseconds())/1e6, "change-max-ms")
		b.ReportMetric(float64(changes), "changes")
		reportMemory(b)
	}
}
