package noderuntime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// ExecGVR is kwok's Exec resource.
var ExecGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}

// Environment variables the Exec object gives every `kubectl exec` command.
const (
	EnvNetns = "TIERFLOW_NETNS" // the pod's network namespace name
	EnvPod   = "TIERFLOW_POD"   // NAMESPACE/NAME
	// EnvHostname is the pod's hostname (exec'd commands share the node's
	// UTS namespace, so HOSTNAME is set explicitly).
	EnvHostname = "HOSTNAME"
)

// NetnsPrefix starts every namespace a runtime creates.
const NetnsPrefix = "tfpod-"

// NetnsName is the network namespace of the pod with this UID.
func NetnsName(uid types.UID) string { return NetnsPrefix + string(uid) }

// Config configures the runtime of one node.
type Config struct {
	NodeName string
	// NodeIPs are the node's addresses, reported as hostIP(s).
	NodeIPs []string
	// NodeNetns is the node's own network namespace (ip netns name) when
	// it has one (the encap test bed: every node its own host stack and
	// OVS): tierflow-cni and hostNetwork pods run there. Empty: the
	// runtime's own namespace, which every node of the bed shares.
	NodeNetns string
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	// CNIBinDir holds tierflow-cni and host-local (CNI_PATH).
	CNIBinDir string
	// CNIConfig is the network configuration passed to tierflow-cni.
	CNIConfig []byte
	// PodRunner is the tierflow-podrunner binary.
	PodRunner string
	// StateDir keeps per-pod files (pod spec, server log, attachment).
	StateDir string
	Logger   *log.Logger
	// ClusterDNS is the cluster DNS Service's address, written into each
	// pod's resolv.conf (as a kubelet's clusterDNS); empty: none.
	ClusterDNS string
	// Kubeconfig is passed to the pods' servers (the DNS stand-in reads
	// Services).
	Kubeconfig string
}

// Runtime attaches the pods of one node.
type Runtime struct {
	cfg    Config
	queue  workqueue.TypedRateLimitingInterface[string]
	lister cache.Indexer

	mu   sync.Mutex
	pods map[string]*attachment // by NAMESPACE/NAME
}

// attachment is a pod this runtime attached.
type attachment struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Netns     string    `json:"netns"`
	IPs       []string  `json:"ips"`
	// Result is tierflow-cni's ADD result, for CHECK and debugging.
	Result json.RawMessage `json:"result,omitempty"`

	server   *exec.Cmd
	done     chan struct{}
	stopping atomic.Bool
}

