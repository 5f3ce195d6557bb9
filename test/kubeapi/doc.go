// Package kubeapi runs a real Kubernetes control plane for tests: Debian's
// etcd and kube-apiserver (optionally kube-controller-manager and
// kube-scheduler) built from k8s.io/kubernetes v1.31.4 by `make
// kube-binaries`, on free loopback ports, with freshly generated
// certificates, in a private temporary directory.
//
// A test calls Start and gets a Cluster with a rest.Config, a kubeconfig
// file and clientsets; everything is stopped (process groups killed, files
// removed) by t.Cleanup. When a prerequisite is missing (etcd not installed,
// binaries cannot be built) the test fails with a message saying what to
// do; it never skips.
//
//	c := kubeapi.Start(t, kubeapi.WithCRDs())
//	c.Kube.CoreV1().Namespaces().Create(...)
//
// Config and the clientsets act as a cluster admin; ConfigFor issues a
// client certificate for any user and groups, for RBAC tests.
//
// The network-policy-api CRDs come from manifests/crds (see `make crds`).
// InstallCRDs can install them later, one kind at a time, and can strip
// their schemas so tests can create objects the real CRD validation would
// reject (to exercise a controller's own validation).
package kubeapi
