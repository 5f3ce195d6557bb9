// Command manifestgen renders manifests/tierflow.yaml from manifests/crds
// and manifests/parts, and the uninstall step's manifests/tierflow-cleanup.yaml
// from manifests/cleanup (package github.com/tierflow/tierflow/manifests);
// `make manifests` runs it with the make variables as flags.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tierflow/tierflow/manifests"
)

func main() {
	v := manifests.DefaultValues()
	out := flag.String("o", "-", "output file; - for stdout")
	cleanupOut := flag.String("cleanup-o", "", "output file of the cleanup manifest (uninstall step); empty: not written")
	flag.StringVar(&v.ControllerImage, "controller-image", v.ControllerImage, "tierflow-controller image")
	flag.StringVar(&v.AgentImage, "agent-image", v.AgentImage, "tierflow-agent image (agent, OVS and CNI installer)")
	flag.StringVar(&v.ImagePullPolicy, "image-pull-policy", v.ImagePullPolicy, "Always, IfNotPresent or Never")
	flag.StringVar(&v.DatapathType, "datapath-type", v.DatapathType, "OVS datapath: system or netdev")
	flag.StringVar(&v.LogLevel, "log-level", v.LogLevel, "debug, info, warn or error (both components)")
	flag.IntVar(&v.AgentPort, "agent-port", v.AgentPort, "port the controller serves agents on")
	flag.IntVar(&v.ControllerMetricsPort, "controller-metrics-port", v.ControllerMetricsPort, "controller /metrics, /healthz, /readyz port (host network)")
	flag.IntVar(&v.AgentMetricsPort, "agent-metrics-port", v.AgentMetricsPort, "agent /metrics, /healthz, /readyz port (host network)")
	flag.IntVar(&v.QueryPort, "query-port", v.QueryPort, "controller's query API port for tierctl (host network, every address; in the Service too)")
	flag.IntVar(&v.PodMTU, "pod-mtu", v.PodMTU, "MTU of pod interfaces; 0 keeps the kernel default (encap: the node's interface's MTU minus the tunnel overhead)")
	flag.StringVar(&v.NodeNetworkMode, "node-network-mode", v.NodeNetworkMode, "encap (a tunnel between the nodes' InternalIPs) or noEncap (routes via them; L2-adjacent nodes)")
	flag.StringVar(&v.TunnelType, "tunnel-type", v.TunnelType, "encap: geneve or vxlan")
	flag.StringVar(&v.ControllerMemoryRequest, "controller-memory-request", v.ControllerMemoryRequest, "controller container's memory request")
	flag.StringVar(&v.ControllerMemoryLimit, "controller-memory-limit", v.ControllerMemoryLimit, "controller container's memory limit (GOMEMLIMIT is 90% of it)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %v", flag.Args()))
	}
	data, err := manifests.Render(v)
	if err != nil {
		fail(err)
	}
	if *out == "-" {
		_, err = os.Stdout.Write(data)
	} else {
		err = writeAtomic(*out, data)
	}
	if err != nil {
		fail(err)
	}
	if *cleanupOut != "" {
		cleanup, err := manifests.RenderCleanup(v)
		if err != nil {
			fail(err)
		}
		if err := writeAtomic(*cleanupOut, cleanup); err != nil {
			fail(err)
		}
	}
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".manifestgen-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "manifestgen:", err)
	os.Exit(1)
}