// serverExited reports whether the pod's servers exited without being
// stopped.
func (a *attachment) serverExited() bool {
	if a.done == nil || a.stopping.Load() {
		return false
	}
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// New returns a runtime; Run starts it.
func New(cfg Config) (*Runtime, error) {
	if cfg.NodeName == "" || cfg.Kube == nil || cfg.Dynamic == nil || cfg.CNIBinDir == "" || len(cfg.CNIConfig) == 0 || cfg.PodRunner == "" || cfg.StateDir == "" {
		return nil, errors.New("noderuntime: NodeName, Kube, Dynamic, CNIBinDir, CNIConfig, PodRunner and StateDir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = log.New(os.Stderr, "noderuntime["+cfg.NodeName+"] ", log.LstdFlags)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	return &Runtime{
		cfg:   cfg,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		pods:  map[string]*attachment{},
	}, nil
}

// Run attaches the node's pods until ctx is done, then tears all of them
// down.
func (r *Runtime) Run(ctx context.Context) error {
	r.recoverStale()
	factory := informers.NewSharedInformerFactoryWithOptions(r.cfg.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", r.cfg.NodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	r.lister = inf.GetIndexer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		r.teardownAll()
		return ctx.Err()
	}
	r.cfg.Logger.Printf("running for node %s", r.cfg.NodeName)

	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	factory.Shutdown()
	r.teardownAll()
	return nil
}

func (r *Runtime) processNext(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if err := r.sync(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		r.cfg.Logger.Printf("pod %s: %v (retrying)", key, err)
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// sync brings one pod's attachment in line with the API object.
func (r *Runtime) sync(ctx context.Context, key string) error {
	obj, exists, err := r.lister.GetByKey(key)
	if err != nil {
		return err
	}
	r.mu.Lock()
	att := r.pods[key]
	r.mu.Unlock()

	if !exists {
		if att != nil {
			return r.teardown(ctx, key, att)
		}
		return nil
	}
	pod := obj.(*corev1.Pod)
	if att != nil && att.UID != pod.UID {
		// Same name, new pod (e.g. a StatefulSet replacement).
		if err := r.teardown(ctx, key, att); err != nil {
			return err
		}
		att = nil
	}
	if pod.DeletionTimestamp != nil {
		if att != nil {
			if err := r.teardown(ctx, key, att); err != nil {
				return err
			}
		}
		err := r.cfg.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	}
	if att != nil && att.serverExited() {
		r.cfg.Logger.Printf("pod %s: servers exited (log: %s); restarting them", key, tailFile(filepath.Join(r.cfg.StateDir, string(att.UID)+".log"), 3))
		if err := r.startServers(pod, att, key); err != nil {
			return err
		}
	}
	if att == nil {
		if pod.Spec.HostNetwork {
			att = &attachment{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, IPs: r.cfg.NodeIPs}
			if err := r.startServers(pod, att, key); err != nil {
				r.event(ctx, pod, "FailedStart", err.Error())
				return err
			}
			if err := r.createExec(ctx, pod, att); err != nil {
				r.stopServers(att)
				return err
			}
		} else {
			att, err = r.attach(ctx, pod)
			if err != nil {
				r.event(ctx, pod, "FailedCreatePodSandBox", err.Error())
				return err
			}
		}
		r.mu.Lock()
		r.pods[key] = att
		r.mu.Unlock()
	}
	return r.reportRunning(ctx, pod, att)
}

// attach creates the pod's namespace, attaches it with tierflow-cni, starts
// its servers and creates its Exec object; on failure it undoes what it did.
func (r *Runtime) attach(ctx context.Context, pod *corev1.Pod) (att *attachment, retErr error) {
	att = &attachment{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Netns: NetnsName(pod.UID)}
	defer func() {
		if retErr != nil {
			r.undo(ctx, att)
		}
	}()
	if err := r.saveRecord(att); err != nil {
		return nil, err
	}
	_ = run("ip", "netns", "del", att.Netns) // left by a crashed runtime
	if err := run("ip", "netns", "add", att.Netns); err != nil {
		return nil, err
	}
	if err := run("ip", "netns", "exec", att.Netns, "ip", "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	if err := r.writeResolvConf(pod, att); err != nil {
		return nil, err
	}
	out, err := r.cni("ADD", att)
	if err != nil {
		return nil, err
	}
	res := &current.Result{}
	if err := json.Unmarshal(out, res); err != nil {
		return nil, fmt.Errorf("decode tierflow-cni result: %w", err)
	}
	att.Result = out
	for _, ipc := range res.IPs {
		att.IPs = append(att.IPs, ipc.Address.IP.String())
	}
	if len(att.IPs) == 0 {
		return nil, errors.New("tierflow-cni returned no addresses")
	}
	if err := r.saveRecord(att); err != nil {
		return nil, err
	}
	if err := r.startServers(pod, att, pod.Namespace+"/"+pod.Name); err != nil {
		return nil, err
	}
	if err := r.createExec(ctx, pod, att); err != nil {
		return nil, err
	}
	r.cfg.Logger.Printf("pod %s/%s: attached in %s with %v", pod.Namespace, pod.Name, att.Netns, att.IPs)
	return att, nil
}

// cni runs tierflow-cni with the CNI protocol; container ID is the pod UID.
func (r *Runtime) cni(command string, att *attachment) ([]byte, error) {
	cmd := r.onNode(filepath.Join(r.cfg.CNIBinDir, "tierflow-cni"))
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command,
		"CNI_CONTAINERID="+string(att.UID),
		"CNI_NETNS=/var/run/netns/"+att.Netns,
		"CNI_IFNAME=eth0",
		"CNI_PATH="+r.cfg.CNIBinDir,
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
			att.Namespace, att.Name, att.UID, att.UID),
	)
	cmd.Stdin = bytes.NewReader(r.cfg.CNIConfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("tierflow-cni %s: %v: %s %s", command, err, strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// startServers runs `tierflow-podrunner serve` inside the namespace and
// waits until it reports that every listener is bound.
func (r *Runtime) startServers(pod *corev1.Pod, att *attachment, key string) error {
	podFile := filepath.Join(r.cfg.StateDir, string(att.UID)+".pod.json")
	data, err := json.Marshal(pod)
	if err != nil {
		return err
	}
	if err := os.WriteFile(podFile, data, 0o644); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(r.cfg.StateDir, string(att.UID)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command("ip", "netns", "exec", att.Netns, r.cfg.PodRunner, "serve", "--pod-file", podFile, "--kubeconfig", r.cfg.Kubeconfig,
		"--host-netns", fmt.Sprintf("/proc/%d/ns/net", os.Getpid()))
	if att.Netns == "" {
		// hostNetwork: the node's namespace (the host's, which every node
		// of the test bed may share; on the encap bed its own, where the
		// API server on the host's loopback is reached through
		// --host-netns too), so the servers bind only this node's
		// addresses.
		cmd = r.onNode(r.cfg.PodRunner, "serve", "--pod-file", podFile, "--listen-ip", strings.Join(r.cfg.NodeIPs, ","), "--kubeconfig", r.cfg.Kubeconfig,
			"--host-netns", fmt.Sprintf("/proc/%d/ns/net", os.Getpid()))
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	// Own process group so teardown signals the whole server; killed if
	// the runtime dies so no server outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	att.server, att.done = cmd, done
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == ReadyLine {
				ready <- nil
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- errors.New("server exited before it was ready")
	}()
	go func() {
		_ = cmd.Wait()
		close(done)
		// A server that dies on its own is restarted by the next sync,
		// as a kubelet restarts a crashed container.
		if !att.stopping.Load() {
			r.queue.Add(key)
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("pod servers: %w (log: %s)", err, tailFile(logFile.Name(), 5))
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("pod servers not ready after 30s (log: %s)", tailFile(logFile.Name(), 5))
	}
}

// onNode is a command in the node's network namespace.
func (r *Runtime) onNode(name string, args ...string) *exec.Cmd {
	if r.cfg.NodeNetns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", r.cfg.NodeNetns, name}, args...)...)
}

// writeResolvConf gives the pod's namespace the resolv.conf a kubelet
// writes for dnsPolicy ClusterFirst (the cluster DNS, the pod's search
// domains, ndots 5): `ip netns exec` — how the pod's servers and `kubectl
// exec` commands run — bind-mounts /etc/netns/NETNS/resolv.conf over
// /etc/resolv.conf, so names resolve through the cluster DNS Service, by
// DNS through the pod's network.
func (r *Runtime) writeResolvConf(pod *corev1.Pod, att *attachment) error {
	if r.cfg.ClusterDNS == "" || (pod.Spec.DNSPolicy != "" && pod.Spec.DNSPolicy != corev1.DNSClusterFirst) {
		return nil
	}
	dir := filepath.Join("/etc/netns", att.Netns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf("nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", r.cfg.ClusterDNS, pod.Namespace)
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644)
}

// ReadyLine is what `tierflow-podrunner serve` prints on stdout once all
// its listeners are bound.
const ReadyLine = "READY"

func (r *Runtime) createExec(ctx context.Context, pod *corev1.Pod, att *attachment) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Exec",
		"metadata": map[string]any{
			"name":      pod.Name,
			"namespace": pod.Namespace,
			"ownerReferences": []any{map[string]any{
				"apiVersion": "v1", "kind": "Pod", "name": pod.Name, "uid": string(pod.UID),
			}},
		},
		"spec": map[string]any{
			"execs": []any{map[string]any{
				"local": map[string]any{
					"envs": execEnv(pod, att, r.cfg.NodeNetns),
				},
			}},
		},
	}}
	execs := r.cfg.Dynamic.Resource(ExecGVR).Namespace(pod.Namespace)
	_, err := execs.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A previous pod of the same name: replace it.
		if err := execs.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replace Exec: %w", err)
		}
		_, err = execs.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create Exec: %w", err)
	}
	return nil
}

// execEnv is the environment of `kubectl exec` commands in the pod;
// hostNetwork pods have no namespace of their own, so commands stay in the
// node's (nodeNetns, or the runtime's own when empty).
func execEnv(pod *corev1.Pod, att *attachment, nodeNetns string) []any {
	env := []any{
		map[string]any{"name": EnvPod, "value": pod.Namespace + "/" + pod.Name},
		map[string]any{"name": EnvHostname, "value": PodHostname(pod)},
	}
	if ns := att.Netns; ns != "" || nodeNetns != "" {
		if ns == "" {
			ns = nodeNetns // hostNetwork on a node with its own namespace
		}
		env = append(env, map[string]any{"name": EnvNetns, "value": ns})
	}
	return env
}

// reportRunning writes the Running status with the attachment's addresses.
func (r *Runtime) reportRunning(ctx context.Context, pod *corev1.Pod, att *attachment) error {
	if statusCurrent(pod, att) {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := r.cfg.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != att.UID || cur.DeletionTimestamp != nil {
			return nil // the next sync handles it
		}
		cur.Status = runningStatus(cur, att, r.cfg.NodeIPs)
		_, err = r.cfg.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func statusCurrent(pod *corev1.Pod, att *attachment) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.PodIPs) != len(att.IPs) {
		return false
	}
	for i, ip := range pod.Status.PodIPs {
		if ip.IP != att.IPs[i] {
			return false
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func runningStatus(pod *corev1.Pod, att *attachment, nodeIPs []string) corev1.PodStatus {
	now := metav1.Now()
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &now,
		QOSClass:  pod.Status.QOSClass,
	}
	for _, ip := range nodeIPs {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	if len(nodeIPs) > 0 {
		st.HostIP = nodeIPs[0]
	}
	for _, ip := range att.IPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	st.PodIP = att.IPs[0]
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true,
			ContainerID: "tierflow://" + string(att.UID) + "/" + c.Name,
			State:       corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}},
		})
	}
	started := true
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: &started,
			ContainerID: "tierflow://" + string(att.UID) + "/" + c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// teardown undoes an attachment and forgets it.
func (r *Runtime) teardown(ctx context.Context, key string, att *attachment) error {
	if err := r.undo(ctx, att); err != nil {
		return err
	}
	r.mu.Lock()
	if r.pods[key] == att {
		delete(r.pods, key)
	}
	r.mu.Unlock()
	r.cfg.Logger.Printf("pod %s: detached", key)
	return nil
}

// stopServers stops the pod's servers (SIGTERM, then SIGKILL after 5 s)
// and keeps them from being restarted.
func (r *Runtime) stopServers(att *attachment) {
	att.stopping.Store(true)
	if att.server != nil && att.server.Process != nil {
		_ = syscall.Kill(-att.server.Process.Pid, syscall.SIGTERM)
		select {
		case <-att.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-att.server.Process.Pid, syscall.SIGKILL)
			<-att.done
		}
	}
}

// undo stops the servers, detaches and deletes the namespace, deletes the
// Exec object and the state files. Every step tolerates what is already
// gone, so undo can be repeated.
func (r *Runtime) undo(ctx context.Context, att *attachment) error {
	r.stopServers(att)
	if att.Netns == "" { // hostNetwork: the servers and the Exec object
		if ctx.Err() == nil {
			return r.deleteExec(ctx, att)
		}
		return nil
	}
	if _, err := r.cni("DEL", att); err != nil {
		return err
	}
	if _, err := os.Stat("/var/run/netns/" + att.Netns); err == nil {
		if err := run("ip", "netns", "del", att.Netns); err != nil {
			return err
		}
	}
	if att.Netns != "" {
		_ = os.RemoveAll(filepath.Join("/etc/netns", att.Netns))
	}
	if ctx.Err() == nil {
		if err := r.deleteExec(ctx, att); err != nil {
			r.cfg.Logger.Printf("pod %s/%s: delete Exec: %v", att.Namespace, att.Name, err)
		}
	}
	for _, suffix := range []string{".json", ".pod.json", ".log"} {
		_ = os.Remove(filepath.Join(r.cfg.StateDir, string(att.UID)+suffix))
	}
	return nil
}

// deleteExec deletes the pod's Exec object if it belongs to this pod (a
// newer pod of the same name has its own).
func (r *Runtime) deleteExec(ctx context.Context, att *attachment) error {
	execs := r.cfg.Dynamic.Resource(ExecGVR).Namespace(att.Namespace)
	obj, err := execs.Get(ctx, att.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	owned := false
	for _, ref := range obj.GetOwnerReferences() {
		owned = owned || ref.UID == att.UID
	}
	if !owned {
		return nil
	}
	uid := obj.GetUID()
	err = execs.Delete(ctx, att.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// teardownAll detaches every pod (at shutdown).
func (r *Runtime) teardownAll() {
	r.mu.Lock()
	pods := r.pods
	r.pods = map[string]*attachment{}
	r.mu.Unlock()
	// In parallel, as the sync workers attach: a node with hundreds of pods
	// must be torn down within its stop grace period.
	type item struct {
		key string
		att *attachment
	}
	work := make(chan item)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if err := r.undo(context.Background(), it.att); err != nil {
					r.cfg.Logger.Printf("pod %s: teardown at shutdown: %v", it.key, err)
				}
			}
		}()
	}
	for key, att := range pods {
		work <- item{key, att}
	}
	close(work)
	wg.Wait()
}

// recoverStale tears down attachments a previous, crashed runtime of this
// node recorded; their pods are attached afresh by the first sync.
func (r *Runtime) recoverStale() {
	files, _ := filepath.Glob(filepath.Join(r.cfg.StateDir, "*.json"))
	for _, f := range files {
		if strings.HasSuffix(f, ".pod.json") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		att := &attachment{}
		if json.Unmarshal(data, att) != nil || att.UID == "" {
			continue
		}
		// The Exec object is recreated on attach; keep the API alone here.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r.undo(ctx, att); err != nil {
			r.cfg.Logger.Printf("stale attachment %s: %v", f, err)
		}
	}
}

