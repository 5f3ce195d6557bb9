package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/model"
)

// policyKind is one network-policy-api kind: how to find it in discovery,
// start its informer, feed the engine and write its status.
type policyKind struct {
	kind         model.PolicyKind
	groupVersion string // for discovery
	resource     string
	// newInformer registers the kind's informer with the policy factory.
	newInformer func() cache.SharedIndexInformer
	upsert      func(w compute.Writer, obj interface{})
	remove      func(w compute.Writer, name string)
	// view reads what status sync needs from a cached object.
	view func(obj interface{}) (objectView, bool)
	// updateStatus writes conditions onto a copy of a cached object.
	updateStatus func(ctx context.Context, obj interface{}, conds []metav1.Condition, fieldManager string) error

	informer     cache.SharedIndexInformer // nil until the CRD is served
	registration cache.ResourceEventHandlerRegistration
	// synced: the registration has seen the initial list and the engine
	// has applied it.
	synced       func() bool
	watchedSince time.Time
}

// objectView is the part of a policy object status sync reads.
type objectView struct {
	uid        types.UID
	generation int64
	conditions []metav1.Condition
}

func policyKinds(c *Controller) []*policyKind {
	pc := c.cfg.Policy
	v1a1 := v1alpha1.SchemeGroupVersion.String()
	v1a2 := v1alpha2.SchemeGroupVersion.String()
	return []*policyKind{
		{
			kind: model.KindAdminNetworkPolicy, groupVersion: v1a1, resource: "adminnetworkpolicies",
			newInformer: func() cache.SharedIndexInformer {
				return c.policyFactory.Policy().V1alpha1().AdminNetworkPolicies().Informer()
			},
			upsert: func(w compute.Writer, obj interface{}) {
				if o, ok := obj.(*v1alpha1.AdminNetworkPolicy); ok {
					w.UpsertAdminNetworkPolicy(o)
				}
			},
			remove: func(w compute.Writer, name string) { w.DeleteAdminNetworkPolicy(name) },
			view: func(obj interface{}) (objectView, bool) {
				o, ok := obj.(*v1alpha1.AdminNetworkPolicy)
				if !ok {
					return objectView{}, false
				}
				return objectView{o.UID, o.Generation, o.Status.Conditions}, true
			},
			updateStatus: func(ctx context.Context, obj interface{}, conds []metav1.Condition, fm string) error {
				o := obj.(*v1alpha1.AdminNetworkPolicy).DeepCopy()
				o.Status.Conditions = conds
				_, err := pc.PolicyV1alpha1().AdminNetworkPolicies().UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: fm})
				return err
			},
		},
		{
			kind: model.KindBaselineAdminNetworkPolicy, groupVersion: v1a1, resource: "baselineadminnetworkpolicies",
			newInformer: func() cache.SharedIndexInformer {
				return c.policyFactory.Policy().V1alpha1().BaselineAdminNetworkPolicies().Informer()
			},
			upsert: func(w compute.Writer, obj interface{}) {
				if o, ok := obj.(*v1alpha1.BaselineAdminNetworkPolicy); ok {
					w.UpsertBaselineAdminNetworkPolicy(o)
				}
			},
			remove: func(w compute.Writer, name string) { w.DeleteBaselineAdminNetworkPolicy(name) },
			view: func(obj interface{}) (objectView, bool) {
				o, ok := obj.(*v1alpha1.BaselineAdminNetworkPolicy)
				if !ok {
					return objectView{}, false
				}
				return objectView{o.UID, o.Generation, o.Status.Conditions}, true
			},
			updateStatus: func(ctx context.Context, obj interface{}, conds []metav1.Condition, fm string) error {
				o := obj.(*v1alpha1.BaselineAdminNetworkPolicy).DeepCopy()
				o.Status.Conditions = conds
				_, err := pc.PolicyV1alpha1().BaselineAdminNetworkPolicies().UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: fm})
				return err
			},
		},
		{
			kind: model.KindClusterNetworkPolicy, groupVersion: v1a2, resource: "clusternetworkpolicies",
			newInformer: func() cache.SharedIndexInformer {
				return c.policyFactory.Policy().V1alpha2().ClusterNetworkPolicies().Informer()
			},
			upsert: func(w compute.Writer, obj interface{}) {
				if o, ok := obj.(*v1alpha2.ClusterNetworkPolicy); ok {
					w.UpsertClusterNetworkPolicy(o)
				}
			},
			remove: func(w compute.Writer, name string) { w.DeleteClusterNetworkPolicy(name) },
			view: func(obj interface{}) (objectView, bool) {
				o, ok := obj.(*v1alpha2.ClusterNetworkPolicy)
				if !ok {
					return objectView{}, false
				}
				return objectView{o.UID, o.Generation, o.Status.Conditions}, true
			},
			updateStatus: func(ctx context.Context, obj interface{}, conds []metav1.Condition, fm string) error {
				o := obj.(*v1alpha2.ClusterNetworkPolicy).DeepCopy()
				o.Status.Conditions = conds
				_, err := pc.PolicyV1alpha2().ClusterNetworkPolicies().UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: fm})
				return err
			},
		},
	}
}

