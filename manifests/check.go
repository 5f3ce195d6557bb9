package manifests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/controller/leaderendpoints"
)

// Names the parts use and Check relies on.
const (
	Namespace        = "kube-system"
	ConfigMapName    = "tierflow-config"
	ControllerName   = "tierflow-controller"
	AgentName        = "tierflow-agent"
	TLSSecretName    = "tierflow-controller-tls"
	ControllerKey    = "controller.yaml"
	AgentKey         = "agent.yaml"
	checkNodeName    = "check-node"
	checkPodName     = "check-pod"
	checkClusterIP   = "10.96.100.100"
	checkPodIPs      = "10.0.0.5,fd00::5"
	controllerCName  = "controller"
	agentCName       = "agent"
	installCNICName  = "install-cni"
	ovsCName         = "ovs"
	metricsPortName  = "metrics"
	agentsPortName   = leaderendpoints.PortAgents
	queryPortName    = leaderendpoints.PortQuery
	leaseRoleSuffix  = "-leader-election"
	serviceDNSSuffix = ".svc"
)

// Checked is what Check found: every object, and the configuration each
// component would load.
type Checked struct {
	Objects    []*unstructured.Unstructured
	Controller *config.Controller
	Agent      *config.Agent
	InstallCNI *config.Agent
}

// Check decodes a rendered manifest and verifies that the configuration
// every tierflow container would load (its --config file from the
// ConfigMap, its environment, its arguments) is accepted by pkg/config,
// that the files and sockets the configuration names are mounted where the
// components need them, and that names shared between objects agree.
//
// It sets and restores process environment variables (pkg/config reads
// the environment), so it must not run concurrently with code that reads
// TIERFLOW_* or NODE_NAME.
func Check(rendered []byte) (*Checked, error) {
	c, objects, err := decode(rendered)
	if err != nil {
		return nil, err
	}
	res := &Checked{Objects: objects}
	if err := c.run(res); err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	return res, nil
}

// decode splits a rendered manifest into its objects and decodes those of
// the kinds the checks read (newTyped), strictly.
func decode(rendered []byte) (*checker, []*unstructured.Unstructured, error) {
	docs, err := documents(rendered)
	if err != nil {
		return nil, nil, fmt.Errorf("manifests: %w", err)
	}
	c := &checker{typed: map[string]runtime.Object{}}
	var objects []*unstructured.Unstructured
	for _, d := range docs {
		obj := &unstructured.Unstructured{}
		if err := yamlToUnstructured(d, obj); err != nil {
			return nil, nil, err
		}
		objects = append(objects, obj)
		key := obj.GetKind() + "/" + obj.GetNamespace() + "/" + obj.GetName()
		if _, dup := c.typed[key]; dup {
			return nil, nil, fmt.Errorf("manifests: %s appears twice", key)
		}
		c.typed[key] = nil
		if typed := newTyped(obj.GetKind()); typed != nil {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, typed, true); err != nil {
				return nil, nil, fmt.Errorf("manifests: %s: %w", key, err)
			}
			c.typed[key] = typed
		}
	}
	return c, objects, nil
}

