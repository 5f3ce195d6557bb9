package runtime_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"

	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/distribution/client/statestore"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/livecluster"
)

// noneEnv is an in-process distribution server over a compute engine with
// static tokens, for agents without a datapath.
type noneEnv struct {
	dir    string
	engine *compute.Engine
	srv    *server.Server
	addr   string
	caFile string
	cancel context.CancelFunc
	done   chan struct{}
	tls    *tls.Config
}

func newNoneEnv(t *testing.T) *noneEnv {
	t.Helper()
	e := &noneEnv{dir: t.TempDir(), engine: compute.New()}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	e.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	e.caFile = filepath.Join(e.dir, "ca.crt")
	if err := os.WriteFile(e.caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "n1.token"), []byte("token-n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.srv = server.New(e.engine, server.StaticTokens{"token-n1": "n1"}, server.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go e.srv.Run(ctx)
	go func() {
		defer close(e.done)
		_ = e.srv.Serve(ctx, ln, e.tls)
	}()
	t.Cleanup(e.stop)
	return e
}

func (e *noneEnv) stop() {
	e.cancel()
	<-e.done
}

func (e *noneEnv) options(node string) runtime.Options {
	cfg := config.DefaultAgent()
	cfg.NodeName = node
	cfg.ControllerAddress = e.addr
	cfg.ControllerCAFile = e.caFile
	cfg.ControllerServerName = "localhost"
	cfg.TokenFile = filepath.Join(e.dir, node+".token")
	cfg.StateDir = filepath.Join(e.dir, node+"-state")
	cfg.MetricsAddress = "127.0.0.1:0"
	return runtime.Options{Config: &cfg, Datapath: agentquery.DatapathNone, QuerySocket: filepath.Join(e.dir, node+".sock")}
}

// TestDatapathNone: an agent without a datapath follows the stream,
// reports policies realized (the controller's summary says 1/1), answers
// queries, and after a restart with the controller gone serves the saved
// state.
func TestDatapathNone(t *testing.T) {
	e := newNoneEnv(t)
	e.engine.UpsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", UID: "ns-uid"}})
	e.engine.UpsertPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "web-uid", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
	})
	e.engine.UpsertNetworkPolicy(&networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deny-all", UID: types.UID("np-uid"), Generation: 1},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	})
	opts := e.options("n1")
	ag := livecluster.StartAgent(t, "n1", opts)
	ag.RealizedOn(t, "NetworkPolicy/ns/deny-all")
	livecluster.Eventually(t, 20*time.Second, "the server's realization summary", func() error {
		for _, p := range e.engine.Snapshot().Policies {
			s, ok := e.srv.Summary(p.ID)
			if !ok || s.Realized != 1 || s.SpanNodes != 1 {
				return fmt.Errorf("summary %+v (known %v)", s, ok)
			}
		}
		return nil
	})
	ctx := context.Background()
	st, err := ag.Q.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Datapath != agentquery.DatapathNone || !st.Ready || !st.ControllerConnected || st.Restored || st.Policies != 1 {
		t.Errorf("status %+v", st)
	}
	if _, err := ag.Q.Flows(ctx, agentquery.FlowFilter{}); err == nil || !strings.Contains(err.Error(), "datapath none") {
		t.Errorf("flows without a datapath: %v, want a clear error", err)
	}
	resp, err := http.Get("http://" + st.MetricsAddress + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d", resp.StatusCode)
	}

	// The controller goes away and the agent restarts: the saved state is
	// held (and reported realized) without any controller.
	e.stop()
	ag.Stop()
	ag = livecluster.StartAgent(t, "n1", opts)
	ag.RealizedOn(t, "NetworkPolicy/ns/deny-all")
	if st, err := ag.Q.Status(ctx); err != nil || !st.Restored || st.ControllerConnected {
		t.Errorf("restarted agent: %+v, %v; want restored, not connected", st, err)
	}
}

// TestCorruptStateFailsClosed: a state file that does not parse is not
// enforced; the agent starts, is not ready, and holds no policy until the
// controller sends a state.
func TestCorruptStateFailsClosed(t *testing.T) {
	e := newNoneEnv(t)
	e.stop() // no controller
	opts := e.options("n1")
	store, err := statestore.Open(opts.Config.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.Path(), []byte(`{"formatVersion": 1, "state": {"policies": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	ag := livecluster.StartAgent(t, "n1", opts)
	var st *agentquery.Status
	livecluster.Eventually(t, 10*time.Second, "agent answers", func() error {
		st, err = ag.Q.Status(context.Background())
		return err
	})
	if st.Ready || st.Restored || st.Policies != 0 {
		t.Errorf("agent with a corrupt state file: %+v; want not ready, nothing restored", st)
	}
}

// TestBadOptions: configuration mistakes stop the agent with a clear
// error instead of running half-configured.
func TestBadOptions(t *testing.T) {
	e := newNoneEnv(t)
	opts := e.options("n1")
	opts.Datapath = "kernel"
	if _, err := runtime.New(opts); err == nil || !strings.Contains(err.Error(), "datapath") {
		t.Errorf("datapath kernel: %v", err)
	}
	opts = e.options("n1")
	cfg := *opts.Config
	cfg.ControllerCAFile = filepath.Join(e.dir, "missing.crt")
	opts.Config = &cfg
	a, err := runtime.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "controller CA") {
		t.Errorf("missing CA file: %v", err)
	}
	opts = e.options("")
	if _, err := runtime.New(opts); err == nil || !strings.Contains(err.Error(), "nodeName") {
		t.Errorf("no node name: %v", err)
	}
}

// TestWaitsForOVS: with OVS not (yet) running the agent keeps retrying
// while it answers health and status probes (not ready), instead of
// exiting; it stops cleanly.
func TestWaitsForOVS(t *testing.T) {
	e := newNoneEnv(t)
	opts := e.options("n1")
	opts.Datapath = agentquery.DatapathOVS
	opts.Config.OVSDBSocket = filepath.Join(e.dir, "no-ovs", "db.sock")
	ag := livecluster.StartAgent(t, "n1", opts)
	ctx := context.Background()
	var st *agentquery.Status
	var err error
	livecluster.Eventually(t, 10*time.Second, "agent answers", func() error {
		st, err = ag.Q.Status(ctx)
		return err
	})
	if st.Ready || st.Bridge != opts.Config.BridgeName {
		t.Errorf("status %+v", st)
	}
	if _, err := ag.Q.Flows(ctx, agentquery.FlowFilter{}); err == nil || !strings.Contains(err.Error(), "not connected to OVS") {
		t.Errorf("flows before OVS: %v", err)
	}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := http.Get("http://" + st.MetricsAddress + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	done := make(chan struct{})
	go func() { ag.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("agent waiting for OVS did not stop")
	}
}
