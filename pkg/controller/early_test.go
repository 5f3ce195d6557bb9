package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	npfake "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned/fake"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/test/watchlist"
)

// TestStreamedPodsAppliedEarlyEndInTheFinalState serves the initial lists
// as kube-apiserver's WatchList streams them. The pods' first stream
// breaks after some pods were applied to the engine while streaming; the
// second lacks some of them, relabels others (in and out of policies'
// groups) and adds new ones. Once the controller reports HasSynced its
// engine must hold exactly what an engine fed the final objects holds (a
// pod applied early and missing from the final list must be gone: left in
// a group it could open traffic).
func TestStreamedPodsAppliedEarlyEndInTheFinalState(t *testing.T) {
	defer func(n int) { earlyFeedMinPods = n }(earlyFeedMinPods)
	earlyFeedMinPods = 1 // the feed starts with the first pod
	nss, nodes, nps := earlyScenario()
	const streamed = 2600 // two runs of maxEventBatch applied while streaming, the rest buffered
	first := make([]*corev1.Pod, streamed)
	for i := range first {
		first[i] = scenarioPod(i, i%3 == 0)
	}
	// The final list: every fifth pod deleted, every seventh relabelled
	// (web ones lose the label, others gain it), 50 new ones.
	var final []*corev1.Pod
	for i := range streamed + 50 {
		switch {
		case i < streamed && i%5 == 0:
		case i < streamed && i%7 == 0:
			final = append(final, scenarioPod(i, i%3 != 0))
		default:
			final = append(final, scenarioPod(i, i%3 == 0))
		}
	}

	objs := append(append(asObjects(nss), asObjects(nodes)...), asObjects(nps)...)
	var ctl *Controller
	streams := &podStreams{
		streams: [][]*corev1.Pod{first, final},
		// The first stream starts once the other kinds are in the engine
		// (the early feed waits for them) and breaks once the early feed
		// has applied some of its pods.
		before: func(stream int) error {
			if stream > 0 {
				return nil
			}
			return waitFor(func() bool { return ctl.earlyPods.ready() })
		},
		breakAfter: func() error {
			return waitFor(func() bool { return enginePods(ctl.engine, nodes) >= 2*maxEventBatch })
		},
	}
	kube := &streamingClientset{Clientset: fake.NewSimpleClientset(objs...), pods: streams} //nolint:staticcheck // no field management needed
	var err error
	ctl, err = New(Config{Kube: kube, Policy: npfake.NewSimpleClientset()})
	if err != nil {
		t.Fatal(err)
	}
	runUntilSynced(t, ctl)
	if err := streams.err(); err != nil {
		t.Fatalf("serving the pod streams: %v", err)
	}
	if streams.served() < 2 {
		t.Fatalf("served %d pod streams, want the broken one and the final one", streams.served())
	}

	want := compute.New()
	for _, o := range nss {
		want.UpsertNamespace(o)
	}
	for _, o := range nodes {
		want.UpsertNode(o)
	}
	for _, o := range nps {
		want.UpsertNetworkPolicy(o)
	}
	for _, p := range final {
		want.UpsertPod(p)
	}
	wantSnap := want.Snapshot()
	if len(wantSnap.Policies) != 2 || len(wantSnap.NodePods) != len(nodes) {
		t.Fatalf("the reference computed %d policies and pods on %d nodes; the scenario is wrong", len(wantSnap.Policies), len(wantSnap.NodePods))
	}
	if diff := sameComputation(t, ctl.engine.Snapshot(), wantSnap); diff != "" {
		t.Errorf("after HasSynced the engine differs from one fed the final state: %s", diff)
	}

	// From an API server that only lists (the fake clientset's lists and
	// watches), the early feed runs inside the informer's Replace; the
	// result is the same.
	objs = append(objs, asObjects(final)...)
	listed, err := New(Config{Kube: fake.NewSimpleClientset(objs...), Policy: npfake.NewSimpleClientset()}) //nolint:staticcheck // no field management needed
	if err != nil {
		t.Fatal(err)
	}
	runUntilSynced(t, listed)
	if diff := sameComputation(t, listed.engine.Snapshot(), wantSnap); diff != "" {
		t.Errorf("listed: the engine differs from one fed the final state: %s", diff)
	}
}

