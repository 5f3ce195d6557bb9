package leaderendpoints

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// ManagedBy is the value of the endpointslice.kubernetes.io/managed-by
// label on the slices the leader writes.
const ManagedBy = "tierflow-controller.tierflow.io"

// The names of the ports the leader publishes; the Service's ports must
// carry the same names (kube-proxy matches them by name).
const (
	PortAgents = "agents"
	PortQuery  = "query"
)

// families in the order slices are written.
var families = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}

// SliceName is the name of service's EndpointSlice of family.
func SliceName(service string, family discoveryv1.AddressType) string {
	return service + "-" + strings.ToLower(string(family))
}

// SliceNames are the names of both of service's slices: the only
// EndpointSlices the controller may update or delete.
func SliceNames(service string) []string {
	out := make([]string, 0, len(families))
	for _, f := range families {
		out = append(out, SliceName(service, f))
	}
	return out
}

// Family is the EndpointSlice address type of a.
func Family(a netip.Addr) discoveryv1.AddressType {
	if a.Unmap().Is4() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// Config says what the leader publishes.
type Config struct {
	Kube kubernetes.Interface
	// Namespace and Service name the selector-less Service. The
	// controller's pods run in the same namespace (the endpoints'
	// targetRef).
	Namespace, Service string
	// Identity is the leader's Lease holder identity, its pod's name.
	Identity string
	// Addresses are the leader's addresses, at most one per family.
	Addresses []netip.Addr
	// Ports maps port names (PortAgents, PortQuery) to the ports the
	// leader listens on.
	Ports map[string]int32
	Log   *slog.Logger
}

// Publisher keeps the Service's EndpointSlices pointing at this replica.
// Run it only while leading.
type Publisher struct {
	cfg       Config
	addrs     map[discoveryv1.AddressType]netip.Addr
	ports     []discoveryv1.EndpointPort
	published atomic.Bool

	mu     sync.Mutex
	warned map[string]bool
}

// NewPublisher checks cfg.
func NewPublisher(cfg Config) (*Publisher, error) {
	if cfg.Kube == nil || cfg.Namespace == "" || cfg.Service == "" || cfg.Identity == "" {
		return nil, errors.New("leaderendpoints: a client, the Service's namespace and name and an identity are required")
	}
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("leaderendpoints: no address to publish")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &Publisher{cfg: cfg, addrs: map[discoveryv1.AddressType]netip.Addr{}, warned: map[string]bool{}}
	for _, a := range cfg.Addresses {
		f := Family(a)
		if _, dup := p.addrs[f]; dup {
			return nil, fmt.Errorf("leaderendpoints: two %s addresses (%s, %s)", f, p.addrs[f], a)
		}
		p.addrs[f] = a.Unmap()
	}
	for _, name := range []string{PortAgents, PortQuery} {
		if port, ok := cfg.Ports[name]; ok && port > 0 {
			p.ports = append(p.ports, discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)})
		}
	}
	if len(p.ports) != len(cfg.Ports) {
		return nil, fmt.Errorf("leaderendpoints: ports %v: want %s and/or %s, each in 1..65535", cfg.Ports, PortAgents, PortQuery)
	}
	return p, nil
}

// Published reports whether the slices have pointed at this replica at
// least once since Run started.
func (p *Publisher) Published() bool { return p.published.Load() }

// Run writes the slices, then watches them and writes again whenever they
// drift, until ctx ends. Failed writes are retried with backoff (up to 30
// seconds apart). It returns nil when ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(p.cfg.Kube, 0, informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + p.cfg.Service
		}))
	slices := factory.Discovery().V1().EndpointSlices()
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	if _, err := slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	poke()
	const minDelay, maxDelay = 200 * time.Millisecond, 30 * time.Second
	delay := minDelay
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
		}
		err := p.reconcile(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			p.cfg.Log.Error("pointing the Service at this leader failed; retrying", "service", p.cfg.Namespace+"/"+p.cfg.Service, "in", delay, "err", err)
			if retry != nil {
				retry.Stop()
			}
			retry = time.AfterFunc(delay, poke)
			delay = min(2*delay, maxDelay)
			continue
		}
		delay = minDelay
		if p.published.CompareAndSwap(false, true) {
			p.cfg.Log.Info("the Service points at this leader", "service", p.cfg.Namespace+"/"+p.cfg.Service, "addresses", p.cfg.Addresses)
		}
		p.warnForeign(slices.Lister().EndpointSlices(p.cfg.Namespace))
	}
}

