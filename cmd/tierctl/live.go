package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/pkg/queryapi"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// liveOptions are the flags of the commands that ask a running controller
// or agent.
//
// The controller is reached directly (--controller HOST:PORT, or
// TIERCTL_CONTROLLER): its query API is HTTPS and takes the caller's
// Kubernetes bearer token, from --token or from the kubeconfig user
// (--kubeconfig, --context as kubectl reads them). Agents are reached
// through the controller when it is given and no --agent-socket is (the
// controller forwards the queries over the agents' distribution streams),
// else on their node-local unix sockets (--agent-socket), running
// ovs-ofctl/ovs-appctl locally: on the node, or in the agent's pod.
type liveOptions struct {
	kubeconfig   string
	context      string
	namespace    string
	controller   string
	token        string
	caFile       string
	serverName   string
	insecure     bool
	agentSockets []string
	ovsRundir    string
	vswitchdCtl  string
	timeout      time.Duration
}

func (o *liveOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (as kubectl; default $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "the kubeconfig context to use")
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace: filters get; the namespace of pod names given without one (default: the context's, or default)")
	// Flags defaulting to an environment variable are registered with an
	// empty default and filled from the environment after parsing
	// (fromEnv): --help prints defaults, and $TIERCTL_TOKEN is a secret.
	f.StringVar(&o.controller, "controller", "", "the controller's query API, HOST:PORT or https://HOST:PORT (default $TIERCTL_CONTROLLER)")
	f.StringVar(&o.token, "token", "", "bearer token for the controller (default $TIERCTL_TOKEN, else the kubeconfig user's token)")
	f.StringVar(&o.caFile, "controller-ca-file", "", "CA certificate that signed the controller's serving certificate (default $TIERCTL_CONTROLLER_CA_FILE, else system roots)")
	f.StringVar(&o.serverName, "controller-server-name", "", "name to verify the controller's certificate against (default $TIERCTL_CONTROLLER_SERVER_NAME, else the host of --controller)")
	f.BoolVar(&o.insecure, "insecure-skip-tls-verify", false, "do not verify the controller's certificate (insecure)")
	f.StringArrayVar(&o.agentSockets, "agent-socket", nil, "an agent's query socket, PATH or NODE=PATH; repeatable (default $TIERCTL_AGENT_SOCKETS, comma-separated; else "+agentquery.DefaultSocket+", or through --controller when given)")
	f.StringVar(&o.ovsRundir, "ovs-rundir", "", "OVS run directory for ovs-ofctl and ovs-appctl (sets OVS_RUNDIR; default: theirs)")
	f.StringVar(&o.vswitchdCtl, "vswitchd-ctl", "", "ovs-vswitchd control socket for ovs-appctl -t (default $TIERCTL_VSWITCHD_CTL, else ovs-appctl's)")
	f.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "time limit of each request")
}

// envDefaults maps the flags whose default comes from the environment to
// their variable.
var envDefaults = []struct{ flag, env string }{
	{"controller", "TIERCTL_CONTROLLER"},
	{"token", "TIERCTL_TOKEN"},
	{"controller-ca-file", "TIERCTL_CONTROLLER_CA_FILE"},
	{"controller-server-name", "TIERCTL_CONTROLLER_SERVER_NAME"},
	{"agent-socket", "TIERCTL_AGENT_SOCKETS"},
	{"vswitchd-ctl", "TIERCTL_VSWITCHD_CTL"},
}

// fromEnv gives every flag of envDefaults not set on the command line the
// value of its environment variable. Run it after parsing, before the
// flags are read.
func fromEnv(f *pflag.FlagSet) error {
	for _, d := range envDefaults {
		fl := f.Lookup(d.flag)
		if fl == nil || fl.Changed {
			continue
		}
		vals := []string{os.Getenv(d.env)}
		if fl.Value.Type() == "stringArray" {
			vals = envList(d.env)
		}
		for _, v := range vals {
			if v == "" {
				continue
			}
			if err := f.Set(d.flag, v); err != nil {
				// The value is not shown: it may be the token.
				return fmt.Errorf("$%s: invalid value for --%s", d.env, d.flag)
			}
		}
	}
	return nil
}

