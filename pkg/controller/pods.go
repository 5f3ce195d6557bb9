package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pods lists the pods of the controller's informer cache (the ones the
// engine computed groups from), for queries such as tierctl explain. The
// objects are shared with the cache: callers must not modify them.
func (c *Controller) Pods() ([]*corev1.Pod, error) {
	return c.kubeFactory.Core().V1().Pods().Lister().List(labels.Everything())
}
