package cluster

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/test/cluster/node"
)

//go:embed coredns.yaml
var corednsManifest string

// Options describe a cluster to bring up.
type Options struct {
	// Name prefixes every Docker object (containers, network, volumes) and
	// names the nodes: NAME-node-1 (the control plane), NAME-node-2, ...
	Name string
	// Nodes counts every node, the control-plane node included (≥ 2).
	Nodes int
	// Dir is where the cluster's state, PKI, kubeconfig and env file go.
	Dir string
	// Subnet is the nodes' network (a /24): .1 is this machine, nodes
	// start at .11.
	Subnet string
	// BinDir holds the binaries listed in Binaries.
	BinDir string
	// ExternalIP is an address this machine adds to its loopback interface
	// for pods to reach "outside the cluster" (through masquerade).
	ExternalIP string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

// Defaults of `make cluster-up`.
const (
	DefaultName       = "tierflow"
	DefaultSubnet     = "172.30.0.0/24"
	DefaultExternalIP = "198.51.100.1"
	ClusterCIDR       = "10.244.0.0/16"
	ServiceCIDR       = "10.96.0.0/16"
	APIServiceIP      = "10.96.0.1"
	DNSIP             = "10.96.0.10"
	label             = "io.tierflow.cluster"
)

// Node is one node container.
type Node struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	Role string `json:"role"` // control-plane or worker
}

// Cluster is a running cluster, as recorded in Dir/state.json.
type Cluster struct {
	Name         string `json:"name"`
	Dir          string `json:"dir"`
	Subnet       string `json:"subnet"`
	Gateway      string `json:"gateway"`
	Nodes        []Node `json:"nodes"`
	NodeImage    string `json:"nodeImage"`
	ClusterCIDR  string `json:"clusterCIDR"`
	ServiceCIDR  string `json:"serviceCIDR"`
	APIServiceIP string `json:"apiServiceIP"`
	DNSIP        string `json:"dnsIP"`
	ExternalIP   string `json:"externalIP"`
	// ExternalIPAdded: Up put ExternalIP on the loopback interface (Down
	// removes it only then: another cluster may use the same address).
	ExternalIPAdded bool `json:"externalIPAdded,omitempty"`
	// Kubeconfig is the admin kubeconfig; EnvFile a shell file that
	// exports KUBECONFIG and puts kubectl on PATH.
	Kubeconfig string `json:"kubeconfig"`
	EnvFile    string `json:"envFile"`
	BinDir     string `json:"binDir"`
	// DockerdPID is the dockerd Up started (0: one was running already).
	DockerdPID int `json:"dockerdPID,omitempty"`
}

// APIServer is the API server's URL as nodes and this machine reach it.
func (c *Cluster) APIServer() string { return "https://" + c.Nodes[0].IP + ":6443" }

// Client returns an admin clientset.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return kubernetes.NewForConfig(cfg)
}

// StatePath is where Up records a cluster.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

// Load reads the cluster recorded in dir.
func Load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(StatePath(dir))
	if err != nil {
		return nil, err
	}
	var c Cluster
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", StatePath(dir), err)
	}
	return &c, nil
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(StatePath(c.Dir), append(b, '\n'), 0o644)
}

// minFreeDisk is the free space Up wants where Docker keeps its images
// and the nodes' /var volumes (images ~4 GiB, nodes ~1 GiB each, and
// room for the containers' logs and snapshots).
const minFreeDisk = 10 << 30