// envList reads a comma-separated list from the environment (nil if unset).
func envList(name string) []string {
	var out []string
	for _, v := range strings.Split(os.Getenv(name), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// kubeToken reads the kubeconfig (only when no --token is given).
func (o *liveOptions) kubeToken() (string, error) {
	if o.token != "" {
		return o.token, nil
	}
	cfg, err := o.clientConfig().ClientConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	if cfg.BearerToken != "" {
		return cfg.BearerToken, nil
	}
	if cfg.BearerTokenFile != "" {
		b, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("kubeconfig token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", errors.New("the kubeconfig user has no token: give --token (e.g. from kubectl create token)")
}

func (o *liveOptions) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
}

// defaultNamespace is -n, else the kubeconfig context's namespace, else
// "default".
func (o *liveOptions) defaultNamespace() string {
	if o.namespace != "" {
		return o.namespace
	}
	if ns, _, err := o.clientConfig().Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

// endpoint completes a pod name without a namespace; IPs and NS/POD are
// kept as they are.
func (o *liveOptions) endpoint(s string) string {
	if s == "" || strings.Contains(s, "/") {
		return s
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return s
	}
	return o.defaultNamespace() + "/" + s
}

func (o *liveOptions) controllerClient() (*queryapi.Client, error) {
	if o.controller == "" {
		return nil, errors.New("no controller address: give --controller HOST:PORT (or set TIERCTL_CONTROLLER)")
	}
	token, err := o.kubeToken()
	if err != nil {
		return nil, err
	}
	return queryapi.NewClient(queryapi.ClientConfig{Address: o.controller, Token: token, CAFile: o.caFile,
		ServerName: o.serverName, Insecure: o.insecure, Timeout: o.timeout})
}

func (o *liveOptions) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 4*o.timeout)
}

// agentFor returns the query client of node's agent: the socket given for
// it, or the one socket given (or the default) if that agent says it is
// node's.
func (o *liveOptions) agentFor(ctx context.Context, node string) (*agentquery.Client, *agentquery.Status, error) {
	if o.viaController() {
		ctl, err := o.controllerClient()
		if err != nil {
			return nil, nil, err
		}
		c := ctl.Agent(node)
		st, err := c.Status(ctx)
		if err != nil {
			return nil, nil, err
		}
		if st.Node != node {
			// Cannot happen (the controller takes the node from the
			// agent's token); never show another node's flows.
			return nil, nil, fmt.Errorf("node %s: the controller's agent answered as node %s", node, st.Node)
		}
		return c, st, nil
	}
	var candidates []string
	for _, s := range o.agentSockets {
		if n, path, ok := strings.Cut(s, "="); ok {
			if n == node {
				candidates = []string{path}
				break
			}
			continue
		}
		candidates = append(candidates, s)
	}
	if len(o.agentSockets) == 0 {
		candidates = []string{agentquery.DefaultSocket}
	}
	if len(candidates) == 0 {
		return nil, nil, fmt.Errorf("node %s unreachable: no --agent-socket given for it", node)
	}
	var seen []string
	for _, path := range candidates {
		c := agentquery.NewClient(path)
		st, err := c.Status(ctx)
		if err != nil {
			seen = append(seen, fmt.Sprintf("%s unreachable", path))
			continue
		}
		if st.Node == node {
			return c, st, nil
		}
		seen = append(seen, fmt.Sprintf("%s is node %s's", path, st.Node))
	}
	return nil, nil, fmt.Errorf("node %s unreachable: no agent socket of that node (%s)", node, strings.Join(seen, ", "))
}

// localNode is the node of the one agent tierctl asks on a node (the one
// --agent-socket given, or the default socket): there a command needs no
// --node.
func (o *liveOptions) localNode(ctx context.Context) (string, error) {
	if o.viaController() {
		return "", errors.New("through the controller a node must be named")
	}
	if len(o.agentSockets) > 1 {
		return "", errors.New("several agent sockets are given")
	}
	path := agentquery.DefaultSocket
	if len(o.agentSockets) == 1 {
		path = o.agentSockets[0]
		if _, p, ok := strings.Cut(path, "="); ok {
			path = p
		}
	}
	st, err := agentquery.NewClient(path).Status(ctx)
	if err != nil {
		return "", fmt.Errorf("no agent on this node answers on %s: %w", path, err)
	}
	return st.Node, nil
}

// viaController says whether agents are reached through the controller
// (which forwards the queries over the agents' distribution streams): when
// a controller is given and no --agent-socket is. On the node, give
// --agent-socket (its default path too) to ask the local agent directly.
func (o *liveOptions) viaController() bool {
	return o.controller != "" && len(o.agentSockets) == 0
}

// ovsEnv is the environment of ovs-ofctl and ovs-appctl.
func (o *liveOptions) ovsEnv() []string {
	env := os.Environ()
	if o.ovsRundir != "" {
		env = append(env, "OVS_RUNDIR="+o.ovsRundir)
	}
	return env
}
