package kubeapi

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
)

const (
	// EtcdPath is where Debian's etcd-server package installs etcd 3.4.
	EtcdPath = "/usr/bin/etcd"
	// ServiceCIDR is the cluster's service range; its first address is the
	// kubernetes service and is in the serving certificate.
	ServiceCIDR      = "10.96.0.0/16"
	serviceClusterIP = "10.96.0.1"

	startTimeout = 90 * time.Second
	stopGrace    = 10 * time.Second
	startTries   = 3
)

// Cluster is a running control plane. Its fields are read-only for tests.
type Cluster struct {
	// Dir holds certificates, the kubeconfig, etcd's data and daemon logs.
	Dir string
	// BinDir holds the Kubernetes binaries in use.
	BinDir string
	// Host is kube-apiserver's URL, https://127.0.0.1:PORT.
	Host string
	// EtcdURL is the etcd client URL.
	EtcdURL string
	// Config authenticates as a cluster admin (group system:masters).
	Config *rest.Config
	// Kubeconfig is a kubeconfig file with the same admin credentials.
	Kubeconfig string
	// Kube, Policy and Dynamic are clientsets using Config.
	Kube    kubernetes.Interface
	Policy  npclient.Interface
	Dynamic dynamic.Interface

	pki       *pki
	processes []*process // in start order; stopped in reverse
}

type options struct {
	controllerManager bool
	scheduler         bool
	crds              *CRDOptions
	apiserverArgs     []string
	serviceCIDRs      string
}

// Option configures Start.
type Option func(*options)

// WithControllerManager also runs kube-controller-manager (service
// accounts, namespace deletion, garbage collection, node lifecycle, ...).
// The ServiceAccount admission plugin is then enabled, and Start waits
// until the default namespace's service account exists.
func WithControllerManager() Option { return func(o *options) { o.controllerManager = true } }

// WithScheduler also runs kube-scheduler.
func WithScheduler() Option { return func(o *options) { o.scheduler = true } }

// WithCRDs installs the network-policy-api CRDs from manifests/crds before
// Start returns; with no argument all of them, validation intact.
func WithCRDs(opts ...CRDOptions) Option {
	return func(o *options) {
		c := CRDOptions{}
		if len(opts) > 0 {
			c = opts[0]
		}
		o.crds = &c
	}
}

// ServiceCIDRv6 is the IPv6 service range WithDualStackServices adds.
const ServiceCIDRv6 = "fd00:10:96::/112"

// WithDualStackServices gives the cluster an IPv6 service range besides
// ServiceCIDR, so Services can be dual-stack (spec.ipFamilyPolicy).
func WithDualStackServices() Option {
	return func(o *options) { o.serviceCIDRs = ServiceCIDR + "," + ServiceCIDRv6 }
}

// WithAPIServerArgs appends flags to kube-apiserver's command line.
func WithAPIServerArgs(args ...string) Option {
	return func(o *options) { o.apiserverArgs = append(o.apiserverArgs, args...) }
}

// Start runs etcd and kube-apiserver (and what the options ask for) and
// returns when the API server is ready. Everything is stopped by t.Cleanup.
// Missing prerequisites fail the test.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	o := options{serviceCIDRs: ServiceCIDR}
	for _, opt := range opts {
		opt(&o)
	}
	binDir, err := EnsureBinaries()
	if err != nil {
		t.Fatalf("kubeapi: Kubernetes binaries unavailable: %v", err)
	}
	if _, err := os.Stat(EtcdPath); err != nil {
		t.Fatalf("kubeapi: %s not found (install Debian's etcd-server: test/tools/install-deps.sh or `make deps`): %v", EtcdPath, err)
	}
	dir, err := os.MkdirTemp("", "tierflow-kubeapi-")
	if err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	c := &Cluster{Dir: dir, BinDir: binDir}
	t.Cleanup(func() { c.stop(t) })

	if err := c.startEtcd(); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	if c.pki, err = newPKI(dir); err != nil {
		t.Fatalf("kubeapi: generating certificates: %v", err)
	}
	if err := c.startAPIServer(o); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	if o.controllerManager {
		if err := c.startControllerManager(o.serviceCIDRs); err != nil {
			t.Fatalf("kubeapi: %v", err)
		}
	}
	if o.scheduler {
		if err := c.startScheduler(); err != nil {
			t.Fatalf("kubeapi: %v", err)
		}
	}
	if o.crds != nil {
		c.InstallCRDs(t, *o.crds)
	}
	return c
}

func (c *Cluster) stop(t testing.TB) {
	for i := len(c.processes) - 1; i >= 0; i-- {
		p := c.processes[i]
		if t.Failed() {
			t.Logf("kubeapi: %s log tail:\n%s", p.name, p.logTail(15))
		}
		p.stop(stopGrace)
	}
	c.processes = nil
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Errorf("kubeapi: removing %s: %v", c.Dir, err)
	}
}