// Missing lists what Up needs and this machine lacks, each with what to do.
func Missing(binDir string) []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root: the cluster needs Docker, the machine's cgroups and an address on its loopback interface")
	}
	for _, tool := range []string{"docker", "dockerd", "mmdebstrap", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, fmt.Sprintf("%s: not found (make cluster-prereqs installs Debian's docker.io, containerd, runc and mmdebstrap)", tool))
		}
	}
	for _, b := range Binaries {
		if st, err := os.Stat(filepath.Join(binDir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, fmt.Sprintf("%s: not in %s (make cluster-prereqs builds it)", b, binDir))
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		missing = append(missing, "cgroup v1 memory controller at /sys/fs/cgroup/memory: the nodes' kubelets share this machine's cgroup v1 hierarchy")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		missing = append(missing, "/dev/net/tun: OVS's userspace datapath needs it on every node")
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		missing = append(missing, "the overlay file system in the kernel: Docker and the nodes' containerd keep images as overlayfs snapshots")
	}
	if free, dir := freeSpace("/var/lib/docker"); free >= 0 && free < minFreeDisk {
		missing = append(missing, fmt.Sprintf("disk space: %d GiB free in %s, the images and nodes need %d GiB", free>>30, dir, minFreeDisk>>30))
	}
	return missing
}

// freeSpace is the space available to root at path, or at its nearest
// existing parent, and that directory (-1: unknown).
func freeSpace(path string) (int64, string) {
	for dir := path; ; dir = filepath.Dir(dir) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			return int64(st.Bavail) * st.Bsize, dir
		}
		if dir == "/" {
			return -1, ""
		}
	}
}

