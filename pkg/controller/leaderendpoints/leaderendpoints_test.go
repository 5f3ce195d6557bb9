package leaderendpoints_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tierflow/tierflow/pkg/controller/leaderendpoints"
	"github.com/tierflow/tierflow/test/kubeapi"
)

const (
	ns      = "kube-system"
	service = "tierflow-controller"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPublisherPointsTheServiceAtTheLeader runs publishers, as users with
// only the documented RBAC, against a real API server: the first leader
// (dual-stack) writes one slice per family, rewrites them when edited or
// deleted, and makes no writes in a steady state; the next leader
// (IPv4 only) overwrites the IPv4 slice and deletes the IPv6 one. Find
// accepts only the current holder's endpoint.
func TestPublisherPointsTheServiceAtTheLeader(t *testing.T) {
	c := kubeapi.Start(t)
	ctx := context.Background()
	svc, err := c.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: service},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: leaderendpoints.PortAgents, Port: 10349},
			{Name: leaderendpoints.PortQuery, Port: 10352},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kube := restrictedClient(t, c)
	slices := c.Kube.DiscoveryV1().EndpointSlices(ns)

	logs := &syncBuffer{}
	a := startPublisher(t, leaderendpoints.Config{
		Kube: kube, Namespace: ns, Service: service, Identity: "ctl-a",
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
		Ports:     map[string]int32{leaderendpoints.PortAgents: 10349, leaderendpoints.PortQuery: 10352},
		Log:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	want := map[string]string{"tierflow-controller-ipv4": "10.0.0.1", "tierflow-controller-ipv6": "fd00::1"}
	eventually(t, "slices of both families point at ctl-a", func() error {
		return slicesAre(ctx, slices, svc, "ctl-a", want, 10349, 10352)
	})
	if !a.p.Published() {
		t.Error("Published is false after the slices were written")
	}
	for _, tc := range []struct {
		holder string
		prefer discoveryv1.AddressType
		want   string
	}{
		{"ctl-a", discoveryv1.AddressTypeIPv4, "10.0.0.1:10352"},
		{"ctl-a", discoveryv1.AddressTypeIPv6, "[fd00::1]:10352"},
	} {
		got, err := leaderendpoints.Find(ctx, kube, ns, service, tc.holder, leaderendpoints.PortQuery, tc.prefer)
		if err != nil || got != tc.want {
			t.Errorf("Find(%s, %s) = %q, %v; want %s", tc.holder, tc.prefer, got, err, tc.want)
		}
	}
	if got, err := leaderendpoints.Find(ctx, kube, ns, service, "ctl-b", leaderendpoints.PortQuery, discoveryv1.AddressTypeIPv4); !errors.Is(err, leaderendpoints.ErrNotPublished) {
		t.Errorf("Find for a holder that has not published: %q, %v", got, err)
	}

	// A steady state makes no writes.
	versions := func() string {
		t.Helper()
		list, err := slices.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name+"@"+s.ResourceVersion)
		}
		return strings.Join(out, " ")
	}
	before := versions()
	time.Sleep(time.Second)
	if after := versions(); after != before {
		t.Errorf("writes in a steady state: %s → %s", before, after)
	}

	// Drift is repaired: a deleted slice comes back, an edited one is
	// restored.
	if err := slices.Delete(ctx, "tierflow-controller-ipv4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s6, err := slices.Get(ctx, "tierflow-controller-ipv6", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s6.Endpoints[0].Addresses = []string{"fd00::99"}
	if _, err := slices.Update(ctx, s6, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "slices restored", func() error {
		return slicesAre(ctx, slices, svc, "ctl-a", want, 10349, 10352)
	})

	// The next leader, IPv4 only, on other ports. (Its predecessor exits
	// when it loses the Lease: stop it first.)
	a.stop()
	b := startPublisher(t, leaderendpoints.Config{
		Kube: kube, Namespace: ns, Service: service, Identity: "ctl-b",
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.2")},
		Ports:     map[string]int32{leaderendpoints.PortAgents: 20349, leaderendpoints.PortQuery: 20352},
		Log:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	eventually(t, "the IPv4 slice points at ctl-b, the IPv6 slice is gone", func() error {
		return slicesAre(ctx, slices, svc, "ctl-b", map[string]string{"tierflow-controller-ipv4": "10.0.0.2"}, 20349, 20352)
	})
	if got, err := leaderendpoints.Find(ctx, kube, ns, service, "ctl-b", leaderendpoints.PortAgents, discoveryv1.AddressTypeIPv6); err != nil || got != "10.0.0.2:20349" {
		t.Errorf("Find(ctl-b) = %q, %v", got, err)
	}
	if got, err := leaderendpoints.Find(ctx, kube, ns, service, "ctl-a", leaderendpoints.PortQuery, discoveryv1.AddressTypeIPv4); !errors.Is(err, leaderendpoints.ErrNotPublished) {
		t.Errorf("Find for the previous leader: %q, %v", got, err)
	}

	// A slice someone else manages for the Service (left by the
	// EndpointSlice controller when the Service had a selector) is
	// reported: the leader may not delete it.
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "tierflow-controller-x7k2p", Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
	}
	if _, err := slices.Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the foreign slice is reported", func() error {
		if !strings.Contains(logs.String(), "endpointSlice=tierflow-controller-x7k2p") {
			return errors.New("no warning")
		}
		return nil
	})
	if err := slices.Delete(ctx, foreign.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.stop()
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs)
	}
}

