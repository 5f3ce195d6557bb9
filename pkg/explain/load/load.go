package load

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"
	"sigs.k8s.io/yaml"
)

// Objects are the API objects read from manifests, defaulted the way the
// API server would have defaulted them.
type Objects struct {
	Namespaces                   []*corev1.Namespace
	Pods                         []*corev1.Pod
	Nodes                        []*corev1.Node
	NetworkPolicies              []*networkingv1.NetworkPolicy
	AdminNetworkPolicies         []*v1alpha1.AdminNetworkPolicy
	BaselineAdminNetworkPolicies []*v1alpha1.BaselineAdminNetworkPolicy
	ClusterNetworkPolicies       []*v1alpha2.ClusterNetworkPolicy
	// Services and EndpointSlices: connections addressed to a Service are
	// explained for each endpoint (pkg/services).
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	// Ignored names the objects of other kinds (Deployments, ...)
	// as "apiVersion/Kind namespace/name", so a caller can mention them.
	Ignored []string

	seen map[string]string // object key → where it was first declared
}

// The apiVersion each kind must have.
var kindVersions = map[string]string{
	"Namespace":                  "v1",
	"Pod":                        "v1",
	"Node":                       "v1",
	"NetworkPolicy":              "networking.k8s.io/v1",
	"AdminNetworkPolicy":         "policy.networking.k8s.io/v1alpha1",
	"BaselineAdminNetworkPolicy": "policy.networking.k8s.io/v1alpha1",
	"ClusterNetworkPolicy":       "policy.networking.k8s.io/v1alpha2",
	"Service":                    "v1",
	"EndpointSlice":              "discovery.k8s.io/v1",
}

// Files reads every file and completes the result (see Objects.Complete).
// "-" reads standard input.
func Files(paths ...string) (*Objects, error) {
	objs := &Objects{}
	for _, path := range paths {
		var r io.Reader
		if path == "-" {
			r = os.Stdin
		} else {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			r = f
		}
		if err := objs.Read(r, path); err != nil {
			return nil, err
		}
	}
	objs.Complete()
	return objs, nil
}

// Read adds the objects of one multi-document YAML (or JSON) stream. source
// names the stream in errors.
func (o *Objects) Read(r io.Reader, source string) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for doc := 1; ; doc++ {
		data, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
		js, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			return fmt.Errorf("%s: document %d: %s", source, doc, oneLine(err.Error()))
		}
		if err := o.add(js, fmt.Sprintf("%s: document %d", source, doc)); err != nil {
			return err
		}
	}
}

// oneLine joins a multi-line parser message, so that a caller can print
// the error as one line.
func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
}