// Up builds what is missing, starts the nodes, waits until every node has
// registered, loads the support images and installs CoreDNS. The nodes
// stay NotReady until a network plugin (tierflow) is installed. On failure
// everything Up started is removed again.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Nodes < 2 {
		return nil, fmt.Errorf("a cluster needs at least 2 nodes (a control plane and a worker), not %d", o.Nodes)
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Subnet == "" {
		o.Subnet = DefaultSubnet
	}
	if o.ExternalIP == "" {
		o.ExternalIP = DefaultExternalIP
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if m := Missing(o.BinDir); len(m) > 0 {
		return nil, fmt.Errorf("cannot bring up a cluster; missing:\n  %s", strings.Join(m, "\n  "))
	}
	holdDocker()
	if old, err := Load(o.Dir); err == nil {
		return nil, fmt.Errorf("a cluster %q is already recorded in %s; run `make cluster-down` first", old.Name, o.Dir)
	}
	if dockerReachable(ctx) {
		if ids, _ := docker(ctx, "ps", "-aq", "--filter", "label="+label+"="+o.Name); ids != "" {
			return nil, fmt.Errorf("containers of a cluster named %q exist (recorded in another directory?): remove that cluster first", o.Name)
		}
	}
	_, ipnet, err := net.ParseCIDR(o.Subnet)
	if err != nil || !strings.HasSuffix(o.Subnet, "/24") || ipnet.IP.To4() == nil {
		return nil, fmt.Errorf("subnet %q: want an IPv4 /24", o.Subnet)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{
		Name: o.Name, Dir: o.Dir, Subnet: o.Subnet, Gateway: hostAddr(ipnet, 1),
		ClusterCIDR: ClusterCIDR, ServiceCIDR: ServiceCIDR, APIServiceIP: APIServiceIP, DNSIP: DNSIP,
		ExternalIP: o.ExternalIP, BinDir: o.BinDir,
		Kubeconfig: filepath.Join(o.Dir, "kubeconfig"), EnvFile: filepath.Join(o.Dir, "cluster.env"),
	}
	for i := 1; i <= o.Nodes; i++ {
		role := "worker"
		if i == 1 {
			role = "control-plane"
		}
		c.Nodes = append(c.Nodes, Node{Name: fmt.Sprintf("%s-node-%d", o.Name, i), IP: hostAddr(ipnet, 10+i), Role: role})
	}
	// From here on, a failure removes what was started.
	defer func() {
		if err != nil {
			logf("bring-up failed; removing what was started")
			if derr := c.Down(context.Background(), logf); derr != nil {
				err = fmt.Errorf("%w (and tearing down: %v)", err, derr)
			}
			c = nil
		}
	}()
	if !dockerReachable(ctx) {
		logf("starting dockerd")
		if c.DockerdPID, err = startDockerd(ctx, filepath.Join(o.Dir, "dockerd.log")); err != nil {
			return c, err
		}
	}
	if err = c.save(); err != nil {
		return c, err
	}
	b := &imageBuilder{binDir: o.BinDir, scratch: filepath.Join(o.Dir, "..", "cluster-build"), logf: logf}
	if c.NodeImage, err = b.ensureAll(ctx); err != nil {
		return c, err
	}
	if err = c.writeNodeFiles(); err != nil {
		return c, err
	}
	logf("starting %d nodes", len(c.Nodes))
	if _, err = docker(ctx, "network", "create", "--driver=bridge", "--subnet="+o.Subnet, "--gateway="+c.Gateway,
		"--label", label+"="+c.Name, c.Name); err != nil {
		return c, err
	}
	// With the userspace datapath in encap mode a node's eth0 is a port of
	// OVS, which reads it with a packet socket and neither completes
	// checksums left to offload nor segments oversized TCP frames: what
	// this machine and the other nodes send a node must be whole frames
	// with full checksums, as a physical network delivers them. They are
	// when neither the network's bridge (this machine's kubectl to the
	// API server, replies from ExternalIP) nor the nodes' eth0 offer
	// checksum (hence segmentation) offload. Without the first kubectl's
	// TLS to the API server broke as soon as the agent moved eth0; without
	// the second a node whose agent had not moved eth0 yet could not reach
	// the API server on a node whose agent had (see pkg/agent/nodenet,
	// "Encap").
	if err = c.bridgeChecksumsInSoftware(ctx); err != nil {
		return c, err
	}
	for _, n := range c.Nodes {
		if err = c.runNode(ctx, n); err != nil {
			return c, err
		}
		if err = nodeChecksumsInSoftware(ctx, n); err != nil {
			return c, err
		}
	}
	if err = c.save(); err != nil {
		return c, err
	}
	if err = c.waitNodesRegistered(ctx, 3*time.Minute); err != nil {
		return c, err
	}
	// A kubelet may not label its own node with a node-role (the
	// NodeRestriction admission plugin): the installer does, as kubeadm.
	if _, err = c.Kubectl(ctx, nil, "label", "node", c.Nodes[0].Name, "node-role.kubernetes.io/control-plane="); err != nil {
		return c, err
	}
	logf("loading images into the nodes")
	if err = c.LoadImages(ctx, append([]string{PauseImage, CoreDNSImage}, AgnhostImages...)...); err != nil {
		return c, err
	}
	if err = c.installCoreDNS(ctx); err != nil {
		return c, err
	}
	if c.ExternalIPAdded, err = addExternalAddress(c.ExternalIP); err != nil {
		return c, err
	}
	if err = c.writeEnv(); err != nil {
		return c, err
	}
	return c, c.save()
}

func hostAddr(n *net.IPNet, host int) string {
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], byte(host)).String()
}

// cgroupRoot is node n's subtree of the machine's cgroup hierarchy.
func (c *Cluster) cgroupRoot(n Node) string { return "/tierflow-cluster/" + n.Name }

func (c *Cluster) nodeDir(n Node) string { return filepath.Join(c.Dir, "nodes", n.Name) }

// writeNodeFiles writes each node's /etc/kubernetes: certificates,
// kubeconfigs, the kubelet's and kube-proxy's configuration, resolv.conf.
func (c *Cluster) writeNodeFiles() error {
	perNode, admin, err := clusterPKI(c)
	if err != nil {
		return err
	}
	upstream := upstreamResolvConf()
	for _, n := range c.Nodes {
		s := node.Settings{CgroupRoot: c.cgroupRoot(n), ClusterDNS: c.DNSIP, ClusterCIDR: c.ClusterCIDR, ControlPlane: n.Role == "control-plane"}
		files := perNode[n.Name]
		if files["kubelet-config.yaml"], err = node.KubeletConfig(s); err != nil {
			return err
		}
		if files["kube-proxy-config.yaml"], err = node.KubeProxyConfig(s); err != nil {
			return err
		}
		files["resolv.conf"] = upstream
		if err := writeFiles(c.nodeDir(n), files); err != nil {
			return err
		}
	}
	return os.WriteFile(c.Kubeconfig, admin, 0o600)
}