func newTyped(kind string) runtime.Object {
	switch kind {
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "Service":
		return &corev1.Service{}
	case "ServiceAccount":
		return &corev1.ServiceAccount{}
	case "Deployment":
		return &appsv1.Deployment{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	case "Role":
		return &rbacv1.Role{}
	case "RoleBinding":
		return &rbacv1.RoleBinding{}
	case "ClusterRole":
		return &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	}
	return nil
}

type checker struct {
	typed map[string]runtime.Object
}

func get[T runtime.Object](c *checker, kind, ns, name string) (T, error) {
	var zero T
	o, ok := c.typed[kind+"/"+ns+"/"+name]
	if !ok || o == nil {
		return zero, fmt.Errorf("%s %s/%s is missing", kind, ns, name)
	}
	return o.(T), nil
}

func (c *checker) run(res *Checked) error {
	cm, err := get[*corev1.ConfigMap](c, "ConfigMap", Namespace, ConfigMapName)
	if err != nil {
		return err
	}
	svc, err := get[*corev1.Service](c, "Service", Namespace, ControllerName)
	if err != nil {
		return err
	}
	dep, err := get[*appsv1.Deployment](c, "Deployment", Namespace, ControllerName)
	if err != nil {
		return err
	}
	ds, err := get[*appsv1.DaemonSet](c, "DaemonSet", Namespace, AgentName)
	if err != nil {
		return err
	}
	serviceEnv := c.serviceEnv()

	// The controller.
	pod := &dep.Spec.Template.Spec
	ctr, err := container(pod.Containers, controllerCName)
	if err != nil {
		return fmt.Errorf("Deployment %s: %w", ControllerName, err)
	}
	var ctl config.Controller
	if err := loadConfig(pod, ctr, cm, serviceEnv, func(cmd *cobra.Command) func() error {
		b := config.BindController(cmd)
		return func() error {
			cfg, err := b.Load()
			if err == nil {
				ctl = *cfg
			}
			return err
		}
	}); err != nil {
		return fmt.Errorf("Deployment %s container %s: %w", ControllerName, ctr.Name, err)
	}
	res.Controller = &ctl
	if ctl.Identity != checkPodName {
		return fmt.Errorf("Deployment %s: the controller's identity must come from metadata.name (env %s), got %q", ControllerName, config.PodNameEnv, ctl.Identity)
	}
	if ctl.Kubeconfig != "" {
		return fmt.Errorf("the controller's kubeconfig must be empty in the cluster (in-cluster service account), got %q", ctl.Kubeconfig)
	}
	for _, f := range []string{ctl.TLSCertFile, ctl.TLSKeyFile} {
		if err := secretFile(pod, ctr, f, TLSSecretName); err != nil {
			return fmt.Errorf("Deployment %s: %w", ControllerName, err)
		}
	}
	if err := portMatches(ctr, agentsPortName, ctl.AgentListenAddress, "agentListenAddress"); err != nil {
		return fmt.Errorf("Deployment %s: %w", ControllerName, err)
	}
	if err := portMatches(ctr, metricsPortName, ctl.MetricsAddress, "metricsAddress"); err != nil {
		return fmt.Errorf("Deployment %s: %w", ControllerName, err)
	}
	if ctl.QueryAddress != "" {
		if err := portMatches(ctr, queryPortName, ctl.QueryAddress, "queryAddress"); err != nil {
			return fmt.Errorf("Deployment %s: %w", ControllerName, err)
		}
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].Name != agentsPortName {
		return fmt.Errorf("Service %s: its first port must be named %q, like the leader's EndpointSlice port (agents read TIERFLOW_CONTROLLER_SERVICE_PORT)", ControllerName, agentsPortName)
	}
	if ctl.QueryAddress != "" && !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == queryPortName }) {
		return fmt.Errorf("Service %s has no port named %q (the leader's query API)", ControllerName, queryPortName)
	}
	if len(svc.Spec.Selector) > 0 {
		return fmt.Errorf("Service %s must have no selector: the leader writes its EndpointSlices (a selector would make every Ready replica, the follower too, an endpoint for agents)", ControllerName)
	}
	if err := c.checkLease(ctl); err != nil {
		return err
	}
	if err := c.checkServiceAccount(pod.ServiceAccountName); err != nil {
		return fmt.Errorf("Deployment %s: %w", ControllerName, err)
	}
	if err := c.checkLeaderService(pod, ctr, ctl, svc); err != nil {
		return fmt.Errorf("Deployment %s: %w", ControllerName, err)
	}
	if err := c.checkTierctl(pod, ctr, ctl); err != nil {
		return fmt.Errorf("Deployment %s: tierctl in the controller's pods: %w", ControllerName, err)
	}

	// The agent and its CNI installer.
	pod = &ds.Spec.Template.Spec
	if !pod.HostNetwork || !dep.Spec.Template.Spec.HostNetwork {
		return fmt.Errorf("the agent and the controller must run on the host network")
	}
	agentCtr, err := container(pod.Containers, agentCName)
	if err != nil {
		return fmt.Errorf("DaemonSet %s: %w", AgentName, err)
	}
	installCtr, err := container(pod.InitContainers, installCNICName)
	if err != nil {
		return fmt.Errorf("DaemonSet %s init containers: %w", AgentName, err)
	}
	ovsCtr, err := container(pod.Containers, ovsCName)
	if err != nil {
		return fmt.Errorf("DaemonSet %s: %w", AgentName, err)
	}
	loadAgent := func(ctr *corev1.Container, into *config.Agent) error {
		return loadConfig(pod, ctr, cm, serviceEnv, func(cmd *cobra.Command) func() error {
			b := config.BindAgent(cmd)
			return func() error {
				cfg, err := b.Load()
				if err == nil {
					*into = *cfg
				}
				return err
			}
		})
	}
	var agent, install config.Agent
	if err := loadAgent(agentCtr, &agent); err != nil {
		return fmt.Errorf("DaemonSet %s container %s: %w", AgentName, agentCtr.Name, err)
	}
	if err := loadAgent(installCtr, &install); err != nil {
		return fmt.Errorf("DaemonSet %s init container %s: %w", AgentName, installCtr.Name, err)
	}
	res.Agent, res.InstallCNI = &agent, &install
	if agent.NodeName != checkNodeName || install.NodeName != checkNodeName {
		return fmt.Errorf("DaemonSet %s: the node name must come from spec.nodeName", AgentName)
	}
	host, port, _ := net.SplitHostPort(agent.ControllerAddress)
	if host != checkClusterIP || port != strconv.Itoa(int(svc.Spec.Ports[0].Port)) {
		return fmt.Errorf("DaemonSet %s: controllerAddress %s does not resolve to the Service %s", AgentName, agent.ControllerAddress, ControllerName)
	}
	if want := ControllerName + "." + Namespace + serviceDNSSuffix; agent.ControllerServerName != want {
		return fmt.Errorf("DaemonSet %s: controllerServerName %q must be the Service's name %q (the certificate's)", AgentName, agent.ControllerServerName, want)
	}
	if err := secretFile(pod, agentCtr, agent.ControllerCAFile, TLSSecretName); err != nil {
		return fmt.Errorf("DaemonSet %s: %w", AgentName, err)
	}
	if err := tokenFile(pod, agentCtr, agent.TokenFile, ctl.AgentTokenAudience); err != nil {
		return fmt.Errorf("DaemonSet %s: %w", AgentName, err)
	}
	// tierflow-cni runs on the host and reaches OVSDB at the path in the
	// conflist: the socket directory must be the same on the host, in the
	// OVS container and in the agent container.
	sockDir := filepath.Dir(agent.OVSDBSocketPath())
	for _, ctr := range []*corev1.Container{agentCtr, ovsCtr} {
		if err := hostPathAt(pod, ctr, sockDir); err != nil {
			return fmt.Errorf("DaemonSet %s: OVSDB socket directory: %w", AgentName, err)
		}
	}
	if filepath.Dir(agent.OpenFlowSocketPath()) != sockDir {
		return fmt.Errorf("DaemonSet %s: the OpenFlow socket %s is not in the shared directory %s", AgentName, agent.OpenFlowSocketPath(), sockDir)
	}
	if err := hostPathUnder(pod, agentCtr, agent.StateDir); err != nil {
		return fmt.Errorf("DaemonSet %s: stateDir must survive restarts: %w", AgentName, err)
	}
	for _, dir := range []string{install.CNI.ConfDir, install.CNI.BinDir} {
		if err := hostPathAt(pod, installCtr, dir); err != nil {
			return fmt.Errorf("DaemonSet %s: CNI directory: %w", AgentName, err)
		}
	}
	if install.CNI != agent.CNI || install.BridgeName != agent.BridgeName || install.OVSDBSocket != agent.OVSDBSocket {
		return fmt.Errorf("DaemonSet %s: the CNI installer and the agent see different configurations", AgentName)
	}
	if err := portMatches(agentCtr, metricsPortName, agent.MetricsAddress, "metricsAddress"); err != nil {
		return fmt.Errorf("DaemonSet %s: %w", AgentName, err)
	}
	if err := c.checkServiceAccount(pod.ServiceAccountName); err != nil {
		return fmt.Errorf("DaemonSet %s: %w", AgentName, err)
	}
	if want := ds.Namespace + "/" + pod.ServiceAccountName; ctl.AgentServiceAccount != want {
		return fmt.Errorf("the controller accepts agents of service account %s but the DaemonSet runs as %s", ctl.AgentServiceAccount, want)
	}
	return c.checkAgentWatches(pod.ServiceAccountName, agent)
}

