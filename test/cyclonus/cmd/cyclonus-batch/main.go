// Command cyclonus-batch is `cyclonus generate` (v0.5.6, the same
// generator, model and JUnit report, used as a library; its interpreter
// with one fix, below) with cyclonus's batch prober switched on, which its
// command line leaves out.
//
// Why: cyclonus probes every pair of a step by its own exec into the
// source pod (9 pods x 9 pods x 2 ports x 2 protocols: 324 execs a step).
// On a real cluster each exec goes apiserver → kubelet → containerd → runc
// and costs a few hundred milliseconds of CPU, so on this machine's two
// cores a case took about a minute. Batched, each source pod gets one exec
// of cyclonus's worker (/worker in the cyclonus-worker image,
// cmd/cyclonus-worker, which runs the same `agnhost connect` per
// destination inside the pod, all at once, with a one-second connect
// timeout and one retry of a failed connection): 9 execs a step. What a case asserts is unchanged: every
// pair on every port and protocol is probed and compared with cyclonus's
// model, and a connection that should be denied but connects fails the
// case on every try.
//
// Mid-case pods: the cases are run by this command's interpreter
// (execute.go), cyclonus's own step by step except that a pod a step
// creates or relabels is probed through its Service's ClusterIP with
// --destination-type=service-ip, where cyclonus's would probe an empty
// address.
//
// The flags are those of `cyclonus generate` that tierflow's suites use;
// the cluster is KUBECONFIG's.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/connectivity"
	"github.com/mattfenwick/cyclonus/pkg/connectivity/probe"
	"github.com/mattfenwick/cyclonus/pkg/generator"
	"github.com/mattfenwick/cyclonus/pkg/kube"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cyclonus-batch:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		protocols    = flag.String("server-protocol", "tcp,udp", "protocols the pods serve (comma-separated)")
		destination  = flag.String("destination-type", "pod-ip", "what probes connect to: "+strings.Join(generator.AllProbeModes, ", "))
		include      = flag.String("include", "", "run only cases with any of these tags (comma-separated; empty: all)")
		exclude      = flag.String("exclude", "multi-peer,upstream-e2e,example", "leave out cases with any of these tags (comma-separated)")
		ignoreLoop   = flag.Bool("ignore-loopback", false, "leave a pod's traffic to itself out of the comparison")
		cleanup      = flag.Bool("cleanup-namespaces", false, "delete the namespaces at the end")
		perturbation = flag.Int("perturbation-wait-seconds", 5, "seconds between a change and its probe")
		retries      = flag.Int("retries", 1, "probes of a step repeated while they differ from the model")
		junit        = flag.String("junit-results-file", "", "JUnit report")
		qps          = flag.Float64("kube-api-qps", 50, "client rate limit (client-go's default of 5 makes each case's reset wait)")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags only)", flag.Args())
	}
	logrus.SetLevel(logrus.InfoLevel)

	tags := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	includeTags, excludeTags := tags(*include), tags(*exclude)
	if err := generator.ValidateTags(append(append([]string{}, includeTags...), excludeTags...)); err != nil {
		return err
	}
	mode, err := generator.ParseProbeMode(*destination)
	if err != nil {
		return err
	}
	var serverProtocols []v1.Protocol
	for _, p := range tags(*protocols) {
		proto, err := kube.ParseProtocol(p)
		if err != nil {
			return err
		}
		serverProtocols = append(serverProtocols, proto)
	}

	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return err
	}
	config.QPS, config.Burst = float32(*qps), int(2**qps)
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	k8s := kubeNoTTY{&kube.Kubernetes{ClientSet: clientset, RestConfig: config}}

	namespaces := []string{"x", "y", "z"}
	const batchJobs = true
	resources, err := probe.NewDefaultResources(k8s, namespaces, []string{"a", "b", "c"}, []int{80, 81},
		serverProtocols, nil, 120, batchJobs, "registry.k8s.io")
	if err != nil {
		return err
	}
	fmt.Printf("resources:\n%s\n", resources.RenderTable())
	model := &probe.JobBuilder{}
	// 9 workers: one per source pod of a step (cyclonus's own for batches).
	interp := &interpreter{
		k8s: k8s, resources: resources, model: model,
		prober:         probe.NewKubeBatchRunner(k8s, 9, model),
		retries:        *retries,
		perturbation:   time.Duration(*perturbation) * time.Second,
		ignoreLoopback: *ignoreLoop,
	}
	printer := &connectivity.Printer{IgnoreLoopback: *ignoreLoop, JunitResultsFile: *junit}

	zc, err := resources.GetPod("z", "c")
	if err != nil {
		return err
	}
	const allowDNS = true
	cases := generator.NewTestCaseGenerator(allowDNS, zc.IP, namespaces, includeTags, excludeTags).GenerateTestCases()
	fmt.Printf("testing %d cases, destination %s\n", len(cases), mode)
	for _, c := range cases {
		for _, step := range c.Steps {
			step.Probe.Mode = mode
		}
	}
	for i, c := range cases {
		fmt.Printf("starting test case #%d\n", i+1)
		result := interp.execute(c)
		if result.Err != nil {
			printer.PrintSummary() // the report of the cases before
			return fmt.Errorf("case #%d (%s): %w", i+1, c.Description, result.Err)
		}
		printer.PrintTestCaseResult(result)
		fmt.Printf("finished policy #%d\n", i+1)
	}
	printer.PrintSummary()

	if *cleanup {
		for _, ns := range namespaces {
			if err := k8s.DeleteNamespace(ns); err != nil {
				logrus.Warnf("%v", err)
			}
		}
	}
	return nil
}
