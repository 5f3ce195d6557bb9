package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// Elector is one replica's part in the leader election. Besides running
// the term (Run), it reports what it last read of the Lease, which is what
// a follower needs: who leads (Holder: where tierctl's queries go) and
// whether it stands by healthily (StandingBy: it reaches the API server
// and competes for the Lease, so it can take over).
type Elector struct {
	kube kubernetes.Interface
	le   LeaderElection

	// observed is the time (UnixNano) of the last successful read or
	// write of the Lease, 0 before the first; holder the holder identity
	// then ("" when nobody holds it).
	observed atomic.Int64
	holder   atomic.Pointer[string]
	started  atomic.Bool
}

// NewElector checks le and fills in its default durations.
func NewElector(kube kubernetes.Interface, le LeaderElection) (*Elector, error) {
	if le.Namespace == "" || le.Name == "" || le.Identity == "" {
		return nil, errors.New("controller: leader election needs a namespace, a lease name and an identity")
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
	return &Elector{kube: kube, le: le}, nil
}

// Identity is this replica's holder identity.
func (e *Elector) Identity() string { return e.le.Identity }

// Holder is the Lease's holder identity as last read ("" when unknown or
// released). It may name a replica that has died, until its lease expires
// and another takes over.
func (e *Elector) Holder() string {
	if h := e.holder.Load(); h != nil {
		return *h
	}
	return ""
}

// StandingBy reports whether this replica read or wrote the Lease within
// the last lease duration. Candidates read it every retry period, so a
// replica that has not for a whole lease duration could not have taken
// over a lease that expired meanwhile: it is not a usable standby (its API
// server connection is broken, or Run is not running).
func (e *Elector) StandingBy() bool {
	t := e.observed.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < e.le.LeaseDuration
}

func (e *Elector) observe(holder string) {
	e.holder.Store(&holder)
	e.observed.Store(time.Now().UnixNano())
}

// observingLock records every successful access of the Lease.
type observingLock struct {
	resourcelock.Interface
	e *Elector
}

func (l observingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	switch {
	case err == nil:
		l.e.observe(rec.HolderIdentity)
	case apierrors.IsNotFound(err):
		// The API server answered: nobody holds the (not yet created)
		// Lease.
		l.e.observe("")
	}
	return rec, raw, err
}

func (l observingLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, rec)
	if err == nil {
		l.e.observe(rec.HolderIdentity)
	}
	return err
}

func (l observingLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, rec)
	if err == nil {
		l.e.observe(rec.HolderIdentity)
	}
	return err
}

// Run blocks until this replica holds the Lease, then calls run with a
// context that is canceled when the lease is lost or ctx ends. It returns
// when run has returned: nil when ctx ended, or ErrLeadershipLost. The
// lease is released on a clean stop, so another replica takes over at
// once. A replica that lost the lease should exit (its state was built for
// a term that is over); build a new Controller per term. Run may be called
// once.
func (e *Elector) Run(ctx context.Context, run func(ctx context.Context)) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("controller: Elector.Run called twice")
	}
	le := e.le
	lock := observingLock{e: e, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     e.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}}
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
			OnNewLeader: func(identity string) {
				if identity != le.Identity {
					logger.Info("following", "leader", identity)
				}
			},
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

// RunWithLeaderElection is NewElector followed by Run.
func RunWithLeaderElection(ctx context.Context, kube kubernetes.Interface, le LeaderElection, run func(ctx context.Context)) error {
	e, err := NewElector(kube, le)
	if err != nil {
		return err
	}
	return e.Run(ctx, run)
}
