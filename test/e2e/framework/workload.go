package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
)

// ServedPorts are the ports every workload pod serves (agnhost answers on
// each declared containerPort), named serve-PORT-PROTO as in the upstream
// network policy e2e tests, so named-port policies can refer to them.
var ServedPorts = []explain.PortSpec{
	{Protocol: model.ProtocolTCP, Port: 80}, {Protocol: model.ProtocolTCP, Port: 81},
	{Protocol: model.ProtocolUDP, Port: 80}, {Protocol: model.ProtocolUDP, Port: 81},
}

// PortName is the containerPort name of a served port.
func PortName(p explain.PortSpec) string {
	return fmt.Sprintf("serve-%d-%s", p.Port, strings.ToLower(string(p.Protocol)))
}

// Workload is a namespace and its pods, each pinned to a node.
type Workload struct {
	Namespace string
	Labels    map[string]string
	// Pods maps a pod name to its node.
	Pods map[string]string
	// PodLabels maps a pod name to its labels (besides pod=NAME).
	PodLabels map[string]map[string]string
}

// Deploy creates the namespaces and pods and waits until every pod runs.
func (tf *Tierflow) Deploy(workloads ...Workload) ([]Pod, error) {
	ctx := context.Background()
	kube := tf.Bed.Cluster.Kube
	var namespaces []string
	want := 0
	for _, w := range workloads {
		namespaces = append(namespaces, w.Namespace)
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace, Labels: w.Labels}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		for name, node := range w.Pods {
			labels := map[string]string{"pod": name}
			for k, v := range w.PodLabels[name] {
				labels[k] = v
			}
			var ports []corev1.ContainerPort
			for _, p := range ServedPorts {
				ports = append(ports, corev1.ContainerPort{Name: PortName(p), ContainerPort: p.Port, Protocol: corev1.Protocol(p.Protocol)})
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace, Labels: labels},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
					Name: "main", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Command: []string{"/agnhost", "pause"}, Ports: ports,
				}}},
			}
			if _, err := kube.CoreV1().Pods(w.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
			want++
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := tf.Pods(namespaces...)
		if err == nil && len(pods) == want {
			return pods, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d pods not running after 3 minutes: %v", want, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// ExposePods gives every pod a Service of its own (named svc-POD in its
// namespace, selecting pod=NAME) with the served ports, each targeting the
// pod's named containerPort (so the proxy resolves the name per
// endpoint), and returns the pods with their Service's ClusterIP in
// ServiceIP. It waits until every Service answers from another pod.
func (tf *Tierflow) ExposePods(pods []Pod) ([]Pod, error) {
	ctx := context.Background()
	kube := tf.Bed.Cluster.Kube
	out := append([]Pod(nil), pods...)
	for i, p := range out {
		var ports []corev1.ServicePort
		for _, sp := range ServedPorts {
			ports = append(ports, corev1.ServicePort{Name: strings.ToLower(string(sp.Protocol)) + fmt.Sprint("-", sp.Port), Protocol: corev1.Protocol(sp.Protocol),
				Port: sp.Port, TargetPort: intstr.FromString(PortName(sp))})
		}
		svc, err := kube.CoreV1().Services(p.Namespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-" + p.Name},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"pod": p.Name}, Ports: ports}}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		out[i].ServiceIP = svc.Spec.ClusterIP
	}
	// Every Service answers (its slice is written and every agent
	// installed it): probe each from another pod.
	deadline := time.Now().Add(2 * time.Minute)
	for i, p := range out {
		src := out[(i+1)%len(out)]
		for {
			o := tf.probe(src, p.ViaService(), ServedPorts[0], ProbeNetns, ProbeTimeout)
			if o.Verdict == explain.VerdictAllow {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("Service of %s (%s) does not answer from %s: %s%s", p, p.ServiceIP, src, o.Verdict, o.Err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return out, nil
}

// ViaService is the pod as a destination through its Service: its address
// is the Service's ClusterIP (ExposePods).
func (p Pod) ViaService() Pod {
	p.IP = p.ServiceIP
	return p
}

// ViaServices maps ViaService over pods.
func ViaServices(pods []Pod) []Pod {
	out := make([]Pod, len(pods))
	for i, p := range pods {
		out[i] = p.ViaService()
	}
	return out
}