// checkAgentWatches: the agent's service account may list and watch what
// its configuration makes it watch: Nodes for the noEncap and encap node
// networks; Services, EndpointSlices and Nodes for the Service proxy.
func (c *checker) checkAgentWatches(sa string, agent config.Agent) error {
	type res struct{ group, resource string }
	var need []res
	if agent.NodeNetwork.Mode == config.NodeNetworkNoEncap || agent.NodeNetwork.Mode == config.NodeNetworkEncap {
		need = append(need, res{"", "nodes"})
	}
	if agent.ServiceProxy.Enabled {
		need = append(need, res{"", "services"}, res{"discovery.k8s.io", "endpointslices"}, res{"", "nodes"})
	}
	for _, r := range need {
		for _, verb := range []string{"list", "watch"} {
			if !c.allows("", sa, r.group, r.resource, verb, "") {
				return fmt.Errorf("DaemonSet %s: service account %s may not %s %s (the agent's configuration watches them)", AgentName, sa, verb, r.resource)
			}
		}
	}
	return nil
}

// serviceEnv is the environment the kubelet gives pods for the Services of
// their namespace (as of pod creation), with a made-up ClusterIP.
func (c *checker) serviceEnv() map[string]string {
	env := map[string]string{}
	for key, o := range c.typed {
		svc, ok := o.(*corev1.Service)
		if !ok || !strings.HasPrefix(key, "Service/"+Namespace+"/") || len(svc.Spec.Ports) == 0 {
			continue
		}
		prefix := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_"))
		env[prefix+"_SERVICE_HOST"] = checkClusterIP
		env[prefix+"_SERVICE_PORT"] = strconv.Itoa(int(svc.Spec.Ports[0].Port))
	}
	return env
}

