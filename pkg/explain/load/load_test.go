package load

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/tierflow/tierflow/pkg/model"
)

const manifests = `
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: web, labels: {app: web}}
  spec:
    nodeName: n1
    containers:
    - name: c
      ports:
      - {name: http, containerPort: 8080}
      - {name: dns, containerPort: 53, protocol: UDP}
      - {containerPort: 9090}
  status: {podIP: 10.0.0.1}
- apiVersion: v1
  kind: Pod
  metadata: {name: host, namespace: kube-system}
  spec: {nodeName: n1, hostNetwork: true, containers: [{name: c}]}
  status: {podIP: 192.168.0.1}
- apiVersion: v1
  kind: Service
  metadata: {name: web}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
---
{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod", "labels": {"env": "prod"}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: ingress-only}
spec:
  podSelector: {}
  ingress:
  - ports: [{port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: with-egress, namespace: prod}
spec:
  podSelector: {}
  egress:
  - ports: [{port: 53, protocol: UDP}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: anp}
spec:
  priority: 1
  subject: {namespaces: {}}
  egress:
  - action: Deny
    to: [{networks: ["10.0.0.0/8"]}]
    ports:
    - portNumber: {port: 80}
    - portRange: {start: 1, end: 2}
---
`

func read(t *testing.T, text string) *Objects {
	t.Helper()
	o := &Objects{}
	if err := o.Read(strings.NewReader(text), "test.yaml"); err != nil {
		t.Fatal(err)
	}
	o.Complete()
	return o
}

func TestReadAndDefault(t *testing.T) {
	o := read(t, manifests)
	if len(o.Pods) != 2 || len(o.NetworkPolicies) != 2 || len(o.AdminNetworkPolicies) != 1 {
		t.Fatalf("read %d pods, %d NetworkPolicies, %d AdminNetworkPolicies", len(o.Pods), len(o.NetworkPolicies), len(o.AdminNetworkPolicies))
	}
	if len(o.Services) != 1 || o.Services[0].Namespace != "default" || o.Services[0].Spec.Type != "ClusterIP" {
		t.Errorf("services = %v", o.Services)
	}
	if !reflect.DeepEqual(o.Ignored, []string{"apps/v1/Deployment web"}) {
		t.Errorf("ignored = %v", o.Ignored)
	}
	// Namespaces: declared prod keeps its labels and gains its name; default
	// and kube-system are implied by the objects in them.
	labels := map[string]map[string]string{}
	for _, ns := range o.Namespaces {
		labels[ns.Name] = ns.Labels
	}
	want := map[string]map[string]string{
		"default":     {corev1.LabelMetadataName: "default"},
		"kube-system": {corev1.LabelMetadataName: "kube-system"},
		"prod":        {corev1.LabelMetadataName: "prod", "env": "prod"},
	}
	if !reflect.DeepEqual(labels, want) {
		t.Errorf("namespaces = %v, want %v", labels, want)
	}
	web := o.Pods[0]
	if web.Namespace != "default" || web.Name != "web" || len(web.Status.PodIPs) != 1 || web.Status.PodIPs[0].IP != "10.0.0.1" {
		t.Errorf("pod web: %s/%s %v", web.Namespace, web.Name, web.Status.PodIPs)
	}
	in, eg := o.NetworkPolicies[0], o.NetworkPolicies[1]
	if in.Namespace != "default" || !reflect.DeepEqual(in.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("ingress-only: %s %v", in.Namespace, in.Spec.PolicyTypes)
	}
	if *in.Spec.Ingress[0].Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("port protocol not defaulted to TCP")
	}
	if !reflect.DeepEqual(eg.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("with-egress: %v", eg.Spec.PolicyTypes)
	}
	ports := *o.AdminNetworkPolicies[0].Spec.Egress[0].Ports
	if ports[0].PortNumber.Protocol != corev1.ProtocolTCP || ports[1].PortRange.Protocol != corev1.ProtocolTCP {
		t.Errorf("AdminNetworkPolicy ports not defaulted: %+v %+v", ports[0].PortNumber, ports[1].PortRange)
	}
}

func TestBuild(t *testing.T) {
	b, err := Build(read(t, manifests))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Snapshot.Policies) != 3 {
		t.Errorf("%d policies computed, want 3", len(b.Snapshot.Policies))
	}
	web := b.Inventory.Pod(model.PodRef{Namespace: "default", Name: "web"})
	if web == nil || web.Node != "n1" || len(web.Ports) != 2 {
		t.Fatalf("inventory web = %+v", web)
	}
	if b.Inventory.Pod(model.PodRef{Namespace: "kube-system", Name: "host"}) != nil {
		t.Error("host-network pod in the inventory")
	}
	if !strings.Contains(b.Excluded[model.PodRef{Namespace: "kube-system", Name: "host"}], "host network") {
		t.Errorf("excluded = %v", b.Excluded)
	}
}

func TestReadErrors(t *testing.T) {
	cases := map[string]string{
		"unknown field": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeNam: x}\n",
		"wrong version": "apiVersion: networking.k8s.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: p}\n",
		"no kind":       "apiVersion: v1\nmetadata: {name: p}\n",
		"no name":       "apiVersion: v1\nkind: Namespace\nmetadata: {}\n",
		"duplicate":     "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\n",
		"bad yaml":      "apiVersion: v1\nkind: [Pod\n",
		"bad list item": "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec: {containers: 3}\n",
		"duplicate key": "apiVersion: v1\nkind: Namespace\nkind: Namespace\nmetadata: {name: a}\n",
	}
	for name, text := range cases {
		o := &Objects{}
		err := o.Read(strings.NewReader(text), "bad.yaml")
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("%s: error %q should be one line naming the file", name, err)
		}
	}
}

func TestBadPodIPIsAnError(t *testing.T) {
	o := read(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: node1}\nstatus: {podIP: 10.0.0.300}\n")
	if _, err := Build(o); err == nil {
		t.Error("a pod IP that does not parse was accepted")
	}
}
