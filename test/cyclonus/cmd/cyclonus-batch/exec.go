package main

import (
	"bytes"

	"github.com/mattfenwick/cyclonus/pkg/kube"
	"github.com/pkg/errors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// kubeNoTTY is cyclonus's client with one change: its exec asks for no
// TTY. cyclonus's asks for one (without stdin), and on the tierflow test
// bed kwok then returned an empty stdout for about one batch in three
// (the worker had printed its results; the TTY lost them), which cyclonus
// counts as every connection of the batch failed. The worker's results
// are plain JSON on stdout: a TTY adds nothing to them.
type kubeNoTTY struct {
	*kube.Kubernetes
}

// ExecuteRemoteCommand runs command in the pod's container and returns
// its stdout and stderr, how the command ended (nil: exit status 0), and
// an error when it could not be started.
func (k kubeNoTTY) ExecuteRemoteCommand(namespace, pod, container string, command []string) (string, string, error, error) {
	req := k.ClientSet.CoreV1().RESTClient().Post().
		Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(k.RestConfig, "POST", req.URL())
	if err != nil {
		return "", "", nil, errors.Wrapf(err, "unable to instantiate SPDYExecutor")
	}
	var stdout, stderr bytes.Buffer
	err = exec.Stream(remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), errors.Wrapf(err, "unable to stream command"), nil
}
