package services

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

func svc(name string, mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
		Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("web")}},
	}}
	if mut != nil {
		mut(s)
	}
	return s
}

type ep struct {
	ip, node, pod          string
	ready, serving, termin *bool
}

func slice(name, svcName string, at discoveryv1.AddressType, ports map[string]int32, eps ...ep) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svcName}}, AddressType: at}
	for n, p := range ports {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr(n), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(p)})
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.termin}}
		if e.node != "" {
			x.NodeName = ptr(e.node)
		}
		if e.pod != "" {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: e.pod}
		}
		sl.Endpoints = append(sl.Endpoints, x)
	}
	return sl
}

func addrs(eps []Endpoint) string {
	var s []string
	for _, e := range eps {
		s = append(s, e.String())
	}
	return strings.Join(s, " ")
}

// TestNamedTargetPortResolvesPerSlice: the endpoint port is the slice's
// port of the Service port's name, so pods declaring the named port with
// different numbers get their own; slices of other Services and ports of
// other names are not used.
func TestNamedTargetPortResolvesPerSlice(t *testing.T) {
	s := svc("web", nil)
	ports, warn := Translate(s, []*discoveryv1.EndpointSlice{
		slice("web-a", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080}, ep{ip: "10.244.1.2", node: "n1", pod: "a"}),
		slice("web-b", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 9090}, ep{ip: "10.244.2.2", node: "n2", pod: "b"}),
		slice("other", "other", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 1}, ep{ip: "10.244.3.3"}),
		slice("web-c", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"metrics": 7}, ep{ip: "10.244.4.4"}),
	})
	if len(warn) != 0 || len(ports) != 1 {
		t.Fatalf("ports %v, warnings %v", ports, warn)
	}
	p := ports[0]
	if got := addrs(p.Endpoints); got != "10.244.1.2:8080 10.244.2.2:9090" {
		t.Fatalf("endpoints %s", got)
	}
	if p.Endpoints[0].Pod != "ns/a" || p.Endpoints[1].NodeName != "n2" {
		t.Fatalf("endpoint identity: %+v", p.Endpoints)
	}
	if len(p.Frontends) != 1 || p.Frontends[0] != (Frontend{Kind: ClusterIP, IP: netip.MustParseAddr("10.96.0.10"), Protocol: ProtoTCP, Port: 80}) {
		t.Fatalf("frontends %v", p.Frontends)
	}
}

// TestFrontendsOfEveryKind: ClusterIPs of both families, NodePort,
// externalIPs and LoadBalancer ingress IPs (but not those with ipMode
// Proxy), and each family's endpoints for each.
func TestFrontendsOfEveryKind(t *testing.T) {
	s := svc("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalIPs = []string{"192.0.2.1"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {IP: "198.51.100.2", IPMode: ptr(corev1.LoadBalancerIPModeProxy)}, {Hostname: "lb.example"}}
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	})
	ports, warn := Translate(s, []*discoveryv1.EndpointSlice{
		slice("v4", "lb", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080}, ep{ip: "10.244.1.2", node: "n1"}),
		slice("v6", "lb", discoveryv1.AddressTypeIPv6, map[string]int32{"http": 8080}, ep{ip: "fd00:10:244:1::2", node: "n1"}),
	})
	if len(warn) != 0 || len(ports) != 1 {
		t.Fatalf("ports %v, warnings %v", ports, warn)
	}
	p := ports[0]
	var kinds []string
	for _, f := range p.Frontends {
		kinds = append(kinds, f.String())
	}
	want := "TCP 10.96.0.10:80 (ClusterIP),TCP fd00:96::10:80 (ClusterIP),TCP <node>:30080 (NodePort),TCP 192.0.2.1:80 (ExternalIP),TCP 198.51.100.1:80 (LoadBalancerIP)"
	if got := strings.Join(kinds, ","); got != want {
		t.Fatalf("frontends\n got %s\nwant %s", got, want)
	}
	if p.Affinity != DefaultAffinityTimeout {
		t.Fatalf("affinity %v", p.Affinity)
	}
	eps, d := p.Select(p.Frontends[1], "n1", false)
	if d != Balance || addrs(eps) != "[fd00:10:244:1::2]:8080" {
		t.Fatalf("IPv6 ClusterIP: %v %s", d, addrs(eps))
	}
	eps, d = p.Select(p.Frontends[2], "n1", true)
	if d != Balance || addrs(eps) != "[fd00:10:244:1::2]:8080" {
		t.Fatalf("IPv6 NodePort: %v %s", d, addrs(eps))
	}
	eps, d = p.Select(p.Frontends[2], "n1", false)
	if d != Balance || addrs(eps) != "10.244.1.2:8080" {
		t.Fatalf("IPv4 NodePort: %v %s", d, addrs(eps))
	}
}

