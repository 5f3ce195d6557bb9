package controller

import (
	corev1 "k8s.io/api/core/v1"
)

// Pods lists the pods of the controller's informer cache (the ones the
// engine computed groups from), for queries such as tierctl explain, with
// the fields the engine reads (see CoreTransform); callers may keep them.
func (c *Controller) Pods() ([]*corev1.Pod, error) {
	objs := c.kubeFactory.Core().V1().Pods().Informer().GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*cachedPod); ok {
			out = append(out, p.Pod())
		}
	}
	return out, nil
}