type running struct {
	p    *leaderendpoints.Publisher
	stop func()
}

func startPublisher(t *testing.T, cfg leaderendpoints.Config) *running {
	t.Helper()
	p, err := leaderendpoints.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", cfg.Identity, err)
			}
		})
	}
	t.Cleanup(stop)
	return &running{p: p, stop: stop}
}

// slicesAre checks that the Service's slices are exactly want (name →
// address), each the holder's, with the ports and the Service as owner.
func slicesAre(ctx context.Context, slices interface {
	List(context.Context, metav1.ListOptions) (*discoveryv1.EndpointSliceList, error)
}, svc *corev1.Service, holder string, want map[string]string, agentsPort, queryPort int32) error {
	list, err := slices.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, s := range list.Items {
		if len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 {
			return fmt.Errorf("%s: endpoints %+v", s.Name, s.Endpoints)
		}
		ep := s.Endpoints[0]
		got[s.Name] = ep.Addresses[0]
		if s.Labels[discoveryv1.LabelManagedBy] != leaderendpoints.ManagedBy {
			return fmt.Errorf("%s: labels %v", s.Name, s.Labels)
		}
		if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || ep.TargetRef.Name != holder || ep.TargetRef.Namespace != ns {
			return fmt.Errorf("%s: targetRef %+v, want pod %s/%s", s.Name, ep.TargetRef, ns, holder)
		}
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
			return fmt.Errorf("%s: conditions %+v", s.Name, ep.Conditions)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svc.UID {
			return fmt.Errorf("%s: owners %+v", s.Name, s.OwnerReferences)
		}
		ports := map[string]int32{}
		for _, p := range s.Ports {
			ports[*p.Name] = *p.Port
		}
		if len(ports) != 2 || ports[leaderendpoints.PortAgents] != agentsPort || ports[leaderendpoints.PortQuery] != queryPort {
			return fmt.Errorf("%s: ports %v", s.Name, ports)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("slices %v, want %v", got, want)
	}
	return nil
}

// restrictedClient authenticates as a user holding exactly the RBAC the
// package documents (the manifests grant the controller the same; their
// test asks the authorizer).
func restrictedClient(t *testing.T, c *kubeapi.Cluster) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "leader-endpoints", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"update", "delete"},
				ResourceNames: leaderendpoints.SliceNames(service)},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"}, ResourceNames: []string{service}},
		},
	}
	if _, err := c.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "leader-endpoints", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "leader"}},
	}
	if _, err := c.Kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(c.ConfigFor(t, "leader"))
	if err != nil {
		t.Fatal(err)
	}
	// RBAC sees a new binding within moments.
	eventually(t, "the role applies", func() error {
		_, err := kube.CoreV1().Services(ns).Get(ctx, service, metav1.GetOptions{})
		return err
	})
	return kube
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