// discoverPolicyKinds starts the informer of every policy kind the API
// server now serves. Discovery lists a custom resource only once its CRD is
// Established, so a served kind can be listed and watched.
func (c *Controller) discoverPolicyKinds(ctx context.Context) {
	logger := klog.FromContext(ctx)
	served := map[string]map[string]bool{} // group version → resources
	for _, k := range c.kinds {
		if _, done := served[k.groupVersion]; done {
			continue
		}
		served[k.groupVersion] = map[string]bool{}
		list, err := c.cfg.Kube.Discovery().ServerResourcesForGroupVersion(k.groupVersion)
		if err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "discovery failed; retrying", "groupVersion", k.groupVersion)
			}
			continue
		}
		for _, r := range list.APIResources {
			served[k.groupVersion][r.Name] = true
		}
	}
	c.mu.Lock()
	var startedAny bool
	for _, k := range c.kinds {
		if k.informer != nil || !served[k.groupVersion][k.resource] {
			continue
		}
		inf := k.newInformer()
		reg, err := inf.AddEventHandler(c.policyHandler(k))
		if err != nil {
			logger.Error(err, "cannot watch policy kind", "kind", k.kind)
			continue
		}
		k.informer, k.registration, k.watchedSince = inf, reg, time.Now()
		k.synced = c.events.syncedAfter(reg.HasSynced)
		c.metrics.crdsServed.WithLabelValues(string(k.kind)).Set(1)
		logger.Info("policy CRD served; watching", "kind", k.kind)
		startedAny = true
	}
	for _, k := range c.kinds {
		if k.informer == nil {
			c.metrics.crdsServed.WithLabelValues(string(k.kind)).Set(0)
		}
	}
	c.mu.Unlock()
	if startedAny {
		// Start starts only the informers not yet running.
		c.policyFactory.Start(ctx.Done())
	}
}

// waitPolicyKindsSynced waits (bounded, so one broken kind cannot block the
// others) for the started policy informers' initial lists.
func (c *Controller) waitPolicyKindsSynced(ctx context.Context) {
	c.mu.Lock()
	var synced []cache.InformerSynced
	for _, k := range c.kinds {
		if k.informer != nil {
			synced = append(synced, k.synced)
		}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.KindSyncGrace)
	defer cancel()
	cache.WaitForCacheSync(ctx.Done(), synced...)
}

func (c *Controller) policyHandler(k *policyKind) cache.ResourceEventHandler {
	return c.handlerFuncs(string(k.kind), k.upsert,
		func(w compute.Writer, m metav1.Object) { k.remove(w, m.GetName()) },
		func(m metav1.Object) {
			// Deleted objects have no status to write; the sync finds
			// the object gone.
			c.queue.Add(model.PolicyRef{Kind: k.kind, Name: m.GetName()})
		})
}

// kindSynced reports whether a policy kind is watched and its initial list
// has arrived.
func (c *Controller) kindSynced(kind model.PolicyKind) (*policyKind, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.kinds[kind]
	if k == nil || k.informer == nil {
		return nil, false
	}
	return k, k.synced()
}

func (k *policyKind) String() string { return fmt.Sprintf("%s (%s)", k.kind, k.groupVersion) }