// TestSelectFollowsKubeProxy: ready endpoints; serving terminating ones
// when none is ready; reject with none; internalTrafficPolicy Local keeps
// the node's own (drop when there are only others), and does not apply
// to external frontends (externalTrafficPolicy Local neither, for pods).
func TestSelectFollowsKubeProxy(t *testing.T) {
	yes, no := ptr(true), ptr(false)
	s := svc("web", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	for _, tc := range []struct {
		name      string
		eps       []ep
		node      string
		internal  string
		iDecision Decision
		external  string
	}{
		{"ready on both nodes", []ep{{ip: "10.0.0.1", node: "n1"}, {ip: "10.0.0.2", node: "n2"}}, "n1", "10.0.0.1:8080", Balance, "10.0.0.1:8080 10.0.0.2:8080"},
		{"not ready left out", []ep{{ip: "10.0.0.1", node: "n1", ready: no, serving: no}, {ip: "10.0.0.2", node: "n1"}}, "n1", "10.0.0.2:8080", Balance, "10.0.0.2:8080"},
		{"only terminating serving", []ep{{ip: "10.0.0.1", node: "n1", ready: no, serving: yes, termin: yes}, {ip: "10.0.0.2", node: "n1", ready: no, serving: no, termin: yes}}, "n1", "10.0.0.1:8080", Balance, "10.0.0.1:8080"},
		{"terminating ignored while others ready", []ep{{ip: "10.0.0.1", node: "n1", ready: no, serving: yes, termin: yes}, {ip: "10.0.0.2", node: "n2"}}, "n1", "10.0.0.1:8080", Balance, "10.0.0.2:8080"},
		{"only elsewhere", []ep{{ip: "10.0.0.2", node: "n2"}}, "n1", "", Drop, "10.0.0.2:8080"},
		{"none", nil, "n1", "", Reject, ""},
		{"none usable", []ep{{ip: "10.0.0.1", node: "n1", ready: no, serving: no}}, "n1", "", Reject, ""},
	} {
		ports, _ := Translate(s, []*discoveryv1.EndpointSlice{slice("s", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080}, tc.eps...)})
		p := ports[0]
		eps, d := p.Select(p.Frontends[0], tc.node, false)
		if d != tc.iDecision || addrs(eps) != tc.internal {
			t.Errorf("%s: ClusterIP: %v %q, want %v %q", tc.name, d, addrs(eps), tc.iDecision, tc.internal)
		}
		eps, d = p.Select(p.Frontends[1], tc.node, false)
		wantD := Balance
		if tc.external == "" {
			wantD = Reject
		}
		if d != wantD || addrs(eps) != tc.external {
			t.Errorf("%s: NodePort: %v %q, want %v %q", tc.name, d, addrs(eps), wantD, tc.external)
		}
	}
}

// TestNoFrontends: ExternalName, headless and another proxy's Services.
func TestNoFrontends(t *testing.T) {
	for name, mut := range map[string]func(*corev1.Service){
		"external name": func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName },
		"headless":      func(s *corev1.Service) { s.Spec.ClusterIP = "None"; s.Spec.ClusterIPs = []string{"None"} },
		"other proxy":   func(s *corev1.Service) { s.Labels = map[string]string{ProxyNameLabel: "other"} },
	} {
		if ports, _ := Translate(svc("x", mut), nil); len(ports) != 0 {
			t.Errorf("%s: %d ports", name, len(ports))
		}
	}
}

// TestBadInputIsLeftOutWithWarnings: what does not parse is left out,
// the rest works.
func TestBadInputIsLeftOutWithWarnings(t *testing.T) {
	s := svc("web", func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"not-an-ip"}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "icmp", Protocol: "ICMP", Port: 1},
			corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 81})
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
	})
	bad := slice("s", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080}, ep{ip: "10.0.0.1"}, ep{ip: "fd00::1"}, ep{ip: "bogus"})
	ports, warn := Translate(s, []*discoveryv1.EndpointSlice{bad})
	if len(ports) != 1 || addrs(ports[0].Endpoints) != "10.0.0.1:8080" || ports[0].Affinity != time.Minute {
		t.Fatalf("ports %+v", ports)
	}
	if len(warn) != 5 {
		t.Fatalf("warnings: %q", warn)
	}
}