func asObjects[T runtime.Object](in []T) []runtime.Object {
	out := make([]runtime.Object, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

// earlyScenario: two namespaces, two nodes, a NetworkPolicy in each
// namespace: one selects web pods and admits blue namespaces, the other
// selects every pod and admits web pods of any namespace.
func earlyScenario() ([]*corev1.Namespace, []*corev1.Node, []*networkingv1.NetworkPolicy) {
	nss := []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "red"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"team": "blue"}}},
	}
	var nodes []*corev1.Node
	for i := range 2 {
		nodes = append(nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)},
			Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", i+1)}}},
		})
	}
	web := map[string]string{"app": "web"}
	nps := []*networkingv1.NetworkPolicy{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web-from-blue"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: web},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}}}}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "all-from-web"},
			Spec: networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: web}}}}},
			},
		},
	}
	return nss, nodes, nps
}

// scenarioPod is pod i of the scenario: in namespace a or b, on node-0 or
// node-1, running with an address; labelled app=web when web, else
// app=db.
func scenarioPod(i int, web bool) *corev1.Pod {
	app := "db"
	if web {
		app = "web"
	}
	ip := fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: []string{"a", "b"}[i%2], Name: fmt.Sprintf("pod-%d", i),
			Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i/2%2),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// enginePods counts the pods the engine has on the nodes.
func enginePods(e *compute.Engine, nodes []*corev1.Node) int {
	n := 0
	for _, node := range nodes {
		if np, ok := e.NodePods(node.Name); ok {
			n += len(np.Pods)
		}
	}
	return n
}

// waitFor polls cond for up to a minute.
func waitFor(cond func() bool) error {
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// runUntilSynced runs ctl until the test ends and waits for HasSynced.
func runUntilSynced(t *testing.T, ctl *Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if err := waitFor(ctl.HasSynced); err != nil {
		t.Fatal("controller never synced")
	}
}

// sameComputation compares what two engines computed: their snapshots
// but for the engine generations, which count the engine's own history
// (the order and batching of its inputs), not its result. It returns
// "" when they agree, else the first line of the snapshots' JSON that
// differs.
func sameComputation(t *testing.T, got, want *model.Snapshot) string {
	t.Helper()
	g, w := canonicalSnapshot(t, got), canonicalSnapshot(t, want)
	if g == w {
		return ""
	}
	gl, wl := strings.Split(g, "\n"), strings.Split(w, "\n")
	for i := range min(len(gl), len(wl)) {
		if gl[i] != wl[i] {
			return fmt.Sprintf("line %d: got %s, want %s", i+1, gl[i], wl[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(gl), len(wl))
}

// canonicalSnapshot is s as indented JSON (maps sorted) without the
// engine's generation fields.
func canonicalSnapshot(t *testing.T, s *model.Snapshot) string {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var strip func(any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			delete(v, "generation")
			for _, e := range v {
				strip(e)
			}
		case []any:
			for _, e := range v {
				strip(e)
			}
		}
	}
	strip(v)
	out, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// streamingClientset serves the core kinds' initial lists as streams
// (kube-apiserver's WatchList, which client-go's reflectors ask for when
// the client says it is supported): the namespaces, nodes and
// NetworkPolicies of its fake clientset's tracker, the pods of pods.
type streamingClientset struct {
	*fake.Clientset
	pods *podStreams
}

var _ kubernetes.Interface = (*streamingClientset)(nil)

// IsWatchListSemanticsUnSupported: the initial lists are streamed (the
// fake clientset says they are not).
func (*streamingClientset) IsWatchListSemanticsUnSupported() bool { return false }

func (k *streamingClientset) CoreV1() corev1client.CoreV1Interface {
	return streamingCoreV1{k.Clientset.CoreV1(), k}
}

func (k *streamingClientset) NetworkingV1() networkingv1client.NetworkingV1Interface {
	return streamingNetworkingV1{k.Clientset.NetworkingV1(), k}
}

type streamingCoreV1 struct {
	corev1client.CoreV1Interface
	k *streamingClientset
}

func (s streamingCoreV1) Namespaces() corev1client.NamespaceInterface {
	return streamedNamespaces{s.CoreV1Interface.Namespaces()}
}

func (s streamingCoreV1) Nodes() corev1client.NodeInterface {
	return streamedNodes{s.CoreV1Interface.Nodes()}
}

func (s streamingCoreV1) Pods(namespace string) corev1client.PodInterface {
	return streamedPods{s.CoreV1Interface.Pods(namespace), s.k.pods}
}

type streamingNetworkingV1 struct {
	networkingv1client.NetworkingV1Interface
	k *streamingClientset
}

func (s streamingNetworkingV1) NetworkPolicies(namespace string) networkingv1client.NetworkPolicyInterface {
	return streamedNetworkPolicies{s.NetworkingV1Interface.NetworkPolicies(namespace)}
}

type streamedNamespaces struct {
	corev1client.NamespaceInterface
}

func (s streamedNamespaces) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if !watchlist.WantsInitialEvents(opts) {
		return s.NamespaceInterface.Watch(ctx, opts)
	}
	l, err := s.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return streamList(ctx, itemsOf(l.Items), &corev1.Namespace{}, s.NamespaceInterface.Watch)
}

type streamedNodes struct{ corev1client.NodeInterface }

func (s streamedNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if !watchlist.WantsInitialEvents(opts) {
		return s.NodeInterface.Watch(ctx, opts)
	}
	l, err := s.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return streamList(ctx, itemsOf(l.Items), &corev1.Node{}, s.NodeInterface.Watch)
}

type streamedNetworkPolicies struct {
	networkingv1client.NetworkPolicyInterface
}

func (s streamedNetworkPolicies) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if !watchlist.WantsInitialEvents(opts) {
		return s.NetworkPolicyInterface.Watch(ctx, opts)
	}
	l, err := s.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return streamList(ctx, itemsOf(l.Items), &networkingv1.NetworkPolicy{}, s.NetworkPolicyInterface.Watch)
}

func itemsOf[T any, P interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = P(&items[i])
	}
	return out
}

// streamList streams objs as Added events, then the bookmark that ends
// the initial events (end, an empty object of the kind), then what rest's
// watch sends.
func streamList(ctx context.Context, objs []runtime.Object, end runtime.Object, rest func(context.Context, metav1.ListOptions) (watch.Interface, error)) (watch.Interface, error) {
	return watchlist.Serve(ctx, func(send func(runtime.Object) bool) {
		for _, o := range objs {
			if !send(o) {
				return
			}
		}
	}, end, 0, rest)
}

// podStreams serves the pods' streamed initial lists: the i-th watch that
// asks for initial events streams streams[i] (later ones the last). All
// but the last break after their pods (the watch closes with no
// bookmark, which the reflector answers by streaming again); the last
// ends with the bookmark.
type podStreams struct {
	streams [][]*corev1.Pod
	// before runs before stream i's pods; breakAfter before a stream
	// breaks.
	before     func(stream int) error
	breakAfter func() error

	mu     sync.Mutex
	n      int
	failed error
}

func (s *podStreams) next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n - 1
}

