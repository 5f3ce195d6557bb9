package controller

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tierflow/tierflow/pkg/model"
)

// notSyncedRetry is how long a sync waits for informers still listing.
const notSyncedRetry = 500 * time.Millisecond

func (c *Controller) processNext(ctx context.Context) bool {
	ref, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(ref)
	start := time.Now()
	err := c.sync(ctx, ref)
	c.metrics.syncDuration.WithLabelValues(string(ref.Kind), "status").Observe(time.Since(start).Seconds())
	if err != nil {
		c.metrics.syncErrors.WithLabelValues(string(ref.Kind)).Inc()
		klog.FromContext(ctx).V(2).Info("status sync failed; retrying", "policy", ref, "err", err)
		c.queue.AddRateLimited(ref)
		return true
	}
	c.queue.Forget(ref)
	return true
}

// sync makes one policy's reported findings match the engine: status
// conditions for the network-policy-api kinds, Events for NetworkPolicies.
func (c *Controller) sync(ctx context.Context, ref model.PolicyRef) error {
	if !c.coreHasSynced() {
		c.queue.AddAfter(ref, notSyncedRetry)
		return nil
	}
	if ref.Kind == model.KindNetworkPolicy {
		// NetworkPolicy findings do not depend on the other kinds.
		return c.syncNetworkPolicyEvents(ref)
	}
	k, synced := c.kindSynced(ref.Kind)
	if k == nil {
		return nil // kind not served: nothing to write to
	}
	// Until every policy informer has listed, the engine may lack a policy
	// that conflicts with this one; a status written now could be wrong.
	if !synced || !c.policyKindsSettled() {
		c.queue.AddAfter(ref, notSyncedRetry)
		return nil
	}
	obj, exists, err := k.informer.GetIndexer().GetByKey(ref.Name)
	if err != nil || !exists {
		return err
	}
	view, ok := k.view(obj)
	if !ok {
		return nil
	}
	accepted, findings, current := c.engineView(ref, string(view.uid), view.generation)
	if !current {
		// The engine has not seen this generation yet; the informer event
		// that brings it queues this policy again.
		return nil
	}
	var realization *RealizationSummary
	if accepted && c.cfg.Realization != nil {
		if s, ok := c.cfg.Realization.Realization(ref); ok {
			realization = &s
		}
	}
	desired := desiredConditions(accepted, findings, view.generation, realization)
	merged, changed := mergeConditions(view.conditions, desired, metav1.NewTime(time.Now()))
	if !changed {
		return nil
	}
	if err := k.updateStatus(ctx, obj, merged, c.cfg.Identity); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile
		}
		return err // conflicts included: retried with the newer object
	}
	c.metrics.statusWrites.WithLabelValues(string(ref.Kind)).Inc()
	return nil
}

// engineView reads what the engine computed for an object: whether it
// produced a policy, its findings, and whether the engine is current with
// the object's generation.
func (c *Controller) engineView(ref model.PolicyRef, uid string, generation int64) (accepted bool, findings []model.Condition, current bool) {
	if p, ok := c.engine.PolicyStatus(uid); ok {
		return true, p.Conditions, p.SourceGeneration == generation
	}
	// No policy: either the engine ignores the object (and says why) or it
	// has not seen it yet.
	findings = c.engine.PolicyConditions(ref)
	return false, findings, len(findings) > 0
}

// syncNetworkPolicyEvents emits one Event per finding on a NetworkPolicy
// whenever its set of findings changes.
func (c *Controller) syncNetworkPolicyEvents(ref model.PolicyRef) error {
	obj, exists, err := c.npInformer.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil {
		return err
	}
	if !exists {
		c.mu.Lock()
		delete(c.npFindings, ref)
		c.mu.Unlock()
		return nil
	}
	np, ok := obj.(*cachedNetworkPolicy)
	if !ok {
		return nil
	}
	// The engine computes a policy from every NetworkPolicy: its findings
	// are the policy's conditions.
	st, ok := c.engine.PolicyStatus(string(np.UID))
	if !ok || st.SourceGeneration != np.Generation {
		return nil // not applied yet: the change that applies it queues it again
	}
	findings := st.Conditions
	if len(findings) == 0 {
		// Nothing to report, now or (with no recorded findings) before:
		// the common case, settled without a fingerprint.
		c.mu.Lock()
		_, had := c.npFindings[ref]
		c.mu.Unlock()
		if !had {
			return nil
		}
	}
	// The UID is part of the fingerprint: a re-created policy with the
	// same findings is reported again.
	fp, err := json.Marshal(struct {
		UID      string
		Findings []model.Condition
	}{string(np.UID), findings})
	if err != nil {
		return err
	}
	c.mu.Lock()
	if k, known := c.refs[string(np.UID)]; known && k.generation != st.Generation {
		// The engine has moved on since it was read: resolveChanges
		// decides on the newer policy (and queues it if there is anything
		// to report); recording these findings could leave stale ones on
		// record for a policy it saw none on.
		c.mu.Unlock()
		return nil
	}
	same := c.npFindings[ref] == string(fp)
	c.npFindings[ref] = string(fp)
	c.mu.Unlock()
	if same {
		return nil
	}
	for _, f := range findings {
		c.recorder.Event(np.object(), corev1.EventTypeWarning, eventReason(f.Reason), string(f.Severity)+": "+f.Message)
		c.metrics.events.Inc()
	}
	return nil
}

func eventReason(r string) string {
	if reasonPattern.MatchString(r) {
		return r
	}
	return "PolicyFinding"
}
