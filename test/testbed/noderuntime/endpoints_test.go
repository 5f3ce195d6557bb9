package noderuntime

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const image = "registry.k8s.io/e2e-test-images/agnhost:2.53"

func pod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n"}, Spec: corev1.PodSpec{Containers: containers}}
}

func TestPodEndpoints(t *testing.T) {
	eps, warnings, err := PodEndpoints(pod(
		corev1.Container{Name: "a", Image: image, Command: []string{"/agnhost", "serve-hostname"}, Args: []string{"--tcp", "--http=false", "--port", "80"},
			Ports: []corev1.ContainerPort{{ContainerPort: 80}}},
		corev1.Container{Name: "b", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 9003, Protocol: corev1.ProtocolSCTP}}},
		corev1.Container{Name: "c", Image: image, Command: []string{"/bin/bash", "-c", "/agnhost porter"},
			Env: []corev1.EnvVar{{Name: "SERVE_SCTP_PORT_9005", Value: "x"}, {Name: "SERVE_PORT_81", ValueFrom: &corev1.EnvVarSource{}}}},
	))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ep := range eps {
		got = append(got, ep.String()+"="+ep.Body)
	}
	want := "tcp/80(raw-tcp)=p tcp/8080(raw-tcp)=p udp/53(udp)=p"
	if strings.Join(got, " ") != want {
		t.Errorf("endpoints %v, want %s", got, want)
	}
	if len(warnings) != 3 {
		t.Errorf("warnings %q: want SCTP port, SCTP porter env, valueFrom env", warnings)
	}

	_, _, err = PodEndpoints(pod(
		corev1.Container{Name: "a", Image: image, Args: []string{"serve-hostname", "--udp", "--http=false", "--port", "53"}},
		corev1.Container{Name: "b", Image: image, Args: []string{"porter"}, Env: []corev1.EnvVar{{Name: "SERVE_UDP_PORT_53", Value: "x"}}},
	))
	if err == nil || !strings.Contains(err.Error(), "udp/53") {
		t.Errorf("two containers on udp/53: %v", err)
	}
	if _, _, err := PodEndpoints(pod(corev1.Container{Name: "a", Image: image, Args: []string{"serve-hostname", "--tcp", "--port=0", "--http=false"}})); err == nil {
		t.Error("port 0 accepted")
	}
	if h := PodHostname(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.PodSpec{Hostname: "h"}}); h != "h" {
		t.Errorf("hostname %q", h)
	}
}