func (s *podStreams) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = err
	}
}

func (s *podStreams) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *podStreams) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type streamedPods struct {
	corev1client.PodInterface
	streams *podStreams
}

func (s streamedPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if !watchlist.WantsInitialEvents(opts) {
		return s.PodInterface.Watch(ctx, opts)
	}
	i := s.streams.next()
	last := i >= len(s.streams.streams)-1
	pods := s.streams.streams[min(i, len(s.streams.streams)-1)]
	objs := make([]runtime.Object, len(pods))
	for j, p := range pods {
		objs[j] = p.DeepCopy() // each stream decodes objects of its own
	}
	if err := s.streams.before(i); err != nil {
		s.streams.fail(fmt.Errorf("before stream %d: %w", i, err))
	}
	if last {
		return streamList(ctx, objs, &corev1.Pod{}, s.PodInterface.Watch)
	}
	events := make(chan watch.Event)
	w := watch.NewProxyWatcher(events)
	go func() {
		defer close(events) // no bookmark: the stream broke
		for _, o := range objs {
			select {
			case events <- watch.Event{Type: watch.Added, Object: o}:
			case <-w.StopChan():
				return
			}
		}
		if err := s.streams.breakAfter(); err != nil {
			s.streams.fail(fmt.Errorf("stream %d: pods not applied while streaming: %w", i, err))
		}
	}()
	return w, nil
}

