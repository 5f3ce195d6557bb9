// Command tierflow-cluster brings the real test cluster (package
// test/cluster) up and down and loads images into it:
//
//	tierflow-cluster up   [--dir D] [--nodes N] [--name NAME] [--subnet CIDR] [--bin-dir B]
//	    builds the node and support images if needed, starts N node
//	    containers (the first runs the control plane), waits until every
//	    node registered, loads pause, agnhost and CoreDNS into them and
//	    installs CoreDNS; D/kubeconfig, D/cluster.env and D/state.json
//	    describe the cluster. Nodes are NotReady until tierflow (the
//	    network) is installed. A failed bring-up removes what it started.
//	tierflow-cluster load-images [--dir D] IMAGE...
//	    copies images from this machine's Docker into every node
//	tierflow-cluster base-images
//	    builds the offline stand-ins for tierflow's Dockerfile bases
//	    (BASE_IMAGE, GO_IMAGE) and prints them as make variables
//	tierflow-cluster down [--dir D]
//	    removes the cluster and everything it left on this machine
//
// `make cluster-up`, `make cluster-load-images`, `make base-images` and
// `make cluster-down` run these with D=_output/cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/tierflow/tierflow/test/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tierflow-cluster up|down|load-images|base-images [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "_output/cluster", "cluster directory (state, PKI, kubeconfig)")
	nodes := fs.Int("nodes", 3, "number of nodes, the control-plane node included")
	name := fs.String("name", cluster.DefaultName, "prefix of the cluster's Docker objects and node names")
	subnet := fs.String("subnet", cluster.DefaultSubnet, "the nodes' network (an IPv4 /24)")
	binDir := fs.String("bin-dir", "_output/bin", "directory of the Kubernetes, agnhost, CoreDNS and pause binaries")
	externalIP := fs.String("external-ip", cluster.DefaultExternalIP, "address put on this machine's loopback for pods to reach outside the cluster")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	bins, err := filepath.Abs(*binDir)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := log.New(os.Stderr, "tierflow-cluster: ", 0)
	switch os.Args[1] {
	case "up":
		c, err := cluster.Up(ctx, cluster.Options{Name: *name, Nodes: *nodes, Dir: abs, Subnet: *subnet, BinDir: bins, ExternalIP: *externalIP, Logf: logger.Printf})
		if err != nil {
			logger.Print(err)
			os.Exit(1)
		}
		fmt.Printf("cluster %q up: %d nodes (%s runs the control plane)\n", c.Name, len(c.Nodes), c.Nodes[0].Name)
		fmt.Printf("  kubeconfig: %s\n  source %s   # KUBECONFIG, kubectl on PATH\n", c.Kubeconfig, c.EnvFile)
		fmt.Println("  nodes are NotReady until a network is installed: see README.md, \"Install on a real cluster\"")
	case "load-images":
		c, err := cluster.Load(abs)
		if err != nil {
			logger.Printf("no cluster in %s (make cluster-up): %v", abs, err)
			os.Exit(1)
		}
		if fs.NArg() == 0 {
			logger.Print("name the images to load")
			os.Exit(2)
		}
		if err := c.LoadImages(ctx, fs.Args()...); err != nil {
			logger.Print(err)
			os.Exit(1)
		}
	case "base-images":
		base, goImage, err := cluster.BuildBaseImages(ctx, filepath.Join(filepath.Dir(abs), "cluster-build"), logger.Printf)
		if err != nil {
			logger.Print(err)
			os.Exit(1)
		}
		fmt.Printf("BASE_IMAGE=%s GO_IMAGE=%s\n", base, goImage)
	case "down":
		c, err := cluster.Load(abs)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Println("no cluster recorded in", abs)
			return
		}
		if err != nil {
			logger.Print(err)
			os.Exit(1)
		}
		if err := c.Down(ctx, logger.Printf); err != nil {
			logger.Printf("cluster %q: could not remove everything:\n%v", c.Name, err)
			os.Exit(1)
		}
		fmt.Printf("cluster %q down; no container, volume, network or cgroup left\n", c.Name)
	default:
		fmt.Fprintf(os.Stderr, "tierflow-cluster: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