// upstreamResolvConf is this machine's resolver configuration for the
// nodes' pods, unless it points at a loopback resolver the pods cannot
// reach; then it names none (cluster names still resolve).
func upstreamResolvConf() []byte {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return []byte("# no upstream resolver\n")
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(f[1]); ip == nil || ip.IsLoopback() {
				continue
			}
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}

// runNode starts node n's container. It gets what a privileged container
// would have, except CAP_SYS_RESOURCE, which this machine cannot grant:
// every other capability, no seccomp or AppArmor profile, writable /proc
// and /sys, every device, the machine's cgroup hierarchy (each kubelet
// uses its own subtree), /dev/net/tun for OVS and /dev/kmsg for the
// kubelet. /var is a volume, so containerd's overlayfs snapshots never sit
// on the container's own overlayfs.
func (c *Cluster) runNode(ctx context.Context, n Node) error {
	env := map[string]string{
		"NODE_NAME": n.Name, "NODE_IP": n.IP, "NODE_ROLE": n.Role, "API_SERVER": c.APIServer(),
		"CGROUP_ROOT": c.cgroupRoot(n), "CLUSTER_CIDR": c.ClusterCIDR, "SERVICE_CIDR": c.ServiceCIDR,
		"CLUSTER_DNS": c.DNSIP,
	}
	args := []string{"run", "--detach", "--name", n.Name, "--hostname", n.Name,
		"--label", label + "=" + c.Name,
		"--network", c.Name, "--ip", n.IP,
		"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--security-opt", "systempaths=unconfined",
		"--device-cgroup-rule", "a *:* rwm", "--device", "/dev/net/tun", "--device", "/dev/kmsg",
		"--cgroupns", "host", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--volume", "/lib/modules:/lib/modules:ro",
		"--volume", c.nodeDir(n) + ":/etc/kubernetes:ro",
		"--mount", "type=volume,source=" + n.Name + "-var,target=/var,volume-label=" + label + "=" + c.Name,
		"--tmpfs", "/run:rw,exec,mode=755", "--tmpfs", "/tmp:rw,exec,mode=1777",
		"--sysctl", "net.ipv4.ip_forward=1", "--sysctl", "net.ipv6.conf.all.forwarding=1",
		"--sysctl", "net.ipv6.conf.all.disable_ipv6=0",
	}
	for _, k := range sortedKeys(env) {
		args = append(args, "--env", k+"="+env[k])
	}
	_, err := docker(ctx, append(args, c.NodeImage)...)
	return err
}

func (c *Cluster) waitNodesRegistered(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := c.NodesRunning(ctx); err != nil {
			return err
		}
		cs, err := c.Client()
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := cs.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
		cancel()
		if err == nil && len(list.Items) == len(c.Nodes) {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d of %d nodes registered", len(list.Items), len(c.Nodes))
		}
		time.Sleep(2 * time.Second)
	}
	return fmt.Errorf("nodes did not register within %v: %v\n%s", timeout, last, c.NodeLogs(ctx, 10))
}

// NodesRunning fails when a node container has exited.
func (c *Cluster) NodesRunning(ctx context.Context) error {
	for _, n := range c.Nodes {
		state, err := docker(ctx, "inspect", "--format", "{{.State.Status}}", n.Name)
		if err != nil {
			return err
		}
		if state != "running" {
			logs, _ := command(ctx, nil, "docker", "logs", "--tail", "30", n.Name)
			return fmt.Errorf("node %s is %s:\n%s", n.Name, state, logs)
		}
	}
	return nil
}