func (r *Runtime) saveRecord(att *attachment) error {
	data, err := json.Marshal(att)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.cfg.StateDir, string(att.UID)+".json"), data, 0o644)
}

func (r *Runtime) event(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "tierflow-noderuntime", Host: r.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, _ = r.cfg.Kube.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func tailFile(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	parts := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, " | ")
}

// RemoveRecorded removes the network namespaces of the attachments
// recorded in stateDir (a runtime's --state-dir) that still exist, and
// the records: what a runtime stopped before its teardown finished left
// behind (the pod's veth goes with its namespace). It returns what it
// removed. Only for a stopped runtime.
func RemoveRecorded(stateDir string) []string {
	var removed []string
	files, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	for _, f := range files {
		if strings.HasSuffix(f, ".pod.json") {
			continue
		}
		data, err := os.ReadFile(f)
		att := &attachment{}
		if err != nil || json.Unmarshal(data, att) != nil || att.UID == "" {
			continue
		}
		if att.Netns != "" {
			if _, err := os.Stat("/var/run/netns/" + att.Netns); err == nil {
				if run("ip", "netns", "del", att.Netns) == nil {
					removed = append(removed, "namespace "+att.Netns)
				}
			}
			_ = os.RemoveAll(filepath.Join("/etc/netns", att.Netns))
		}
		for _, suffix := range []string{".json", ".pod.json", ".log"} {
			_ = os.Remove(filepath.Join(stateDir, string(att.UID)+suffix))
		}
	}
	return removed
}
