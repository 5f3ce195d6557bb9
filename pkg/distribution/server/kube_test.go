package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/test/kubeapi"
)

const agentNS = "tierflow-system"

// TestTokenReviewBindsNode runs against a real kube-apiserver: agents
// authenticate with service account tokens bound to their pod (TokenRequest
// with a Pod boundObjectRef, as the kubelet projects them), the server
// reviews them with the TokenReview API, and the node comes from the
// token's binding. A token for n1 gets exactly n1's objects whatever the
// agent claims; other accounts, unbound tokens, tokens for another audience
// and tokens of deleted pods are refused.
//
// It runs twice: with kube-apiserver putting the node name into pod-bound
// tokens (ServiceAccountTokenPodNodeInfo, on by default), and with that
// off, where the server looks the bound pod up (checking its UID) for its
// node. A token bound directly to a Node object works too.
func TestTokenReviewBindsNode(t *testing.T) {
	t.Run("node-claim", func(t *testing.T) { testTokenReview(t, true) })
	t.Run("pod-lookup", func(t *testing.T) {
		testTokenReview(t, false, "--feature-gates=ServiceAccountTokenPodNodeInfo=false")
	})
}

func testTokenReview(t *testing.T, wantNodeClaim bool, apiserverArgs ...string) {
	c := kubeapi.Start(t, kubeapi.WithAPIServerArgs(apiserverArgs...))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := c.Kube

	c.CreateNamespace(t, agentNS, nil)
	for _, sa := range []string{"tierflow-agent", "intruder"} {
		if _, err := kube.CoreV1().ServiceAccounts(agentNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentPod := func(name, nodeName, sa string) *corev1.Pod {
		p, err := kube.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName: nodeName, ServiceAccountName: sa,
				Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := func(sa string, ref *authnv1.BoundObjectReference, audience string) string {
		exp := int64(3600)
		tr, err := kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp, BoundObjectRef: ref},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token request for %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	podRef := func(p *corev1.Pod) *authnv1.BoundObjectReference {
		return &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}
	p1 := agentPod("agent-n1", "n1", "tierflow-agent")
	p2 := agentPod("agent-n2", "n2", "tierflow-agent")
	p3 := agentPod("agent-n3", "n3", "tierflow-agent")
	pi := agentPod("intruder-n1", "n1", "intruder")
	tok1 := token("tierflow-agent", podRef(p1), "tierflow")
	tok2 := token("tierflow-agent", podRef(p2), "tierflow")
	tok3 := token("tierflow-agent", podRef(p3), "tierflow")

	// Which path is exercised: the node-name claim, or the pod lookup.
	tr, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok1, Audiences: []string{"tierflow"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := tr.Status.User.Extra["authentication.kubernetes.io/node-name"]; has != wantNodeClaim {
		t.Fatalf("token review extra %v: node-name claim present=%v, want %v", tr.Status.User.Extra, has, wantNodeClaim)
	}
	tokNode3 := token("tierflow-agent", &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n3", UID: nodeUID(t, ctx, c, "n3")}, "tierflow")

	authn, err := server.NewTokenReviewAuthenticator(kube, server.TokenReviewConfig{
		Audiences:       []string{"tierflow"},
		ServiceAccounts: []string{agentNS + "/tierflow-agent"},
		CacheTTL:        -1, // every stream is reviewed: deleted pods must be refused at once
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, authn, server.Options{})
	populate(e)

	// n1's token, whatever the agent says it is.
	a1 := e.startAgent(e.agentConfig("n2", tok1, e.addr, ""))
	a3 := e.startAgent(e.agentConfig("n3", tok3, e.addr, ""))
	a3n := e.startAgent(e.agentConfig("n3", tokNode3, e.addr, ""))
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for _, x := range []struct {
		node string
		a    interface {
			WaitFor(context.Context, func(*wire.NodeState) bool) error
			State() *wire.NodeState
		}
	}{{"n1", a1}, {"n3", a3}, {"n3", a3n}} {
		want := e.want(x.node)
		if err := x.a.WaitFor(wctx, func(st *wire.NodeState) bool { return len(wire.Diff(want, st)) == 0 }); err != nil {
			t.Fatalf("agent with %s's token: %v\n%s", x.node, err, strings.Join(wire.Diff(want, x.a.State()), "\n"))
		}
	}
	// Two agents of one node: the newest stream wins; keep one.
	a3n.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := e.srv.ConnectedNodes()
		if strings.Join(got, ",") == "n1,n3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connected nodes %v, want n1,n3", got)
		}
	}

	// Refusals, on raw streams.
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(e.clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	try := func(tok string) error {
		sctx, scancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), 20*time.Second)
		defer scancel()
		stream, err := wire.OpenSync(sctx, conn)
		if err != nil {
			return err
		}
		if err := stream.Send(&wire.ClientMessage{Hello: &wire.Hello{}}); err != nil {
			return err
		}
		m, err := stream.Recv()
		if err == nil && m.Update == nil {
			t.Errorf("unexpected message %+v", m)
		}
		return err
	}
	if err := try(tok2); err != nil {
		t.Fatalf("n2's valid token refused: %v", err)
	}
	cases := []struct {
		name  string
		token string
		code  codes.Code
	}{
		{"other service account", token("intruder", podRef(pi), "tierflow"), codes.Unauthenticated},
		{"token not bound to a pod", token("tierflow-agent", nil, "tierflow"), codes.PermissionDenied},
		{"other audience", token("tierflow-agent", podRef(p1), "someone-else"), codes.Unauthenticated},
		{"garbage", "not-a-token", codes.Unauthenticated},
	}
	for _, tc := range cases {
		if err := try(tc.token); status.Code(err) != tc.code {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.code)
		}
	}
	// Deleting the agent's pod invalidates its bound token.
	if err := kube.CoreV1().Pods(agentNS).Delete(ctx, p2.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := try(tok2)
		if status.Code(err) == codes.Unauthenticated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("token of a deleted pod still accepted: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func nodeUID(t *testing.T, ctx context.Context, c *kubeapi.Cluster, name string) types.UID {
	t.Helper()
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.UID
}

// TestStreamEndsWhenAgentPodDeleted: a stream is authenticated when it
// opens and again while it stays open (Options.ReauthInterval). Against a
// real kube-apiserver, an agent with a token bound to its pod keeps its
// stream through several re-authentications; once its pod is deleted the
// token is no longer accepted and the stream is cut within the interval
// (and reconnecting is refused), even though the authenticator's cache
// still held the token as good.
func TestStreamEndsWhenAgentPodDeleted(t *testing.T) {
	c := kubeapi.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := c.Kube
	c.CreateNamespace(t, agentNS, nil)
	if _, err := kube.CoreV1().ServiceAccounts(agentNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tierflow-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := kube.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-n1"},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "tierflow-agent",
			Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, "tierflow-agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{"tierflow"}, ExpirationSeconds: &exp,
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := server.TokenExpiry(tr.Status.Token); !ok || got.Sub(tr.Status.ExpirationTimestamp.Time).Abs() > time.Second {
		t.Fatalf("token expiry read as %v (%v), want %v", got, ok, tr.Status.ExpirationTimestamp)
	}
	// The default cache (1m): re-authentication must not answer from it.
	authn, err := server.NewTokenReviewAuthenticator(kube, server.TokenReviewConfig{
		Audiences: []string{"tierflow"}, ServiceAccounts: []string{agentNS + "/tierflow-agent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	const interval = 2 * time.Second
	e := newEnv(t, authn, server.Options{ReauthInterval: interval})
	populate(e)
	a := e.startAgent(e.agentConfig("n1", tr.Status.Token, e.addr, ""))
	e.waitConverged(a)

	// Valid token: re-authenticated several times, never cut.
	time.Sleep(3 * interval)
	if st := a.Client.Stats(); st.Connections != 1 || !a.Client.Connected() {
		t.Fatalf("a valid stream was cut by re-authentication: %+v, connected %v", st, a.Client.Connected())
	}

	if err := kube.CoreV1().Pods(agentNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for strings.Join(e.srv.ConnectedNodes(), ",") != "" {
		if time.Since(deleted) > interval+10*time.Second {
			t.Fatalf("the deleted pod's stream is still open after %v", time.Since(deleted))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("stream cut %v after the pod's deletion", time.Since(deleted).Round(10*time.Millisecond))
	// It stays refused: the agent keeps trying, and is never let in again.
	time.Sleep(interval)
	if got := e.srv.ConnectedNodes(); len(got) != 0 {
		t.Fatalf("connected after the pod's deletion: %v", got)
	}
	if n := e.metric("tierflow_distribution_auth_failures_total", ""); n < 2 {
		t.Errorf("auth failures %v, want the cut and the refused reconnections", n)
	}
}