// NodeLogs returns the last lines of each node's daemon logs.
func (c *Cluster) NodeLogs(ctx context.Context, lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		out, _ := c.Exec(ctx, n.Name, "sh", "-c", "for f in /var/log/tierflow-node/*.log; do echo \"== $f\"; tail -n "+strconv.Itoa(lines)+" \"$f\"; done")
		fmt.Fprintf(&b, "--- %s\n%s\n", n.Name, out)
	}
	return b.String()
}

// Exec runs a command in node's container (the node's namespaces: the
// host-network view a kubelet has).
func (c *Cluster) Exec(ctx context.Context, nodeName string, args ...string) (string, error) {
	return docker(ctx, append([]string{"exec", nodeName}, args...)...)
}

// LoadImages copies images from this machine's Docker into every node's
// containerd (namespace k8s.io, where the kubelet looks), as `kind load
// docker-image` does.
func (c *Cluster) LoadImages(ctx context.Context, images ...string) error {
	for _, img := range images {
		if !imageExists(ctx, img) {
			return fmt.Errorf("image %s is not in this machine's Docker (build it first)", img)
		}
	}
	for _, n := range c.Nodes {
		save := exec.CommandContext(ctx, "docker", append([]string{"save"}, images...)...)
		pipe, err := save.StdoutPipe()
		if err != nil {
			return err
		}
		var saveErr bytes.Buffer
		save.Stderr = &saveErr
		if err := save.Start(); err != nil {
			return err
		}
		_, importErr := command(ctx, pipe, "docker", "exec", "-i", n.Name, "ctr", "--namespace", "k8s.io", "images", "import", "-")
		waitErr := save.Wait()
		if importErr != nil {
			return fmt.Errorf("loading images into %s: %w", n.Name, importErr)
		}
		if waitErr != nil {
			return fmt.Errorf("docker save: %w: %s", waitErr, saveErr.String())
		}
	}
	return nil
}

func (c *Cluster) installCoreDNS(ctx context.Context) error {
	t, err := template.New("coredns").Option("missingkey=error").Parse(corednsManifest)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, map[string]string{"DNSIP": c.DNSIP, "Image": CoreDNSImage}); err != nil {
		return err
	}
	_, err = c.Kubectl(ctx, &b, "apply", "-f", "-")
	return err
}

// Kubectl runs the cluster's kubectl with the admin kubeconfig.
func (c *Cluster) Kubectl(ctx context.Context, stdin *bytes.Buffer, args ...string) (string, error) {
	args = append([]string{"--kubeconfig", c.Kubeconfig}, args...)
	if stdin == nil {
		return command(ctx, nil, filepath.Join(c.BinDir, "kubectl"), args...)
	}
	return command(ctx, stdin, filepath.Join(c.BinDir, "kubectl"), args...)
}

// writeEnv writes the file `source`d to use the cluster: KUBECONFIG and
// kubectl on PATH.
func (c *Cluster) writeEnv() error {
	var b strings.Builder
	fmt.Fprintf(&b, "export KUBECONFIG=%q\n", c.Kubeconfig)
	fmt.Fprintf(&b, "export PATH=%q:\"$PATH\"\n", c.BinDir)
	return os.WriteFile(c.EnvFile, []byte(b.String()), 0o644)
}

// addExternalAddress puts ip on this machine's loopback interface: pods
// reach it through their node's masquerade and the nodes' default route.
// It reports whether it added it (false: it was there already, someone
// else's).
func addExternalAddress(ip string) (bool, error) {
	if out, err := exec.Command("ip", "addr", "show", "dev", "lo").Output(); err == nil && strings.Contains(string(out), " "+ip+"/32 ") {
		return false, nil
	}
	out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("ip addr add %s/32 dev lo: %v: %s", ip, err, out)
	}
	return true, nil
}

