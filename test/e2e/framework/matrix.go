package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/explain/load"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

// Pod is a probe end: a pod of the test bed with its address and network
// namespace.
type Pod struct {
	Namespace, Name, Node, IP, Netns string
	// ServiceIP is the ClusterIP of the pod's own Service (ExposePods).
	ServiceIP string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Pods returns the running pods of the given namespaces, sorted by
// namespace and name, each with its IPv4 address.
func (tf *Tierflow) Pods(namespaces ...string) ([]Pod, error) {
	var pods []Pod
	for _, ns := range namespaces {
		list, err := tf.Bed.Cluster.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return nil, fmt.Errorf("pod %s/%s is %s with address %q, not running", p.Namespace, p.Name, p.Status.Phase, p.Status.PodIP)
			}
			pods = append(pods, Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP, Netns: noderuntime.NetnsName(p.UID)})
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].String() < pods[j].String() })
	return pods, nil
}

// Key names one cell: source, destination ("NS/POD") and port ("TCP/80").
type Key struct{ Src, Dst, Port string }

func (k Key) String() string { return fmt.Sprintf("%s -> %s %s", k.Src, k.Dst, k.Port) }

// Outcome is what a probe saw: Allow (connected and answered), Deny (timed
// out) or, in Err, anything else (refused: no server; a broken probe).
type Outcome struct {
	Verdict explain.Verdict
	Err     string
}

// ProbeMode says how probes run.
type ProbeMode int

const (
	// ProbeNetns runs agnhost connect directly in the source pod's
	// network namespace (fast: for the bulk of a matrix).
	ProbeNetns ProbeMode = iota
	// ProbeExec runs `kubectl exec SRC -- /agnhost connect ...`, the path
	// an operator uses.
	ProbeExec
)

func (m ProbeMode) String() string {
	if m == ProbeExec {
		return "kubectl exec"
	}
	return "netns"
}

// ProbeTimeout bounds one connection attempt; a denied connection takes
// this long to be seen.
const ProbeTimeout = time.Second

// Probe probes every ordered pair of distinct pods on every port.
func (tf *Tierflow) Probe(pods []Pod, ports []explain.PortSpec, mode ProbeMode) map[Key]Outcome {
	type job struct {
		src, dst Pod
		port     explain.PortSpec
	}
	var jobs []job
	for _, port := range ports {
		for _, s := range pods {
			for _, d := range pods {
				if s != d {
					jobs = append(jobs, job{s, d, port})
				}
			}
		}
	}
	parallel := 24
	if mode == ProbeExec {
		parallel = 6 // each probe is a kubectl process and an API round trip
	}
	out := make(map[Key]Outcome, len(jobs))
	var mu sync.Mutex
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o := tf.ProbeOne(j.src, j.dst, j.port, mode)
			mu.Lock()
			out[Key{j.src.String(), j.dst.String(), j.port.String()}] = o
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// ProbeOne makes one connection attempt from src to dst's address.
func (tf *Tierflow) ProbeOne(src, dst Pod, port explain.PortSpec, mode ProbeMode) Outcome {
	return tf.probe(src, dst, port, mode, ProbeTimeout)
}

// RecheckTimeout bounds the second attempt of Recheck.
const RecheckTimeout = 4 * time.Second

// Recheck probes again, one at a time and with RecheckTimeout, the cells
// where a probe saw Deny (or failed) and explain says Allow, and records
// the new outcome. On a loaded machine an allowed connection's answer can
// come after ProbeTimeout; a connection the datapath drops never succeeds,
// so a recheck cannot hide a wrong Allow, and the cells it changed are
// returned for the log. Cells probed Allow against an explain Deny are
// never rechecked.
func (tf *Tierflow) Recheck(pods []Pod, probed map[Key]Outcome, expected map[Key]explain.Cell, mode ProbeMode) (changed []string) {
	byName := map[string]Pod{}
	for _, p := range pods {
		byName[p.String()] = p
	}
	var keys []Key
	for k, o := range probed {
		if c, ok := expected[k]; ok && c.Verdict == explain.VerdictAllow && o.Verdict != explain.VerdictAllow {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		port, err := explain.ParsePortSpec(k.Port)
		if err != nil {
			continue
		}
		o := tf.probe(byName[k.Src], byName[k.Dst], port, mode, RecheckTimeout)
		if o != probed[k] {
			changed = append(changed, fmt.Sprintf("%s: %s%s at first, %s%s on recheck", k, probed[k].Verdict, probed[k].Err, o.Verdict, o.Err))
			probed[k] = o
		}
	}
	return changed
}

func (tf *Tierflow) probe(src, dst Pod, port explain.PortSpec, mode ProbeMode, timeout time.Duration) Outcome {
	args := []string{"connect", fmt.Sprintf("%s:%d", dst.IP, port.Port), "--timeout=" + timeout.String(), "--protocol=" + strings.ToLower(string(port.Protocol))}
	var stdout, stderr string
	var code int
	switch mode {
	case ProbeExec:
		res := tf.Bed.Exec(src.Namespace, src.Name, append([]string{"/agnhost"}, args...)...)
		stdout, stderr, code = res.Stdout, res.Stderr, res.ExitCode
	default:
		cmd := exec.Command("ip", append([]string{"netns", "exec", src.Netns, filepath.Join(tf.Bed.BinDir, "tierflow-podrunner"), "agnhost"}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		stdout, stderr = o.String(), e.String()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			return Outcome{Err: err.Error()}
		}
	}
	switch {
	case code == 0:
		return Outcome{Verdict: explain.VerdictAllow}
	case timedOut(stderr):
		return Outcome{Verdict: explain.VerdictDeny}
	default:
		return Outcome{Err: fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(stdout+" "+stderr))}
	}
}

// timedOut tells whether agnhost connect reported a timeout: a line of its
// stderr starting with TIMEOUT (through kubectl exec, kubectl's own log
// lines may come first).
func timedOut(stderr string) bool {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "TIMEOUT") {
			return true
		}
	}
	return false
}

