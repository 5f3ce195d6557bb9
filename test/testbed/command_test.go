package testbed_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/pkg/cni"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

// TestCommandUpDown runs what `make testbed-up` and `make testbed-down` run:
// the test bed comes up in the background, runs a pod, and `down` leaves no
// namespace, interface or process behind.
func TestCommandUpDown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tierflow-testbed")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/tierflow/tierflow/test/testbed/cmd/tierflow-testbed").CombinedOutput(); err != nil {
		t.Fatalf("build tierflow-testbed: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "bed")
	down := func() (string, error) {
		out, err := exec.Command(bin, "down", "--dir", dir).CombinedOutput()
		return string(out), err
	}
	up := exec.Command(bin, "up", "--dir", dir, "--nodes", "2", "--normal-flows")
	out, err := up.CombinedOutput()
	if err != nil {
		_, _ = down()
		t.Fatalf("tierflow-testbed up: %v\n%s", err, out)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_, _ = down()
		}
	})

	var st struct {
		Kubeconfig string
		Fabric     string `json:"fabricBridge"`
		Nodes      []struct{ Bridge string }
	}
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: agnhostImage, Args: []string{"serve-hostname", "--tcp", "--http=false", "--port=80"}}}},
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	waitFor(t, 90*time.Second, "pod p Running", func() bool {
		p, err := kube.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			running = p
			return true
		}
		return false
	})
	netns := noderuntime.NetnsName(running.UID)
	veth := cni.HostVethName(string(running.UID), "eth0")
	if _, err := os.Stat("/var/run/netns/" + netns); err != nil {
		t.Fatalf("pod namespace: %v", err)
	}

	out2, err := down()
	stopped = true
	if err != nil || !strings.Contains(out2, "no namespace, interface or process left") {
		t.Fatalf("tierflow-testbed down: %v\n%s", err, out2)
	}
	links := []string{veth, st.Fabric}
	for _, n := range st.Nodes {
		links = append(links, n.Bridge)
	}
	assertNothingLeft(t, dir, []string{netns}, links)
}