func container(cs []corev1.Container, name string) (*corev1.Container, error) {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i], nil
		}
	}
	return nil, fmt.Errorf("container %s is missing", name)
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// loadConfig loads a component's configuration as the container would:
// its ConfigMap file, its environment and its arguments.
func loadConfig(pod *corev1.PodSpec, ctr *corev1.Container, cm *corev1.ConfigMap, serviceEnv map[string]string, bind func(*cobra.Command) func() error) error {
	dir, err := os.MkdirTemp("", "tierflow-manifest-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The --config file comes from the ConfigMap volume it is mounted from.
	args := append([]string(nil), ctr.Args...)
	for i, a := range args {
		path, ok := strings.CutPrefix(a, "--"+config.ConfigFlag+"=")
		if !ok {
			continue
		}
		vol, rel, err := mountedAt(pod, ctr, path)
		if err != nil {
			return fmt.Errorf("--config %s: %w", path, err)
		}
		if vol.ConfigMap == nil || vol.ConfigMap.Name != cm.Name {
			return fmt.Errorf("--config %s is not on the ConfigMap %s", path, cm.Name)
		}
		key := rel
		for _, item := range vol.ConfigMap.Items {
			if item.Path == rel {
				key = item.Key
			}
		}
		data, ok := cm.Data[key]
		if !ok {
			return fmt.Errorf("--config %s: the ConfigMap has no key %s", path, key)
		}
		local := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(local, []byte(data), 0o600); err != nil {
			return err
		}
		args[i] = "--" + config.ConfigFlag + "=" + local
	}

	// The environment, expanded as the kubelet does: earlier variables of
	// the container and the service variables; unresolved references stay.
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = checkNodeName
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = checkPodName
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIPs":
			env[e.Name] = checkPodIPs
		case e.ValueFrom != nil:
			return fmt.Errorf("env %s: only spec.nodeName, metadata.name and status.podIPs references are understood by this check", e.Name)
		default:
			env[e.Name] = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				name := envRef.FindStringSubmatch(ref)[1]
				if v, ok := env[name]; ok {
					return v
				}
				if v, ok := serviceEnv[name]; ok {
					return v
				}
				return ref
			})
		}
	}
	for name, v := range serviceEnv {
		if _, ok := env[name]; !ok {
			env[name] = v
		}
	}
	return withEnv(env, func() error {
		cmd := &cobra.Command{Use: ctr.Name, SilenceErrors: true, SilenceUsage: true, Args: cobra.NoArgs}
		load := bind(cmd)
		var loadErr error
		cmd.RunE = func(*cobra.Command, []string) error { loadErr = load(); return nil }
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			return fmt.Errorf("arguments %v: %w", ctr.Args, err)
		}
		return loadErr
	})
}

