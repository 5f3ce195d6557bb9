package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NewCoreInformerFactory is the factory of the controller's core
// informers (Namespaces, Nodes, Pods, NetworkPolicies); benchmarks that
// reproduce the controller's informers use it too. Their caches keep only
// what the controller reads (CoreTransform), and they have no index:
// client-go's default informers index every object by namespace, but
// nothing here lists by namespace (the engine keeps its own indexes, and
// the caches are read by key or whole), and on a cluster of 100,000 pods
// in 25,000 namespaces that index is tens of MiB and a tenth of the
// controller's start.
func NewCoreInformerFactory(client kubernetes.Interface, resync time.Duration) informers.SharedInformerFactory {
	f := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(CoreTransform))
	// InformerFor keeps the first informer made for a type: these are what
	// f.Core()… and f.Networking()… return from now on.
	noIndex := cache.Indexers{}
	f.InformerFor(&corev1.Namespace{}, func(c kubernetes.Interface, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewNamespaceInformer(c, r, noIndex)
	})
	f.InformerFor(&corev1.Node{}, func(c kubernetes.Interface, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewNodeInformer(c, r, noIndex)
	})
	f.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewPodInformer(c, metav1.NamespaceAll, r, noIndex)
	})
	f.InformerFor(&networkingv1.NetworkPolicy{}, func(c kubernetes.Interface, r time.Duration) cache.SharedIndexInformer {
		return networkinginformers.NewNetworkPolicyInformer(c, metav1.NamespaceAll, r, noIndex)
	})
	return f
}