func (o *Objects) add(js []byte, where string) error {
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return nil // an empty document, e.g. after a trailing "---"
	}
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return fmt.Errorf("%s: not an object: %w", where, err)
	}
	if tm.Kind == "" {
		return fmt.Errorf("%s: no kind", where)
	}
	if tm.Kind == "List" || (strings.HasSuffix(tm.Kind, "List") && kindVersions[strings.TrimSuffix(tm.Kind, "List")] != "") {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(js, &list); err != nil {
			return fmt.Errorf("%s: %s: %w", where, tm.Kind, err)
		}
		for i, item := range list.Items {
			if err := o.add(item, fmt.Sprintf("%s: items[%d]", where, i)); err != nil {
				return err
			}
		}
		return nil
	}
	want, known := kindVersions[tm.Kind]
	if !known {
		o.Ignored = append(o.Ignored, fmt.Sprintf("%s/%s %s", tm.APIVersion, tm.Kind, joinName(tm.Metadata.Namespace, tm.Metadata.Name)))
		return nil
	}
	if tm.APIVersion != want {
		return fmt.Errorf("%s: %s %q has apiVersion %q; tierflow reads %s from %s", where, tm.Kind, tm.Metadata.Name, tm.APIVersion, tm.Kind, want)
	}
	if tm.Metadata.Name == "" {
		return fmt.Errorf("%s: %s without metadata.name", where, tm.Kind)
	}
	var err error
	switch tm.Kind {
	case "Namespace":
		var x corev1.Namespace
		if err = decodeStrict(js, &x); err == nil {
			o.Namespaces = append(o.Namespaces, &x)
		}
	case "Pod":
		var x corev1.Pod
		if err = decodeStrict(js, &x); err == nil {
			o.Pods = append(o.Pods, &x)
		}
	case "Node":
		var x corev1.Node
		if err = decodeStrict(js, &x); err == nil {
			o.Nodes = append(o.Nodes, &x)
		}
	case "NetworkPolicy":
		var x networkingv1.NetworkPolicy
		if err = decodeStrict(js, &x); err == nil {
			o.NetworkPolicies = append(o.NetworkPolicies, &x)
		}
	case "AdminNetworkPolicy":
		var x v1alpha1.AdminNetworkPolicy
		if err = decodeStrict(js, &x); err == nil {
			o.AdminNetworkPolicies = append(o.AdminNetworkPolicies, &x)
		}
	case "BaselineAdminNetworkPolicy":
		var x v1alpha1.BaselineAdminNetworkPolicy
		if err = decodeStrict(js, &x); err == nil {
			o.BaselineAdminNetworkPolicies = append(o.BaselineAdminNetworkPolicies, &x)
		}
	case "ClusterNetworkPolicy":
		var x v1alpha2.ClusterNetworkPolicy
		if err = decodeStrict(js, &x); err == nil {
			o.ClusterNetworkPolicies = append(o.ClusterNetworkPolicies, &x)
		}
	case "Service":
		var x corev1.Service
		if err = decodeStrict(js, &x); err == nil {
			o.Services = append(o.Services, &x)
		}
	case "EndpointSlice":
		var x discoveryv1.EndpointSlice
		if err = decodeStrict(js, &x); err == nil {
			o.EndpointSlices = append(o.EndpointSlices, &x)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %s %q: %w", where, tm.Kind, tm.Metadata.Name, err)
	}
	return o.noteSeen(tm, where)
}

// noteSeen refuses a second object of the same kind and name: which of the
// two a cluster would hold depends on the order they were applied in.
func (o *Objects) noteSeen(tm typeMeta, where string) error {
	ns := tm.Metadata.Namespace
	if ns == "" && namespaced(tm.Kind) {
		ns = corev1.NamespaceDefault
	}
	key := tm.Kind + " " + joinName(ns, tm.Metadata.Name)
	if o.seen == nil {
		o.seen = map[string]string{}
	}
	if first, dup := o.seen[key]; dup {
		return fmt.Errorf("%s: %s is declared twice (first at %s)", where, key, first)
	}
	o.seen[key] = where
	return nil
}

func namespaced(kind string) bool {
	return kind == "Pod" || kind == "NetworkPolicy" || kind == "Service" || kind == "EndpointSlice"
}

