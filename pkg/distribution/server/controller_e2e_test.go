package server_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/pkg/distribution/disttest"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/statusbridge"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestControllerToAgents is the whole path on a real kube-apiserver: API
// objects → controller informers → engine → distribution server →
// three datapath-less agents authenticated by pod-bound service account
// tokens, and realization back into the AdminNetworkPolicy's status.
// Every change goes through the API; after each one every agent must hold
// exactly the engine's snapshot filtered to its node.
func TestControllerToAgents(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := c.Kube
	nodes := []string{"n1", "n2", "n3"}

	// Agent identities: a service account, a pod per node, a bound token.
	c.CreateNamespace(t, agentNS, nil)
	must(t, create(ctx, kube.CoreV1().ServiceAccounts(agentNS), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tierflow-agent"}}))
	tokens := map[string]string{}
	for i, n := range nodes {
		must(t, create(ctx, kube.CoreV1().Nodes(), node(n, fmt.Sprintf("192.168.1.%d", i+1))))
		p, err := kube.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-" + n},
			Spec: corev1.PodSpec{NodeName: n, ServiceAccountName: "tierflow-agent", HostNetwork: true,
				Containers: []corev1.Container{{Name: "agent", Image: "tierflow-agent"}}},
		}, metav1.CreateOptions{})
		must(t, err)
		tr, err := kube.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, "tierflow-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences:      []string{"tierflow"},
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		}}, metav1.CreateOptions{})
		must(t, err)
		tokens[n] = tr.Status.Token
	}

	// The controller process: controller + engine + distribution server.
	engine := compute.New()
	authn, err := server.NewTokenReviewAuthenticator(kube, server.TokenReviewConfig{
		Audiences: []string{"tierflow"}, ServiceAccounts: []string{agentNS + "/tierflow-agent"},
	})
	must(t, err)
	var ctrl *controller.Controller
	notifier := &statusbridge.Notifier{}
	srv := server.New(engine, authn, server.Options{
		OnSummary: notifier.Sink,
		Ready:     func() bool { return ctrl != nil && ctrl.HasSynced() },
		Logger:    quietLogger(),
	})
	ctrl, err = controller.New(controller.Config{Kube: kube, Policy: c.Policy, Engine: engine, Identity: "e2e",
		Realization: statusbridge.Source{Server: srv}, CRDPollInterval: time.Second})
	must(t, err)
	notifier.Set(ctrl)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Run(runCtx)
	go func() { _ = ctrl.Run(runCtx) }()
	serverTLS, clientTLS := disttest.TLS(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	g := srv.GRPCServer(serverTLS)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	// Workload.
	c.CreateNamespace(t, "frontend", map[string]string{"team": "fe"})
	c.CreateNamespace(t, "backend", map[string]string{"team": "be"})
	runPod(t, ctx, c, pod("frontend", "web-1", "n1", ip(1), map[string]string{"app": "web"}))
	runPod(t, ctx, c, pod("frontend", "web-2", "n2", ip(2), map[string]string{"app": "web"}))
	runPod(t, ctx, c, pod("backend", "db-1", "n3", ip(3), map[string]string{"app": "db"}))
	runPod(t, ctx, c, pod("backend", "db-2", "n1", ip(4), map[string]string{"app": "db"}))
	np := allowFrom("backend", "db-allow", "db", "fe", "web")
	np.UID, np.Generation = "", 0
	must(t, create(ctx, kube.NetworkingV1().NetworkPolicies("backend"), np))
	anp := denyEgress("fe-deny", 10, "fe", "be", "db")
	anp.UID, anp.Generation = "", 0
	must(t, create(ctx, c.Policy.PolicyV1alpha1().AdminNetworkPolicies(), anp))

	// Agents: each one claims nothing; its token says which node it is.
	var agents []*nodatapath.Runtime
	for _, n := range nodes {
		r, err := nodatapath.Start(ctx, clientConfig(n, tokens[n], lis.Addr().String(), clientTLS))
		must(t, err)
		t.Cleanup(r.Stop)
		agents = append(agents, r)
	}
	// The engine must have the policies before "converged" means anything.
	waitFor(t, "engine computed both policies", func() bool { return len(engine.Snapshot().Policies) == 2 })
	waitConverged(t, engine, agents...)

	inAG := func(pod string) bool { return snapshotHas(engine.Snapshot(), pod, "", true) }
	steps := []struct {
		name string
		do   func()
		seen func() bool // the engine has the change
	}{
		{"pod relabel", func() {
			p, err := kube.CoreV1().Pods("frontend").Get(ctx, "web-2", metav1.GetOptions{})
			must(t, err)
			p.Labels = map[string]string{"app": "other"}
			_, err = kube.CoreV1().Pods("frontend").Update(ctx, p, metav1.UpdateOptions{})
			must(t, err)
		}, func() bool { return !inAG("web-2") }},
		{"pod moves to another node", func() {
			must(t, kube.CoreV1().Pods("backend").Delete(ctx, "db-2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
			runPod(t, ctx, c, pod("backend", "db-2", "n2", ip(14), map[string]string{"app": "db"}))
		}, func() bool { return snapshotHas(engine.Snapshot(), "db-2", "n2", false) }},
		{"namespace relabel", func() {
			ns, err := kube.CoreV1().Namespaces().Get(ctx, "frontend", metav1.GetOptions{})
			must(t, err)
			ns.Labels["team"] = "fe-2"
			_, err = kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
			must(t, err)
		}, func() bool { return !inAG("web-1") }},
		{"network policy edit", func() {
			cur, err := kube.NetworkingV1().NetworkPolicies("backend").Get(ctx, "db-allow", metav1.GetOptions{})
			must(t, err)
			cur.Spec.Ingress[0].From[0].NamespaceSelector = sel("team", "fe-2")
			_, err = kube.NetworkingV1().NetworkPolicies("backend").Update(ctx, cur, metav1.UpdateOptions{})
			must(t, err)
		}, func() bool { return inAG("web-1") }},
	}
	for _, s := range steps {
		s.do()
		waitFor(t, "engine sees: "+s.name, s.seen)
		waitConverged(t, engine, agents...)
		t.Logf("converged after: %s", s.name)
	}

	// Realization reaches the AdminNetworkPolicy's status.
	waitFor(t, "Realized condition on the AdminNetworkPolicy", func() bool {
		cur, err := c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, "fe-deny", metav1.GetOptions{})
		if err != nil {
			return false
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionRealized)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == cur.Generation
	})

	// Deleting the policy removes it from every agent.
	must(t, c.Policy.PolicyV1alpha1().AdminNetworkPolicies().Delete(ctx, "fe-deny", metav1.DeleteOptions{}))
	waitFor(t, "engine dropped the admin policy", func() bool { return len(engine.Snapshot().Policies) == 1 })
	waitConverged(t, engine, agents...)
	for _, a := range agents {
		if policyBySource(a.State(), "fe-deny") != nil {
			t.Errorf("agent %s still holds the deleted policy", a.Node())
		}
	}
}

type creator[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}

func create[T any](ctx context.Context, c creator[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	return err
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runPod creates a pod and gives it the running status and IP a kubelet
// would.
func runPod(t testing.TB, ctx context.Context, c *kubeapi.Cluster, p *corev1.Pod) {
	t.Helper()
	status := p.Status
	p.UID, p.Status = "", corev1.PodStatus{}
	created, err := c.Kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	must(t, err)
	created.Status = status
	_, err = c.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	must(t, err)
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// snapshotHas reports whether a pod is a member of an address group
// (addressGroups) or of an applied-to group on node.
func snapshotHas(snap *model.Snapshot, pod, node string, addressGroups bool) bool {
	if addressGroups {
		for _, g := range snap.AddressGroups {
			for _, m := range g.Members {
				if m.Pod != nil && m.Pod.Name == pod {
					return true
				}
			}
		}
		return false
	}
	for _, g := range snap.AppliedToGroups {
		for _, m := range g.MembersByNode.Get(node) {
			if m.Pod != nil && m.Pod.Name == pod {
				return true
			}
		}
	}
	return false
}