// withEnv runs fn with exactly env as the TIERFLOW_*, NODE_NAME, POD_NAME
// and POD_IPS variables (others untouched), restoring the process
// environment after.
func withEnv(env map[string]string, fn func() error) error {
	saved := map[string]string{}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, config.EnvPrefix) || name == config.NodeNameEnv || name == config.PodNameEnv || name == config.PodIPsEnv {
			saved[name] = value
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		os.Setenv(k, v)
	}
	defer func() {
		for k := range env {
			os.Unsetenv(k)
		}
		for k, v := range saved {
			os.Setenv(k, v)
		}
	}()
	return fn()
}

// mountedAt finds the volume a path inside the container is on and the
// path relative to the mount.
func mountedAt(pod *corev1.PodSpec, ctr *corev1.Container, path string) (*corev1.Volume, string, error) {
	var best *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (path == mp || strings.HasPrefix(path, mp+"/")) && (best == nil || len(mp) > len(best.MountPath)) {
			best = &ctr.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, "", fmt.Errorf("%s is not on a volume of container %s", path, ctr.Name)
	}
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == best.Name {
			rel := strings.TrimPrefix(strings.TrimPrefix(path, strings.TrimSuffix(best.MountPath, "/")), "/")
			return &pod.Volumes[i], rel, nil
		}
	}
	return nil, "", fmt.Errorf("container %s mounts volume %s, which the pod does not have", ctr.Name, best.Name)
}

func secretFile(pod *corev1.PodSpec, ctr *corev1.Container, path, secret string) error {
	vol, rel, err := mountedAt(pod, ctr, path)
	if err != nil {
		return err
	}
	if vol.Secret == nil || vol.Secret.SecretName != secret {
		return fmt.Errorf("%s must come from the Secret %s", path, secret)
	}
	if len(vol.Secret.Items) > 0 && !slices.ContainsFunc(vol.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == rel }) {
		return fmt.Errorf("%s: the Secret volume %s does not project %s", path, vol.Name, rel)
	}
	return nil
}