// startWithRetry starts a daemon on fresh ports, retrying when it loses a
// port race with another process.
func (c *Cluster) startWithRetry(name string, nPorts int, start func(ports []int) (*process, error)) (*process, error) {
	var lastErr error
	for try := 0; try < startTries; try++ {
		ports, err := freePorts(nPorts)
		if err != nil {
			return nil, err
		}
		p, err := start(ports)
		if err == nil {
			c.processes = append(c.processes, p)
			return p, nil
		}
		lastErr = err
		if p != nil {
			p.stop(stopGrace)
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("starting %s: %w", name, lastErr)
}

func (c *Cluster) startEtcd() error {
	_, err := c.startWithRetry("etcd", 2, func(ports []int) (*process, error) {
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		p, err := startProcess(c.Dir, "etcd", EtcdPath,
			"--name=default",
			"--data-dir="+filepath.Join(c.Dir, "etcd"),
			"--listen-client-urls="+client, "--advertise-client-urls="+client,
			"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
			"--initial-cluster=default="+peer,
			// Test data need not survive a crash; fsync dominates etcd's latency.
			"--unsafe-no-fsync",
			"--logger=zap", "--log-level=warn",
		)
		if err != nil {
			return nil, err
		}
		err = waitFor(p, startTimeout, func() bool {
			resp, err := http.Get(client + "/health")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if err == nil {
			c.EtcdURL = client
		}
		return p, err
	})
	return err
}

func (c *Cluster) startAPIServer(o options) error {
	admission := "--disable-admission-plugins=ServiceAccount"
	if o.controllerManager {
		admission = "--enable-admission-plugins=ServiceAccount"
	}
	_, err := c.startWithRetry("kube-apiserver", 1, func(ports []int) (*process, error) {
		host := "https://127.0.0.1:" + strconv.Itoa(ports[0])
		args := []string{
			"--etcd-servers=" + c.EtcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
			"--tls-cert-file=" + c.pki.ServingCert,
			"--tls-private-key-file=" + c.pki.ServingKey,
			"--client-ca-file=" + c.pki.CACert,
			"--service-account-key-file=" + c.pki.SAPub,
			"--service-account-signing-key-file=" + c.pki.SAKey,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-cluster-ip-range=" + o.serviceCIDRs,
			"--authorization-mode=Node,RBAC",
			"--allow-privileged=true",
			admission,
			"--profiling=false",
			// The advertise address is loopback, which the kubernetes
			// service's Endpoints may not hold; nothing in-cluster uses it.
			"--endpoint-reconciler-type=none",
		}
		args = append(args, o.apiserverArgs...)
		p, err := startProcess(c.Dir, "kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"), args...)
		if err != nil {
			return nil, err
		}
		if err := c.setClients(host); err != nil {
			return p, err
		}
		err = waitFor(p, startTimeout, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err == nil && strings.TrimSpace(string(body)) == "ok"
		})
		return p, err
	})
	return err
}

// setClients builds the admin rest.Config, clientsets and kubeconfig file.
func (c *Cluster) setClients(host string) error {
	c.Host = host
	c.Config = &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.caPEM,
			CertData: c.pki.adminCertPEM,
			KeyData:  c.pki.adminKeyPEM,
		},
		QPS:   200,
		Burst: 400,
	}
	var err error
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.Policy, err = npclient.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tierflow-test"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: c.pki.caPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.pki.adminCertPEM, ClientKeyData: c.pki.adminKeyPEM}
	kc.Contexts["tierflow-test"] = &clientcmdapi.Context{Cluster: "tierflow-test", AuthInfo: "admin"}
	kc.CurrentContext = "tierflow-test"
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	return clientcmd.WriteToFile(*kc, c.Kubeconfig)
}

func (c *Cluster) startControllerManager(serviceCIDRs string) error {
	_, err := c.startWithRetry("kube-controller-manager", 1, func(ports []int) (*process, error) {
		p, err := startProcess(c.Dir, "kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"),
			"--kubeconfig="+c.Kubeconfig,
			"--authentication-kubeconfig="+c.Kubeconfig,
			"--authorization-kubeconfig="+c.Kubeconfig,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(ports[0]),
			"--service-account-private-key-file="+c.pki.SAKey,
			"--root-ca-file="+c.pki.CACert,
			"--cluster-signing-cert-file="+c.pki.CACert,
			"--cluster-signing-key-file="+c.pki.CAKey,
			"--service-cluster-ip-range="+serviceCIDRs,
			"--controllers=*",
			"--profiling=false",
		)
		if err != nil {
			return nil, err
		}
		// The service-account controller creating "default" shows the
		// controllers run, and pods can be admitted from then on.
		err = waitFor(p, startTimeout, func() bool {
			_, err := c.Kube.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
			return err == nil
		})
		return p, err
	})
	return err
}

func (c *Cluster) startScheduler() error {
	_, err := c.startWithRetry("kube-scheduler", 1, func(ports []int) (*process, error) {
		port := strconv.Itoa(ports[0])
		p, err := startProcess(c.Dir, "kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"),
			"--kubeconfig="+c.Kubeconfig,
			"--authentication-kubeconfig="+c.Kubeconfig,
			"--authorization-kubeconfig="+c.Kubeconfig,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port="+port,
			"--profiling=false",
		)
		if err != nil {
			return nil, err
		}
		insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		err = waitFor(p, startTimeout, func() bool {
			resp, err := insecure.Get("https://127.0.0.1:" + port + "/healthz")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		return p, err
	})
	return err
}

// ConfigFor returns a rest.Config authenticating as user in groups with a
// fresh client certificate, for tests of RBAC (the admin Config bypasses
// authorization as a member of system:masters).
func (c *Cluster) ConfigFor(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	certPEM, keyPEM, err := c.pki.clientCert(user, groups)
	if err != nil {
		t.Fatalf("kubeapi: issuing a client certificate for %s: %v", user, err)
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg
}

// Kubectl runs the cluster's kubectl with the admin kubeconfig and returns
// its combined output, failing the test when it fails.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// CreateNamespace creates a namespace with labels, failing the test on error.
func (c *Cluster) CreateNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.Name, ns.Labels = name, labels
	if _, err := c.Kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}