// LiveObjects reads the cluster's objects the way an operator would hand
// them to tierctl explain: `kubectl get -A -o yaml`.
func (tf *Tierflow) LiveObjects() (*load.Built, string, error) {
	yaml, err := tf.Kubectl("", "get", "-A", "-o", "yaml",
		"namespaces,nodes,pods,networkpolicies.networking.k8s.io,adminnetworkpolicies.policy.networking.k8s.io,baselineadminnetworkpolicies.policy.networking.k8s.io,clusternetworkpolicies.policy.networking.k8s.io")
	if err != nil {
		return nil, "", err
	}
	objs := &load.Objects{}
	if err := objs.Read(strings.NewReader(yaml), "kubectl get"); err != nil {
		return nil, "", err
	}
	objs.Complete()
	built, err := load.Build(objs)
	if err != nil {
		return nil, "", err
	}
	return built, yaml, nil
}

// Expected evaluates every cell between pods with pkg/explain over the
// live objects.
func Expected(built *load.Built, pods []Pod, ports []explain.PortSpec) (map[Key]explain.Cell, error) {
	ev, err := explain.NewEvaluator(built.Snapshot, built.Inventory)
	if err != nil {
		return nil, err
	}
	cells, _, err := ev.Matrix(ports)
	if err != nil {
		return nil, err
	}
	probed := map[string]bool{}
	for _, p := range pods {
		probed[p.String()] = true
	}
	out := map[Key]explain.Cell{}
	for _, c := range cells {
		if probed[c.Src] && probed[c.Dst] {
			out[Key{c.Src, c.Dst, c.Port}] = c
		}
	}
	return out, nil
}

// Compare lists, in a stable order, every cell where the probe and explain
// differ (or where either is missing or the probe failed).
func Compare(probed map[Key]Outcome, expected map[Key]explain.Cell) []string {
	keys := map[Key]bool{}
	for k := range probed {
		keys[k] = true
	}
	for k := range expected {
		keys[k] = true
	}
	var diffs []string
	for k := range keys {
		o, okP := probed[k]
		c, okE := expected[k]
		switch {
		case !okP:
			diffs = append(diffs, fmt.Sprintf("%s: not probed; explain says %s", k, c.Verdict))
		case !okE:
			diffs = append(diffs, fmt.Sprintf("%s: probed %s%s; explain has no cell", k, o.Verdict, o.Err))
		case o.Err != "":
			diffs = append(diffs, fmt.Sprintf("%s: probe failed (%s); explain says %s", k, o.Err, c.Verdict))
		case o.Verdict != c.Verdict:
			diffs = append(diffs, fmt.Sprintf("%s: probe %s, explain %s (%s)", k, o.Verdict, c.Verdict, Because(c.Result)))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Because says in one line which rules decided a result.
func Because(r explain.Result) string {
	dir := func(name string, d explain.Decision) string {
		s := fmt.Sprintf("%s: %s %s", name, d.Tier, d.Action)
		if d.Policy != nil {
			s += " by " + d.Policy.String()
			if d.Rule != nil {
				s += fmt.Sprintf(" rule %d", d.Rule.Index)
				if d.Rule.Name != "" {
					s += " " + d.Rule.Name
				}
			}
		} else {
			s += " (" + string(d.Reason) + ")"
		}
		return s
	}
	return dir("egress", r.Egress) + "; " + dir("ingress", r.Ingress)
}

// Grid renders outcomes as tierctl explain --matrix -o table does: one grid
// per port, a row per source, "allow" or "DENY" per destination ("ERR" for
// a failed probe, "-" on the diagonal).
func Grid(pods []Pod, ports []explain.PortSpec, probed map[Key]Outcome) string {
	var b strings.Builder
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.String()
	}
	width := len("UDP/65535")
	for _, n := range names {
		width = max(width, len(n))
	}
	cell := func(s string) string { return s + strings.Repeat(" ", width-len(s)+2) }
	for i, port := range ports {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(cell(port.String()))
		for _, n := range names {
			b.WriteString(cell(n))
		}
		b.WriteString("\n")
		for _, s := range names {
			b.WriteString(cell(s))
			for _, d := range names {
				o, ok := probed[Key{s, d, port.String()}]
				switch {
				case !ok:
					b.WriteString(cell("-"))
				case o.Err != "":
					b.WriteString(cell("ERR"))
				case o.Verdict == explain.VerdictAllow:
					b.WriteString(cell("allow"))
				default:
					b.WriteString(cell("DENY"))
				}
			}
			b.WriteString("\n")
		}
	}
	return strings.TrimRight(b.String(), " \n") + "\n"
}
