// Command tierflow-podrunner runs what the tierflow test bed needs in place
// of a kubelet and containers:
//
//	tierflow-podrunner node --kubeconfig K --node N --node-ip IP [--node-netns NS] --cni-bin-dir D --cni-config F --state-dir S
//	    the node runtime of one kwok node (package test/testbed/noderuntime)
//	tierflow-podrunner serve --pod-file F [--listen-ip IP,...]
//	    a pod's servers, run inside its network namespace; prints READY
//	    once every listener is bound, stops on SIGTERM
//	tierflow-podrunner agnhost SUBCOMMAND ...
//	    agnhost-compatible commands (connect, serve-hostname, porter,
//	    netexec, pause) in the current network namespace
//
// Installed (or symlinked) as /agnhost it is what `kubectl exec POD --
// /agnhost connect ...` runs: kwok executes exec commands on the host with
// the environment of the pod's Exec object, so when TIERFLOW_NETNS is set
// the command re-executes itself inside that network namespace (`ip netns
// exec`), and stdout, stderr and exit status are the agnhost command's own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tierflow/tierflow/test/ovsenv"
	"github.com/tierflow/tierflow/test/testbed/agnhost"
	"github.com/tierflow/tierflow/test/testbed/noderuntime"
)

func main() {
	if filepath.Base(os.Args[0]) == "agnhost" {
		os.Exit(agnhostInPod(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tierflow-podrunner node|serve|agnhost ...")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "node":
		os.Exit(node(args))
	case "serve":
		os.Exit(serve(args))
	case "agnhost":
		os.Exit(agnhost.Main(context.Background(), args, hostname(), os.Stdout, os.Stderr))
	default:
		fmt.Fprintf(os.Stderr, "tierflow-podrunner: unknown command %q (want node, serve or agnhost)\n", os.Args[1])
		os.Exit(2)
	}
}

// agnhostInPod runs an agnhost command inside the pod's network namespace
// named by the Exec object's environment.
func agnhostInPod(args []string) int {
	netns := os.Getenv(noderuntime.EnvNetns)
	if netns == "" {
		return agnhost.Main(context.Background(), args, hostname(), os.Stdout, os.Stderr)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "UNKNOWN: %v\n", err)
		return 1
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		fmt.Fprintf(os.Stderr, "UNKNOWN: iproute2 is required: %v\n", err)
		return 1
	}
	argv := append([]string{"ip", "netns", "exec", netns, self, "agnhost"}, args...)
	err = syscall.Exec(ipPath, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "UNKNOWN: exec %s: %v\n", strings.Join(argv, " "), err)
	return 1
}

func hostname() string {
	if h := os.Getenv(noderuntime.EnvHostname); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	podFile := fs.String("pod-file", "", "the pod (JSON) whose servers to run")
	listenIPs := fs.String("listen-ip", "", "addresses to bind, comma-separated (default: all); a hostNetwork pod binds its node's")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (the DNS stand-in reads Services)")
	hostNetns := fs.String("host-netns", "", "the node's network namespace (a /proc/PID/ns/net path), where the API server is reached from a pod's namespace")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	data, err := os.ReadFile(*podFile)
	if err != nil {
		logger.Print(err)
		return 1
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(data, pod); err != nil {
		logger.Printf("decode %s: %v", *podFile, err)
		return 1
	}
	eps, warnings, err := noderuntime.PodEndpoints(pod)
	for _, w := range warnings {
		logger.Printf("warning: %s", w)
	}
	if err != nil {
		logger.Print(err)
		return 1
	}
	var ips []string
	if *listenIPs != "" {
		ips = strings.Split(*listenIPs, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var lookup agnhost.ServiceLookup
	if *kubeconfig != "" {
		kube, err := apiClient(*kubeconfig, *hostNetns)
		if err == nil {
			lookup, err = noderuntime.ServiceLookup(ctx, kube)
		}
		if err != nil {
			logger.Print(err)
			return 1
		}
	}
	servers, err := agnhost.StartWith(eps, noderuntime.PodHostname(pod), logger, lookup, ips...)
	if err != nil {
		logger.Print(err)
		return 1
	}
	for _, ep := range eps {
		logger.Printf("serving %s", ep)
	}
	fmt.Println(noderuntime.ReadyLine)
	<-ctx.Done()
	servers.Close()
	return 0
}

// apiClient is a client of the API server in kubeconfig. The servers run
// in the pod's network namespace, where the API server (on the host's
// loopback) is out of reach: with hostNetns the client's connections are
// made in that namespace instead.
func apiClient(kubeconfig, hostNetns string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if hostNetns != "" {
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ovsenv.InNetns(hostNetns, func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}
	}
	return kubernetes.NewForConfig(cfg)
}

func node(args []string) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster")
	nodeName := fs.String("node", "", "the kwok node whose pods to run")
	nodeIPs := fs.String("node-ip", "", "the node's addresses, comma-separated")
	nodeNetns := fs.String("node-netns", "", "the node's own network namespace (ip netns name), where tierflow-cni and hostNetwork pods run; empty: this one")
	cniBinDir := fs.String("cni-bin-dir", "", "directory with tierflow-cni and host-local")
	cniConfig := fs.String("cni-config", "", "tierflow-cni network configuration file")
	stateDir := fs.String("state-dir", "", "directory for per-pod state")
	clusterDNS := fs.String("cluster-dns", "", "the cluster DNS Service's address, for the pods' resolv.conf")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := log.New(os.Stderr, "noderuntime["+*nodeName+"] ", log.LstdFlags)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		logger.Print(err)
		return 1
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Print(err)
		return 1
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		logger.Print(err)
		return 1
	}
	conf, err := os.ReadFile(*cniConfig)
	if err != nil {
		logger.Print(err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		logger.Print(err)
		return 1
	}
	var ips []string
	if *nodeIPs != "" {
		ips = strings.Split(*nodeIPs, ",")
	}
	rt, err := noderuntime.New(noderuntime.Config{
		NodeName: *nodeName, NodeIPs: ips, NodeNetns: *nodeNetns, Kube: kube, Dynamic: dyn,
		CNIBinDir: *cniBinDir, CNIConfig: conf, PodRunner: self, StateDir: *stateDir, Logger: logger,
		ClusterDNS: *clusterDNS, Kubeconfig: *kubeconfig,
	})
	if err != nil {
		logger.Print(err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := rt.Run(ctx); err != nil && ctx.Err() == nil {
		logger.Print(err)
		return 1
	}
	return 0
}