// Down removes the cluster: node containers and their volumes, the
// network, the nodes' cgroup subtrees, the external address, the dockerd
// Up started (unless it runs other containers), and the state directory
// (images stay: they are a cache). It returns an error naming anything it
// could not remove.
func (c *Cluster) Down(ctx context.Context, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var problems []string
	note := func(err error) {
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	holdDocker()
	if !dockerReachable(ctx) && c.DockerdPID == 0 {
		// The containers, volumes and network are in Docker's store even
		// while no daemon runs (it was stopped under the cluster): start
		// one to remove them, and stop it after.
		logf("starting dockerd to remove the cluster's containers")
		pid, err := startDockerd(ctx, filepath.Join(os.TempDir(), "tierflow-cluster-dockerd.log"))
		if err != nil {
			return fmt.Errorf("cannot remove cluster %s's containers: %w", c.Name, err)
		}
		c.DockerdPID = pid
	}
	if dockerReachable(ctx) {
		ids, err := docker(ctx, "ps", "-aq", "--filter", "label="+label+"="+c.Name)
		note(err)
		if ids != "" {
			_, err := docker(ctx, append([]string{"rm", "--force", "--volumes"}, strings.Fields(ids)...)...)
			note(err)
		}
		vols, err := docker(ctx, "volume", "ls", "-q", "--filter", "label="+label+"="+c.Name)
		note(err)
		if vols != "" {
			_, err := docker(ctx, append([]string{"volume", "rm", "--force"}, strings.Fields(vols)...)...)
			note(err)
		}
		if nets, _ := docker(ctx, "network", "ls", "-q", "--filter", "label="+label+"="+c.Name); nets != "" {
			_, err := docker(ctx, append([]string{"network", "rm"}, strings.Fields(nets)...)...)
			note(err)
		}
	}
	for _, n := range c.Nodes {
		note(removeCgroupTree(c.cgroupRoot(n)))
	}
	if c.ExternalIPAdded {
		if out, err := exec.Command("ip", "addr", "show", "dev", "lo").Output(); err == nil && strings.Contains(string(out), " "+c.ExternalIP+"/32 ") {
			if out, err := exec.Command("ip", "addr", "del", c.ExternalIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
				note(fmt.Errorf("ip addr del %s: %v: %s", c.ExternalIP, err, out))
			}
		}
	}
	// The dockerd Up started stops with the cluster, unless it runs
	// other containers (another cluster's, someone's) or another process
	// of ours uses it (building images before it has containers). Its
	// dangling images (superseded builds) go first: they only pile up.
	if others, _ := docker(ctx, "ps", "-aq"); c.DockerdPID > 0 && others == "" && !dockerUsedByOthers() && syscall.Kill(c.DockerdPID, 0) == nil {
		_, _ = docker(ctx, "image", "prune", "--force")
		logf("stopping the dockerd bring-up started (pid %d)", c.DockerdPID)
		_ = syscall.Kill(c.DockerdPID, syscall.SIGTERM)
		for i := 0; i < 100 && syscall.Kill(c.DockerdPID, 0) == nil; i++ {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return os.RemoveAll(c.Dir)
}

// removeCgroupTree removes a node's cgroup subtree in every v1 hierarchy,
// deepest first (a cgroup directory goes only when empty: its processes
// ended with the node container).
func removeCgroupTree(root string) error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	var failed []string
	for _, h := range hierarchies {
		top := filepath.Join(h, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for try := 0; try < 50; try++ {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				failed = append(failed, dirs[i]+": "+err.Error())
			}
		}
		// The shared parent goes with the last cluster node.
		_ = syscall.Rmdir(filepath.Dir(top))
	}
	if len(failed) > 0 {
		return fmt.Errorf("cgroups left: %s", strings.Join(failed, "; "))
	}
	return nil
}

// bridgeChecksumsInSoftware turns TX checksum offload off on the Docker
// network's bridge (br-<first 12 hex digits of the network ID>).
func (c *Cluster) bridgeChecksumsInSoftware(ctx context.Context) error {
	id, err := docker(ctx, "network", "inspect", "-f", "{{.Id}}", c.Name)
	if err != nil {
		return err
	}
	id = strings.TrimSpace(id)
	if len(id) < 12 {
		return fmt.Errorf("docker network %s: unexpected ID %q", c.Name, id)
	}
	if out, err := exec.CommandContext(ctx, "ethtool", "-K", "br-"+id[:12], "tx", "off").CombinedOutput(); err != nil {
		return fmt.Errorf("ethtool -K br-%s tx off: %v: %s", id[:12], err, out)
	}
	return nil
}

// nodeChecksumsInSoftware turns TX checksum offload off on node n's eth0
// (in the node container's network namespace).
func nodeChecksumsInSoftware(ctx context.Context, n Node) error {
	pid, err := docker(ctx, "inspect", "-f", "{{.State.Pid}}", n.Name)
	if err != nil {
		return err
	}
	pid = strings.TrimSpace(pid)
	if out, err := exec.CommandContext(ctx, "nsenter", "-t", pid, "-n", "ethtool", "-K", "eth0", "tx", "off").CombinedOutput(); err != nil {
		return fmt.Errorf("node %s: ethtool -K eth0 tx off: %v: %s", n.Name, err, out)
	}
	return nil
}

// Lock takes the machine-wide lock of the cluster name, waiting for it:
// two test processes (make test in two checkouts) never bring up clusters
// of the same name, whose Docker objects and addresses would collide. The
// kernel releases it when the process dies; unlock may be called twice.
func Lock(name string) (unlock func(), err error) {
	f, err := os.OpenFile("/run/tierflow-cluster-"+name+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking cluster name %s: %w", name, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		})
	}, nil
}

// RemoveStale removes the cluster recorded in dir and any Docker objects
// and cgroups of a cluster named name (an earlier run that was killed,
// here or in another checkout). Call it holding Lock(name).
func RemoveStale(ctx context.Context, name, dir string, logf func(string, ...any)) error {
	if old, err := Load(dir); err == nil {
		logf("removing the cluster an earlier run left in %s", dir)
		if err := old.Down(ctx, logf); err != nil {
			return err
		}
	}
	if !dockerReachable(ctx) {
		return nil
	}
	ids, err := docker(ctx, "ps", "-aq", "--filter", "label="+label+"="+name)
	if err != nil || ids == "" {
		return err
	}
	logf("removing the containers of a cluster %s an earlier run left", name)
	stale := &Cluster{Name: name, Dir: filepath.Join(os.TempDir(), "tierflow-stale-"+name)}
	for _, id := range strings.Fields(ids) {
		n, err := docker(ctx, "inspect", "--format", "{{.Name}}", id)
		if err == nil {
			stale.Nodes = append(stale.Nodes, Node{Name: strings.TrimPrefix(n, "/")})
		}
	}
	return stale.Down(ctx, logf)
}

// DockerObjects lists the containers, volumes and networks of the cluster
// named name.
func (c *Cluster) DockerObjects(ctx context.Context, name string) ([]string, error) {
	var out []string
	for _, kind := range []string{"container", "volume", "network"} {
		ids, err := docker(ctx, kind, "ls", "-q", "--filter", "label="+label+"="+name)
		if err != nil {
			return nil, err
		}
		for _, id := range strings.Fields(ids) {
			out = append(out, kind+" "+id)
		}
	}
	return out, nil
}

// Docker runs a docker command against the Docker daemon the cluster
// uses (tests).
func (c *Cluster) Docker(ctx context.Context, args ...string) error {
	_, err := docker(ctx, args...)
	return err
}
