package controller

import (
	"context"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	npfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// TestEarlyPodsFromKubeAPIServer: against a real kube-apiserver the pods
// are fed to the engine by the informer's transform and, once the
// controller has synced, the engine holds what an engine fed the API's
// objects holds; later changes (deletes, a relabel, a pod made again)
// still flow. The kube-apiserver here lists (its WatchList needs etcd's
// progress notifications, which the etcd 3.4 here lacks), so the feed
// runs inside the informer's Replace: the path of an API server that only
// lists. TestStreamedPodsAppliedEarlyEndInTheFinalState serves streams.
func TestEarlyPodsFromKubeAPIServer(t *testing.T) {
	c := kubeapi.Start(t)
	ctx := context.Background()
	nss, nodes, nps := earlyScenario()
	for _, ns := range nss {
		c.CreateNamespace(t, ns.Name, ns.Labels)
	}
	for _, n := range nodes {
		created, err := c.Kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = n.Status
		if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, np := range nps {
		if _, err := c.Kube.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const pods = 1500 // one run of maxEventBatch queued from the transform
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < pods; i += 8 {
				p := scenarioPod(i, i%3 == 0)
				created, err := c.Kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
				if err == nil {
					created.Status = p.Status
					_, err = c.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	defer func(n int) { earlyFeedMinPods = n }(earlyFeedMinPods)
	earlyFeedMinPods = 1
	ctl, err := New(Config{Kube: c.Kube, Policy: npfake.NewSimpleClientset()})
	if err != nil {
		t.Fatal(err)
	}
	// The feed starts with the first pod, whether or not the other kinds
	// are in the engine by then (the server's timing).
	ctl.earlyPods.ready = func() bool { return true }
	runUntilSynced(t, ctl)
	ctl.earlyPods.mu.Lock()
	started, fed := ctl.earlyPods.started, ctl.earlyPods.streamed
	ctl.earlyPods.mu.Unlock()
	if !started || fed != pods {
		t.Fatalf("early feed started %v after %d pods streamed, want started, %d", started, fed, pods)
	}

	sameAsAPI := func() string {
		want := compute.New()
		nsl, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range nsl.Items {
			want.UpsertNamespace(&nsl.Items[i])
		}
		nl, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range nl.Items {
			want.UpsertNode(&nl.Items[i])
		}
		npl, err := c.Kube.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range npl.Items {
			want.UpsertNetworkPolicy(&npl.Items[i])
		}
		pl, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pl.Items {
			want.UpsertPod(&pl.Items[i])
		}
		return sameComputation(t, ctl.engine.Snapshot(), want.Snapshot())
	}
	if diff := sameAsAPI(); diff != "" {
		t.Fatalf("after HasSynced the engine differs from one fed the API's objects: %s", diff)
	}

	// After the sync: a pod deleted, one relabelled, one fed early
	// deleted and made again.
	for _, i := range []int{3, 7} {
		p := scenarioPod(i, false)
		if err := c.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.Kube.CoreV1().Pods("a").Get(ctx, "pod-4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"app": "web"}
	if _, err := c.Kube.CoreV1().Pods("a").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	again := scenarioPod(7, true)
	created, err := c.Kube.CoreV1().Pods(again.Namespace).Create(ctx, again, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = again.Status
	if _, err := c.Kube.CoreV1().Pods(again.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() bool { return sameAsAPI() == "" }); err != nil {
		t.Fatalf("after changes the engine differs from one fed the API's objects: %s", sameAsAPI())
	}
}