func (p *Publisher) reconcile(ctx context.Context) error {
	ns, name := p.cfg.Namespace, p.cfg.Service
	svc, err := p.cfg.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the Service: %w", err)
	}
	if len(svc.Spec.Selector) > 0 {
		p.warnOnce("selector", "the Service has a selector: Kubernetes gives it every Ready replica as endpoints too, so agents may reach a follower; remove the selector (manifests/README.md)", "service", ns+"/"+name)
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}
	client := p.cfg.Kube.DiscoveryV1().EndpointSlices(ns)
	for _, fam := range families {
		sliceName := SliceName(name, fam)
		cur, err := client.Get(ctx, sliceName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = nil, nil
		}
		if err != nil {
			return fmt.Errorf("reading EndpointSlice %s: %w", sliceName, err)
		}
		addr, want := p.addrs[fam]
		if !want || (cur != nil && cur.AddressType != fam) {
			// No address of this family (a previous leader had one), or
			// a slice of that name with another address type, which
			// cannot be changed in place.
			if cur != nil {
				err := client.Delete(ctx, sliceName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting EndpointSlice %s: %w", sliceName, err)
				}
				cur = nil
			}
			if !want {
				continue
			}
		}
		desired := p.slice(sliceName, fam, addr, owner)
		if cur == nil {
			if _, err := client.Create(ctx, desired, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating EndpointSlice %s: %w", sliceName, err)
			}
			continue
		}
		if same(cur, desired) {
			continue
		}
		upd := cur.DeepCopy()
		if upd.Labels == nil {
			upd.Labels = map[string]string{}
		}
		for k, v := range desired.Labels {
			upd.Labels[k] = v
		}
		upd.OwnerReferences = desired.OwnerReferences
		upd.Endpoints, upd.Ports = desired.Endpoints, desired.Ports
		if _, err := client.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating EndpointSlice %s: %w", sliceName, err)
		}
	}
	return nil
}

func (p *Publisher) slice(name string, fam discoveryv1.AddressType, addr netip.Addr, owner metav1.OwnerReference) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.cfg.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: p.cfg.Service,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		AddressType: fam,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{addr.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.cfg.Namespace, Name: p.cfg.Identity},
		}},
		Ports: p.ports,
	}
}

// same reports whether cur already says what desired says (other labels
// may be there too).
func same(cur, desired *discoveryv1.EndpointSlice) bool {
	for k, v := range desired.Labels {
		if cur.Labels[k] != v {
			return false
		}
	}
	return apiequality.Semantic.DeepEqual(cur.OwnerReferences, desired.OwnerReferences) &&
		apiequality.Semantic.DeepEqual(cur.Endpoints, desired.Endpoints) &&
		apiequality.Semantic.DeepEqual(cur.Ports, desired.Ports)
}

// warnForeign logs, once per slice, the Service's slices written by
// someone else: kube-proxy routes to their endpoints too. A Service that
// had a selector before leaves such slices behind (Kubernetes does not
// delete them when the selector goes), and the controller may not delete
// them (its RBAC names only its own slices).
func (p *Publisher) warnForeign(lister discoverylisters.EndpointSliceNamespaceLister) {
	all, err := lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, s := range all {
		if s.Labels[discoveryv1.LabelManagedBy] == ManagedBy {
			continue
		}
		p.warnOnce("slice/"+s.Name, "an EndpointSlice of the Service is not the leader's: kube-proxy routes agents to its endpoints too; delete it (manifests/README.md, upgrading)",
			"service", p.cfg.Namespace+"/"+p.cfg.Service, "endpointSlice", s.Name, "managedBy", s.Labels[discoveryv1.LabelManagedBy])
	}
}

func (p *Publisher) warnOnce(key, msg string, args ...any) {
	p.mu.Lock()
	seen := p.warned[key]
	p.warned[key] = true
	p.mu.Unlock()
	if !seen {
		p.cfg.Log.Warn(msg, args...)
	}
}

// ErrNotPublished: the Lease holder's address is not in the Service's
// slices (yet).
var ErrNotPublished = errors.New("the leader has not published its address yet")

// Find returns host:port of the port named port of the replica holder,
// read from the Service's EndpointSlices; only the endpoint whose
// targetRef names holder counts. prefer is tried first (the caller's own
// address family, certainly routable).
func Find(ctx context.Context, kube kubernetes.Interface, namespace, service, holder, port string, prefer discoveryv1.AddressType) (string, error) {
	order := []discoveryv1.AddressType{prefer}
	for _, f := range families {
		if f != prefer {
			order = append(order, f)
		}
	}
	for _, fam := range order {
		s, err := kube.DiscoveryV1().EndpointSlices(namespace).Get(ctx, SliceName(service, fam), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading the Service's EndpointSlice: %w", err)
		}
		if s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
			continue
		}
		var portNum int32
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == port && p.Port != nil {
				portNum = *p.Port
			}
		}
		if portNum == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Name != holder || len(ep.Addresses) == 0 {
				continue
			}
			return net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(portNum))), nil
		}
	}
	return "", fmt.Errorf("%w: no %s port of %s in the EndpointSlices of Service %s/%s", ErrNotPublished, port, holder, namespace, service)
}

func ptr[T any](v T) *T { return &v }