func tokenFile(pod *corev1.PodSpec, ctr *corev1.Container, path, audience string) error {
	vol, rel, err := mountedAt(pod, ctr, path)
	if err != nil {
		return err
	}
	if vol.Projected != nil {
		for _, s := range vol.Projected.Sources {
			if t := s.ServiceAccountToken; t != nil && t.Path == rel {
				if t.Audience != audience {
					return fmt.Errorf("token %s has audience %q, the controller expects %q", path, t.Audience, audience)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("token %s is not a projected service account token", path)
}

// hostPathAt requires dir to be a hostPath volume mounted at the same path
// as on the host.
func hostPathAt(pod *corev1.PodSpec, ctr *corev1.Container, dir string) error {
	vol, rel, err := mountedAt(pod, ctr, dir)
	if err != nil {
		return err
	}
	if vol.HostPath == nil || rel != "" || filepath.Clean(vol.HostPath.Path) != filepath.Clean(dir) {
		return fmt.Errorf("%s must be mounted in container %s from the host's %s", dir, ctr.Name, dir)
	}
	return nil
}

func hostPathUnder(pod *corev1.PodSpec, ctr *corev1.Container, dir string) error {
	vol, _, err := mountedAt(pod, ctr, dir)
	if err != nil {
		return err
	}
	if vol.HostPath == nil {
		return fmt.Errorf("%s is not on a hostPath volume", dir)
	}
	return nil
}

func portMatches(ctr *corev1.Container, portName, address, key string) error {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%s %q has no port", key, address)
	}
	for _, p := range ctr.Ports {
		if p.Name == portName {
			if strconv.Itoa(int(p.ContainerPort)) != port {
				return fmt.Errorf("container port %s is %d but %s is %q", portName, p.ContainerPort, key, address)
			}
			return nil
		}
	}
	return fmt.Errorf("container %s has no port %s", ctr.Name, portName)
}

// checkLeaderService: the leader points this Service at itself, with the
// pod's addresses, and may; the follower verifies the leader with the CA
// of the TLS Secret.
func (c *checker) checkLeaderService(pod *corev1.PodSpec, ctr *corev1.Container, ctl config.Controller, svc *corev1.Service) error {
	if want := svc.Namespace + "/" + svc.Name; ctl.LeaderService != want {
		return fmt.Errorf("leaderService is %q, want the Service %s (it has no selector: the leader writes its EndpointSlices)", ctl.LeaderService, want)
	}
	if got := ctl.AdvertiseAddresses; got != checkPodIPs {
		return fmt.Errorf("advertiseAddresses must be the pod's status.podIPs (env %s), got %q", config.PodIPsEnv, got)
	}
	if ctl.QueryAddress != "" {
		if err := secretFile(pod, ctr, ctl.TLSCAFile, TLSSecretName); err != nil {
			return fmt.Errorf("tlsCAFile: %w", err)
		}
	}
	sa := pod.ServiceAccountName
	need := []struct{ group, resource, verb, name string }{
		{"", "services", "get", svc.Name},
		{"discovery.k8s.io", "endpointslices", "get", ""},
		{"discovery.k8s.io", "endpointslices", "list", ""},
		{"discovery.k8s.io", "endpointslices", "watch", ""},
		{"discovery.k8s.io", "endpointslices", "create", ""},
	}
	for _, name := range leaderendpoints.SliceNames(svc.Name) {
		need = append(need, struct{ group, resource, verb, name string }{"discovery.k8s.io", "endpointslices", "update", name},
			struct{ group, resource, verb, name string }{"discovery.k8s.io", "endpointslices", "delete", name})
	}
	for _, n := range need {
		if !c.allows(svc.Namespace, sa, n.group, n.resource, n.verb, n.name) {
			return fmt.Errorf("service account %s may not %s %s %q in %s (leaderService)", sa, n.verb, n.resource, n.name, svc.Namespace)
		}
	}
	return nil
}

// checkTierctl: tierctl run in the controller's pods (kubectl exec) reaches
// that replica's query API, trusts its certificate and may query.
func (c *checker) checkTierctl(pod *corev1.PodSpec, ctr *corev1.Container, ctl config.Controller) error {
	if ctl.QueryAddress == "" {
		return nil
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	host, port, err := net.SplitHostPort(env["TIERCTL_CONTROLLER"])
	_, queryPort, _ := net.SplitHostPort(ctl.QueryAddress)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() || port != queryPort {
		return fmt.Errorf("TIERCTL_CONTROLLER %q must be a loopback address with the port of queryAddress %q", env["TIERCTL_CONTROLLER"], ctl.QueryAddress)
	}
	if err := secretFile(pod, ctr, env["TIERCTL_CONTROLLER_CA_FILE"], TLSSecretName); err != nil {
		return fmt.Errorf("TIERCTL_CONTROLLER_CA_FILE: %w", err)
	}
	if want := ControllerName + "." + Namespace + serviceDNSSuffix; env["TIERCTL_CONTROLLER_SERVER_NAME"] != want {
		return fmt.Errorf("TIERCTL_CONTROLLER_SERVER_NAME %q must be %q (the certificate's)", env["TIERCTL_CONTROLLER_SERVER_NAME"], want)
	}
	if !c.allows(Namespace, pod.ServiceAccountName, "tierflow.io", "queries", "get", "policies") {
		return fmt.Errorf("service account %s may not get queries.tierflow.io (tierctl authenticates with its token)", pod.ServiceAccountName)
	}
	return nil
}

// allows evaluates the manifest's RBAC: whether service account ns/sa may
// verb the resource named name (empty: any) in namespace ns, through a Role
// or ClusterRole bound to it.
func (c *checker) allows(ns, sa, group, resource, verb, name string) bool {
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == Namespace
		})
	}
	matches := func(rules []rbacv1.PolicyRule) bool {
		for _, r := range rules {
			in := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
			if in(r.APIGroups, group) && in(r.Resources, resource) && in(r.Verbs, verb) &&
				(len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name))) {
				return true
			}
		}
		return false
	}
	roleRules := func(ref rbacv1.RoleRef, bindingNS string) []rbacv1.PolicyRule {
		if ref.Kind == "ClusterRole" {
			if r, ok := c.typed["ClusterRole//"+ref.Name].(*rbacv1.ClusterRole); ok {
				return r.Rules
			}
			return nil
		}
		if r, ok := c.typed["Role/"+bindingNS+"/"+ref.Name].(*rbacv1.Role); ok {
			return r.Rules
		}
		return nil
	}
	for _, o := range c.typed {
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			if bound(b.Subjects) && matches(roleRules(b.RoleRef, "")) {
				return true
			}
		case *rbacv1.RoleBinding:
			if b.Namespace == ns && bound(b.Subjects) && matches(roleRules(b.RoleRef, b.Namespace)) {
				return true
			}
		}
	}
	return false
}

