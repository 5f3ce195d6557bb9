package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tierflow/tierflow/pkg/controller"
	"github.com/tierflow/tierflow/test/kubeapi"
)

// replica is one controller process's worth of state: a leader-elected
// loop that builds a fresh Controller per term.
type replica struct {
	id      string
	elector *controller.Elector
	cancel  context.CancelFunc
	done    chan error
	current chan *controller.Controller // the controller of the current term
	ctl     *controller.Controller
}

func startReplica(t *testing.T, c *kubeapi.Cluster, id string) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, cancel: cancel, done: make(chan error, 1), current: make(chan *controller.Controller, 1)}
	var err error
	r.elector, err = controller.NewElector(c.Kube, controller.LeaderElection{
		Namespace: "kube-system", Name: "tierflow-controller", Identity: id,
		LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		r.done <- r.elector.Run(ctx, func(ctx context.Context) {
			ctl, err := controller.New(controller.Config{Kube: c.Kube, Policy: c.Policy, Identity: id, CRDPollInterval: 200 * time.Millisecond})
			if err != nil {
				t.Errorf("%s: %v", id, err)
				return
			}
			r.current <- ctl
			if err := ctl.Run(ctx); err != nil {
				t.Errorf("%s: Run: %v", id, err)
			}
		})
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.done
}

// statusManagers lists the field managers that wrote an object's status.
func statusManagers(fields []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, f := range fields {
		if f.Subresource == "status" {
			out = append(out, f.Manager)
		}
	}
	slices.Sort(out)
	return out
}

// TestOnlyTheLeaderWrites runs two replicas with leader election: only the
// lease holder writes status; when it stops, the other takes over. Both
// see who leads and stand by (they read the Lease).
func TestOnlyTheLeaderWrites(t *testing.T) {
	c := kubeapi.Start(t, kubeapi.WithCRDs())
	ctx := context.Background()
	r1 := startReplica(t, c, "replica-1")
	r2 := startReplica(t, c, "replica-2")

	var leader, follower *replica
	eventually(t, "a leader elected", func() error {
		lease, err := c.Kube.CoordinationV1().Leases("kube-system").Get(ctx, "tierflow-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil {
			return errors.New("no holder")
		}
		switch *lease.Spec.HolderIdentity {
		case r1.id:
			leader, follower = r1, r2
		case r2.id:
			leader, follower = r2, r1
		default:
			return fmt.Errorf("holder %q", *lease.Spec.HolderIdentity)
		}
		return nil
	})
	select {
	case leader.ctl = <-leader.current:
	case <-time.After(waitTimeout):
		t.Fatalf("leader %s started no controller", leader.id)
	}

	anps := c.Policy.PolicyV1alpha1().AdminNetworkPolicies()
	for _, name := range []string{"twin-a", "twin-b"} {
		if _, err := anps.Create(ctx, allNamespacesANP(name, 40), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "warnings written by the leader alone", func() error {
		for _, name := range []string{"twin-a", "twin-b"} {
			o, err := anps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := conditionIs(o.Status.Conditions, o.Generation, controller.ConditionWarning, metav1.ConditionTrue, "SamePriority"); err != nil {
				return err
			}
			if got := statusManagers(o.ManagedFields); !slices.Equal(got, []string{leader.id}) {
				return fmt.Errorf("%s status written by %v, want only %s", name, got, leader.id)
			}
		}
		return nil
	})
	select {
	case ctl := <-follower.current:
		t.Fatalf("follower %s started a controller (%s) while %s leads", follower.id, ctl.Identity(), leader.id)
	default:
	}
	eventually(t, "both replicas see the leader and stand by", func() error {
		for _, r := range []*replica{leader, follower} {
			if h := r.elector.Holder(); h != leader.id || !r.elector.StandingBy() {
				return fmt.Errorf("%s: holder %q, standing by %v", r.id, h, r.elector.StandingBy())
			}
		}
		return nil
	})

	// The leader stops (releasing the lease); the follower takes over and
	// handles the next change.
	leader.stop()
	oldLeaderWrites := counter(t, leader.ctl, "tierflow_controller_status_writes_total", nil)
	select {
	case follower.ctl = <-follower.current:
	case <-time.After(waitTimeout):
		t.Fatalf("follower %s did not take over", follower.id)
	}
	b, err := anps.Get(ctx, "twin-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.Priority = 41
	if _, err := anps.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "new leader removes the warnings", func() error {
		for _, name := range []string{"twin-a", "twin-b"} {
			o, err := anps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := conditionIs(o.Status.Conditions, o.Generation, controller.ConditionWarning, "", ""); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			// twin-b's conditions all moved to its new generation, so the
			// new leader owns them. (twin-a only lost an entry, and a
			// removal leaves the remover no fields to own.)
			if got := statusManagers(o.ManagedFields); name == "twin-b" && !slices.Contains(got, follower.id) {
				return fmt.Errorf("%s status managers %v lack the new leader %s", name, got, follower.id)
			}
		}
		return nil
	})
	if h := follower.elector.Holder(); h != follower.id {
		t.Errorf("new leader sees holder %q", h)
	}
	if n := counter(t, follower.ctl, "tierflow_controller_status_writes_total", nil); n < 2 {
		t.Errorf("new leader counted %v status writes, want at least one per twin", n)
	}
	if n := counter(t, leader.ctl, "tierflow_controller_status_writes_total", nil); n != oldLeaderWrites || n == 0 {
		t.Errorf("first leader's status writes: %v at its stop, %v now (want unchanged and non-zero)", oldLeaderWrites, n)
	}
}

// TestElectorWithoutAPIServerDoesNotStandBy: a replica that cannot read
// the Lease could not take over, so it is not a standby (its /readyz
// fails).
func TestElectorWithoutAPIServerDoesNotStandBy(t *testing.T) {
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e, err := controller.NewElector(kube, controller.LeaderElection{
		Namespace: "kube-system", Name: "tierflow-controller", Identity: "lonely",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := e.Run(ctx, func(context.Context) { t.Error("led without an API server") }); err != nil {
		t.Fatal(err)
	}
	if e.StandingBy() || e.Holder() != "" {
		t.Errorf("standing by %v, holder %q without an API server", e.StandingBy(), e.Holder())
	}
	if err := e.Run(context.Background(), nil); err == nil {
		t.Error("a second Run was accepted")
	}
}
