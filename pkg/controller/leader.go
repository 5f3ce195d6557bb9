package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaderElection configures the Lease replicas compete for.
type LeaderElection struct {
	// Namespace and Name of the coordination.k8s.io Lease.
	Namespace, Name string
	// Identity is this replica's holder identity (unique per replica).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's
	// leaderelection; zero values take 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ErrLeadershipLost is returned by RunWithLeaderElection when this replica
// led and then lost the lease while ctx was still live.
var ErrLeadershipLost = errors.New("controller: leader election lost")

// RunWithLeaderElection blocks until this replica holds the Lease, then
// calls run with a context that is canceled when the lease is lost or ctx
// ends. It returns when run has returned: nil when ctx ended, or
// ErrLeadershipLost. The lease is released on a clean stop, so another
// replica takes over at once. A replica that lost the lease should exit
// (its state was built for a term that is over); build a new Controller
// per term.
func RunWithLeaderElection(ctx context.Context, kube kubernetes.Interface, le LeaderElection, run func(ctx context.Context)) error {
	if le.Namespace == "" || le.Name == "" || le.Identity == "" {
		return errors.New("controller: leader election needs a namespace, a lease name and an identity")
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = 15 * time.Second
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = 10 * time.Second
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = 2 * time.Second
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	logger := klog.FromContext(ctx).WithValues("lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	var led atomic.Bool
	done := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				defer close(done)
				led.Store(true)
				logger.Info("became leader")
				run(leadCtx)
			},
			OnStoppedLeading: func() { logger.Info("stopped leading") },
		},
	})
	if err != nil {
		return err
	}
	elector.Run(ctx)
	if led.Load() {
		// Run returns once the lease is lost; wait for run to finish so
		// the caller never has two terms overlapping in one process.
		<-done
	}
	if led.Load() && ctx.Err() == nil {
		return ErrLeadershipLost
	}
	return nil
}