// checkLease: the Role allows the Lease the configuration names, where it
// names it.
func (c *checker) checkLease(ctl config.Controller) error {
	if !ctl.LeaderElection.Enabled {
		return nil
	}
	le := ctl.LeaderElection
	role, err := get[*rbacv1.Role](c, "Role", le.LeaseNamespace, ControllerName+leaseRoleSuffix)
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") && slices.Contains(r.ResourceNames, le.LeaseName) && slices.Contains(r.Verbs, "update") {
			return nil
		}
	}
	return fmt.Errorf("Role %s/%s does not allow updating the Lease %s", le.LeaseNamespace, role.Name, le.LeaseName)
}

func (c *checker) checkServiceAccount(name string) error {
	if _, err := get[*corev1.ServiceAccount](c, "ServiceAccount", Namespace, name); err != nil {
		return err
	}
	for _, o := range c.typed {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok {
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == name && s.Namespace == Namespace {
					if _, err := get[*rbacv1.ClusterRole](c, "ClusterRole", "", b.RoleRef.Name); err != nil {
						return fmt.Errorf("ClusterRoleBinding %s: %w", b.Name, err)
					}
					return nil
				}
			}
		}
	}
	return fmt.Errorf("ServiceAccount %s has no ClusterRoleBinding", name)
}

func yamlToUnstructured(doc string, obj *unstructured.Unstructured) error {
	return yaml.Unmarshal([]byte(doc), &obj.Object)
}
