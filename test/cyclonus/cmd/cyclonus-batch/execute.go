package main

import (
	"fmt"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/connectivity"
	"github.com/mattfenwick/cyclonus/pkg/connectivity/probe"
	"github.com/mattfenwick/cyclonus/pkg/generator"
	"github.com/mattfenwick/cyclonus/pkg/kube"
	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
)

// interpreter runs cyclonus's test cases as cyclonus's own interpreter
// (connectivity.Interpreter.ExecuteTestCase, v0.5.6) does, step by step
// with the same TestCaseState, model and comparison, with one difference:
// a pod a step creates or relabels keeps a Service address. cyclonus's
// TestCaseState creates a new pod's Service but leaves the pod's ServiceIP
// empty, and relabeling a pod (Pod.SetLabels) drops it, so with
// --destination-type=service-ip every probe of such a pod went to ":80"
// (the source pod itself) instead of through its Service: the pods of
// the create-namespace and create-pod cases, and y/b in the set-pod-labels
// case.
type interpreter struct {
	k8s            kube.IKubernetes
	resources      *probe.Resources
	model          *probe.JobBuilder
	prober         *probe.Runner
	retries        int
	perturbation   time.Duration
	ignoreLoopback bool
}

// execute runs one test case: reset and verify the cluster, then each
// step's actions, a wait, and the step's probe compared with the model.
func (in *interpreter) execute(tc *generator.TestCase) *connectivity.Result {
	result := &connectivity.Result{InitialResources: in.resources, TestCase: tc}
	state := &connectivity.TestCaseState{Kubernetes: in.k8s, Resources: in.resources}
	if err := state.ResetClusterState(); err != nil {
		result.Err = err
		return result
	}
	if err := state.VerifyClusterState(); err != nil {
		result.Err = err
		return result
	}
	for i, step := range tc.Steps {
		for j, action := range step.Actions {
			if err := in.do(state, action); err != nil {
				result.Err = fmt.Errorf("step %d, action %d: %w", i+1, j+1, err)
				return result
			}
		}
		logrus.Infof("step %d: waiting %v for perturbation to take effect", i+1, in.perturbation)
		time.Sleep(in.perturbation)
		result.Steps = append(result.Steps, in.probe(state, step.Probe))
	}
	return result
}

// do applies one action to the cluster and to the state the model reads.
func (in *interpreter) do(state *connectivity.TestCaseState, a *generator.Action) error {
	switch {
	case a.CreatePolicy != nil:
		return state.CreatePolicy(a.CreatePolicy.Policy)
	case a.UpdatePolicy != nil:
		return state.UpdatePolicy(a.UpdatePolicy.Policy)
	case a.DeletePolicy != nil:
		return state.DeletePolicy(a.DeletePolicy.Namespace, a.DeletePolicy.Name)
	case a.CreateNamespace != nil:
		return state.CreateNamespace(a.CreateNamespace.Namespace, a.CreateNamespace.Labels)
	case a.SetNamespaceLabels != nil:
		return state.SetNamespaceLabels(a.SetNamespaceLabels.Namespace, a.SetNamespaceLabels.Labels)
	case a.DeleteNamespace != nil:
		return state.DeleteNamespace(a.DeleteNamespace.Namespace)
	case a.ReadNetworkPolicies != nil:
		return state.ReadPolicies(a.ReadNetworkPolicies.Namespaces)
	case a.CreatePod != nil:
		return in.createPod(state, a.CreatePod.Namespace, a.CreatePod.Pod, a.CreatePod.Labels)
	case a.SetPodLabels != nil:
		return in.setPodLabels(state, a.SetPodLabels.Namespace, a.SetPodLabels.Pod, a.SetPodLabels.Labels)
	case a.DeletePod != nil:
		return state.DeletePod(a.DeletePod.Namespace, a.DeletePod.Pod)
	}
	return fmt.Errorf("action %+v does nothing this interpreter knows", a)
}

// createPod is TestCaseState.CreatePod (the pod and its Service, waiting
// for the pod's IP) plus the Service's ClusterIP for the probes.
func (in *interpreter) createPod(state *connectivity.TestCaseState, ns, name string, labels map[string]string) error {
	if err := state.CreatePod(ns, name, labels); err != nil {
		return err
	}
	pod, err := state.Resources.GetPod(ns, name)
	if err != nil {
		return err
	}
	svc, err := in.k8s.GetService(ns, pod.ServiceName())
	if err != nil {
		return err
	}
	if svc.Spec.ClusterIP == "" {
		return fmt.Errorf("service %s/%s has no ClusterIP", ns, svc.Name)
	}
	pod.ServiceIP = svc.Spec.ClusterIP
	return nil
}

// setPodLabels is TestCaseState.SetPodLabels keeping the pod's Service
// address (cyclonus's Service keeps its selector: the pod's labels when it
// was created).
func (in *interpreter) setPodLabels(state *connectivity.TestCaseState, ns, name string, labels map[string]string) error {
	old, err := state.Resources.GetPod(ns, name)
	if err != nil {
		return err
	}
	if err := state.SetPodLabels(ns, name, labels); err != nil {
		return err
	}
	pod, err := state.Resources.GetPod(ns, name)
	if err != nil {
		return err
	}
	pod.ServiceIP = old.ServiceIP
	return nil
}

// probe is one step's probe: the model's verdicts for the state's policies,
// then the cluster's, repeated up to retries times while they differ.
func (in *interpreter) probe(state *connectivity.TestCaseState, config *generator.ProbeConfig) *connectivity.StepResult {
	policy := matcher.BuildNetworkPolicies(true, state.Policies)
	step := connectivity.NewStepResult(
		probe.NewSimulatedRunner(policy, in.model).RunProbeForConfig(config, state.Resources),
		policy, append([]*networkingv1.NetworkPolicy{}, state.Policies...))
	for try := 0; try <= in.retries; try++ {
		logrus.Infof("running kube probe on try %d", try+1)
		step.AddKubeProbe(in.prober.RunProbeForConfig(config, state.Resources))
		if step.Passed(in.ignoreLoopback) {
			break
		}
	}
	return step
}