// TestEarlyPodsBookkeeping drives the early feed by hand: the informer's
// delivery of the very object fed queues nothing; any other version or a
// delete is queued; the feed stops at the first already-transformed pod
// (the reflector's Replace); a pod fed and never delivered is deleted by
// finish; a pod whose key's hash another fed pod has is left to its
// handler event. The engine ends with exactly the delivered pods.
func TestEarlyPodsBookkeeping(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			if collide {
				defer func(h func(eventKey) uint64) { hashEventKey = h }(hashEventKey)
				hashEventKey = func(eventKey) uint64 { return 1 }
			}
			defer func(n int) { earlyFeedMinPods = n }(earlyFeedMinPods)
			earlyFeedMinPods = 1 // the feed starts with the first pod
			e := compute.New()
			q := newEventQueue(e)
			var upserts []string
			kind := &eventKind{
				kind: podKind,
				upsert: func(w compute.Writer, obj interface{}) {
					p := obj.(*cachedPod)
					upserts = append(upserts, p.Name)
					w.UpsertPreparedPod(p.prepared)
				},
				del: func(w compute.Writer, m metav1.Object) { w.DeletePod(m.GetNamespace(), m.GetName()) },
			}
			f := newEarlyPods(q, kind, func() bool { return true })
			transform := func(p *corev1.Pod) *cachedPod {
				out, err := f.transform(p)
				if err != nil {
					t.Fatal(err)
				}
				return out.(*cachedPod)
			}
			// Streamed: pods 0-3; pod 1 twice (a broken stream streamed
			// again), the second time relabelled.
			p0 := transform(scenarioPod(0, true))
			transform(scenarioPod(1, true))
			p2 := transform(scenarioPod(2, true))
			p3 := transform(scenarioPod(3, false))
			p1b := transform(scenarioPod(1, false))
			// The Replace: the streamed objects pass the transform again,
			// which stops the feed (and queues what it buffered).
			if _, err := f.transform(p0); err != nil {
				t.Fatal(err)
			}
			if late := transform(scenarioPod(9, true)); late == nil {
				t.Fatal("no transform")
			}
			q.applyPending()
			wantFed := []string{"pod-0", "pod-1", "pod-2", "pod-3"}
			if collide {
				wantFed = []string{"pod-0"} // the first to take hash 1
			}
			if fmt.Sprint(upserts) != fmt.Sprint(wantFed) {
				t.Fatalf("applied while streaming %v, want %v", upserts, wantFed)
			}
			upserts = nil
			// The informer delivers the final list: p0 as fed, p1 as
			// streamed the second time, p2 in a version of its own (a
			// pointer the feed did not see), then a delete of p3; pod-9
			// (seen after the feed stopped) is never delivered.
			deliver := func(p *cachedPod, deleted bool) {
				if !f.delivered(p, p, deleted) {
					q.push(eventKey{kind: podKind, namespace: p.Namespace, name: p.Name}, kind, p, deleted)
				}
			}
			deliver(p0, false)
			deliver(p1b, false)
			p2b := p2.DeepCopyObject().(*cachedPod)
			deliver(p2b, false)
			deliver(p3, false)
			deliver(p3, true)
			f.finish()
			q.applyPending()
			wantDelivered := []string{"pod-2"}
			if collide {
				// Only pod-0 was fed: the others are queued by their
				// handler events.
				wantDelivered = []string{"pod-1", "pod-2"}
			}
			if fmt.Sprint(upserts) != fmt.Sprint(wantDelivered) {
				t.Errorf("applied after the list %v, want %v (the objects fed are not applied again)", upserts, wantDelivered)
			}

			want := compute.New()
			for _, i := range []int{0, 2} {
				want.UpsertPod(scenarioPod(i, true))
			}
			want.UpsertPod(scenarioPod(1, false))
			if diff := sameComputation(t, e.Snapshot(), want.Snapshot()); diff != "" {
				t.Errorf("the engine differs from one fed the delivered pods: %s", diff)
			}
			// Once finished, the feed is out of the way.
			if f.delivered(p0, p0, false) {
				t.Error("after finish an event was taken for one the feed queued")
			}
		})
	}
}

// TestEarlyPodsShortListNotFed: a list shorter than earlyFeedMinPods is
// not fed; its handler events queue every pod, as without the feed.
func TestEarlyPodsShortListNotFed(t *testing.T) {
	q := newEventQueue(compute.New())
	f := newEarlyPods(q, &eventKind{kind: podKind}, func() bool { return true })
	var pods []*cachedPod
	for i := range 3 {
		out, err := f.transform(scenarioPod(i, true))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, out.(*cachedPod))
	}
	if _, err := f.transform(pods[0]); err != nil { // the Replace
		t.Fatal(err)
	}
	if q.mark() != 0 {
		t.Fatalf("%d events queued by a feed that should not have started", q.mark())
	}
	for _, p := range pods {
		if f.delivered(p, p, false) {
			t.Errorf("%s: delivered taken for a pod never queued", p.Name)
		}
	}
}