func joinName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// decodeStrict rejects unknown fields: a misspelt field in a policy would
// otherwise be dropped silently and change what the policy means.
func decodeStrict(js []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// Complete applies the API server's defaults and adds the namespaces the
// objects use but the manifests do not declare:
//   - namespaced objects without a namespace are in "default";
//   - every namespace has the label kubernetes.io/metadata.name=NAME, which
//     the API server always sets;
//   - a namespace referenced by a pod or a NetworkPolicy but not declared is
//     taken to exist, with that label only;
//   - a NetworkPolicy without policyTypes gets Ingress, plus Egress when it
//     has egress rules; a port without protocol is TCP (NetworkPolicy and
//     the AdminNetworkPolicy/BaselineAdminNetworkPolicy portNumber and
//     portRange);
//   - a pod with status.podIP but no status.podIPs gets podIPs [podIP].
//
// Objects are then sorted by namespace and name, so results do not depend
// on the order of the manifests.
func (o *Objects) Complete() {
	declared := map[string]bool{}
	for _, ns := range o.Namespaces {
		declared[ns.Name] = true
	}
	need := func(ns string) {
		if !declared[ns] {
			declared[ns] = true
			o.Namespaces = append(o.Namespaces, &corev1.Namespace{})
			o.Namespaces[len(o.Namespaces)-1].Name = ns
		}
	}
	for _, p := range o.Pods {
		if p.Namespace == "" {
			p.Namespace = corev1.NamespaceDefault
		}
		need(p.Namespace)
		if len(p.Status.PodIPs) == 0 && p.Status.PodIP != "" {
			p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		}
	}
	for _, np := range o.NetworkPolicies {
		if np.Namespace == "" {
			np.Namespace = corev1.NamespaceDefault
		}
		need(np.Namespace)
		defaultNetworkPolicy(np)
	}
	for _, svc := range o.Services {
		if svc.Namespace == "" {
			svc.Namespace = corev1.NamespaceDefault
		}
		defaultService(svc)
	}
	for _, sl := range o.EndpointSlices {
		if sl.Namespace == "" {
			sl.Namespace = corev1.NamespaceDefault
		}
	}
	for _, ns := range o.Namespaces {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	for _, anp := range o.AdminNetworkPolicies {
		for i := range anp.Spec.Ingress {
			defaultANPPorts(anp.Spec.Ingress[i].Ports)
		}
		for i := range anp.Spec.Egress {
			defaultANPPorts(anp.Spec.Egress[i].Ports)
		}
	}
	for _, banp := range o.BaselineAdminNetworkPolicies {
		for i := range banp.Spec.Ingress {
			defaultANPPorts(banp.Spec.Ingress[i].Ports)
		}
		for i := range banp.Spec.Egress {
			defaultANPPorts(banp.Spec.Egress[i].Ports)
		}
	}
	sortByName(o.Namespaces, func(x *corev1.Namespace) string { return x.Name })
	sortByName(o.Pods, func(x *corev1.Pod) string { return x.Namespace + "/" + x.Name })
	sortByName(o.Nodes, func(x *corev1.Node) string { return x.Name })
	sortByName(o.NetworkPolicies, func(x *networkingv1.NetworkPolicy) string { return x.Namespace + "/" + x.Name })
	sortByName(o.AdminNetworkPolicies, func(x *v1alpha1.AdminNetworkPolicy) string { return x.Name })
	sortByName(o.BaselineAdminNetworkPolicies, func(x *v1alpha1.BaselineAdminNetworkPolicy) string { return x.Name })
	sortByName(o.ClusterNetworkPolicies, func(x *v1alpha2.ClusterNetworkPolicy) string { return x.Name })
	sortByName(o.Services, func(x *corev1.Service) string { return x.Namespace + "/" + x.Name })
	sortByName(o.EndpointSlices, func(x *discoveryv1.EndpointSlice) string { return x.Namespace + "/" + x.Name })
}

// defaultService applies the API server's defaults a Service's meaning
// depends on: type ClusterIP, port protocol TCP, clusterIPs from
// clusterIP.
func defaultService(svc *corev1.Service) {
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Protocol == "" {
			svc.Spec.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	if len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
}

func sortByName[T any](xs []T, key func(T) string) {
	sort.SliceStable(xs, func(i, j int) bool { return key(xs[i]) < key(xs[j]) })
}

func defaultNetworkPolicy(np *networkingv1.NetworkPolicy) {
	if len(np.Spec.PolicyTypes) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	tcp := corev1.ProtocolTCP
	for i := range np.Spec.Ingress {
		for j := range np.Spec.Ingress[i].Ports {
			if np.Spec.Ingress[i].Ports[j].Protocol == nil {
				np.Spec.Ingress[i].Ports[j].Protocol = &tcp
			}
		}
	}
	for i := range np.Spec.Egress {
		for j := range np.Spec.Egress[i].Ports {
			if np.Spec.Egress[i].Ports[j].Protocol == nil {
				np.Spec.Egress[i].Ports[j].Protocol = &tcp
			}
		}
	}
}

func defaultANPPorts(ports *[]v1alpha1.AdminNetworkPolicyPort) {
	if ports == nil {
		return
	}
	for i := range *ports {
		p := &(*ports)[i]
		if p.PortNumber != nil && p.PortNumber.Protocol == "" {
			p.PortNumber.Protocol = corev1.ProtocolTCP
		}
		if p.PortRange != nil && p.PortRange.Protocol == "" {
			p.PortRange.Protocol = corev1.ProtocolTCP
		}
	}
}
