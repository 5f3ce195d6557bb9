package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/proxy"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/pkg/ovs/openflow"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
)

// firstServicesWait bounds how long the first policy realization waits
// for the Service proxy's first one: an agent that restarts over a
// previous run's flows adopts them in its first policy bundle, which
// deletes the previous run's Service flows; installing the new ones first
// leaves no gap for new connections to Services.
const firstServicesWait = 30 * time.Second

// runServiceProxy watches Services, EndpointSlices and Nodes and realizes
// them on d until ctx ends. It closes a.servicesReady after the first
// realization (or when the watch cannot sync).
func (a *Agent) runServiceProxy(ctx context.Context, d *ovsDatapath) error {
	kube, err := a.kube()
	if err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	rundir, target := ovsRundir(a.cfg.OVSDBSocketPath()), vswitchdTarget(a.opts.VswitchdCtl)
	d.startLateFlushes(ctx, func(ctx context.Context) error {
		// Twice: the first returns at the end of a dump that may have
		// begun before the bundle (see ovsctl.RevalidatorWaitArgs).
		for i := 0; i < 2; i++ {
			if _, err := ovsctl.Run(ctx, ovsEnv(rundir), "ovs-appctl", ovsctl.RevalidatorWaitArgs(target)...); err != nil {
				return err
			}
		}
		return nil
	})
	kick := make(chan struct{}, 1)
	w := proxy.NewWatcher(kube, func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	go func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("service proxy: watching Services", "err", err)
		}
	}()
	go func() {
		defer a.servicesOnce.Do(func() { close(a.servicesReady) })
		retry := time.NewTimer(0)
		<-retry.C
		failing := false
		var lastWarn string
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-retry.C:
				if !failing {
					continue
				}
			}
			// A rollout changes slices in bursts: take them in one go.
			time.Sleep(20 * time.Millisecond)
			select {
			case <-kick:
			default:
			}
			// Only the Services that changed, unless the last attempt
			// failed or the compiler needs them all (see CompileChanges).
			start := time.Now()
			var out *proxy.Output
			var err error
			incremental := false
			if !failing {
				out, incremental, err = d.realizeServiceChanges(ctx, w.Changes())
			}
			if err == nil && !incremental {
				out, err = d.realizeServices(ctx, func() proxy.Input {
					in, _ := w.Input()
					return in
				})
			}
			a.m.realizeTime.WithLabelValues("services").Observe(time.Since(start).Seconds())
			if err != nil {
				failing = true
				a.m.realizeErrs.WithLabelValues("services").Inc()
				a.log.Error("service proxy: realization failed; previous Service flows stay installed", "err", err)
				retry.Reset(a.opts.RetryInterval)
				continue
			}
			failing = false
			warn := w.Warnings()
			if out != nil {
				warn = append(warn, out.Warnings...)
			}
			if s := fmt.Sprint(warn); s != lastWarn {
				for _, x := range warn {
					a.log.Warn("service proxy", "warning", x)
				}
				lastWarn = s
			}
			a.log.Debug("services realized", "incremental", incremental, "took", time.Since(start))
			a.servicesOnce.Do(func() { close(a.servicesReady) })
		}
	}()
	return nil
}

// realizeServices installs the Service proxy's flows for every Service
// (input is the watcher's Input), then ends the connections of what left.
// It returns nil output before the realizer runs (input is kept and
// installed when it starts).
func (d *ovsDatapath) realizeServices(ctx context.Context, input func() proxy.Input) (*proxy.Output, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.svcInput = input
	if d.r == nil {
		input() // what it returns is installed when the realizer starts
		return nil, nil
	}
	return d.applyServicesLocked(ctx)
}

// realizeServiceChanges installs the flows of the Services of ch only
// (proxy.Compiler.CompileChanges), then ends the connections of what left
// them. It reports false when that cannot be done (no realizer yet,
// another round, other node addresses...): realizeServices must.
func (d *ovsDatapath) realizeServiceChanges(ctx context.Context, ch proxy.Change) (*proxy.Output, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.r == nil || d.svcComp == nil || d.svcInput == nil {
		return nil, false, nil
	}
	out := d.svcComp.CompileChanges(ch, d.r.Round())
	if out == nil {
		return nil, false, nil
	}
	if _, err := d.r.UpdateServiceChanges(ctx, realizer.ServiceChanges{Flows: out.FlowChanges, Groups: out.GroupChanges, DeleteCookies: out.DeleteCookies}); err != nil {
		return nil, false, err
	}
	d.svcComp.Commit()
	d.svcOut = out
	d.flushServicesLocked(ctx, out)
	return out, true, nil
}

// applyServicesLocked compiles every Service (the watcher's current
// input) for the current realizer (its round) and installs them. Called
// with d.mu held.
func (d *ovsDatapath) applyServicesLocked(ctx context.Context) (*proxy.Output, error) {
	if d.svcInput == nil || d.svcComp == nil {
		return nil, nil
	}
	out := d.svcComp.Compile(d.svcInput(), d.r.Round())
	if _, err := d.r.UpdateServices(ctx, realizer.Services{Flows: out.Flows, Keys: out.Keys, Groups: out.Groups, DeleteCookies: out.DeleteCookies}); err != nil {
		return nil, err
	}
	d.svcComp.Commit()
	d.svcOut = out
	d.flushServicesLocked(ctx, out)
	return out, nil
}

// flushServicesLocked ends the connections of the endpoints and frontends
// that left, after the bundle that stopped choosing them, and hands them
// to the second flush (svcLate). A first flush that fails for a transient
// reason (the connection dropped or is being re-established, the call
// timed out) goes to the second flush too, which tries until it succeeds
// (see startLateFlushes): without it the connections to a removed
// endpoint would go on. One the switch rejects is not tried again.
func (d *ovsDatapath) flushServicesLocked(ctx context.Context, out *proxy.Output) {
	if len(out.Flushes) == 0 {
		return
	}
	d.log.Info("service proxy: ending the connections of removed endpoints and frontends", "flushes", fmt.Sprint(out.Flushes))
	err := d.flushConntrack(ctx, out.Flushes)
	switch {
	case err != nil && ctx.Err() != nil:
		d.m.ofErrors.WithLabelValues("conntrack-flush").Inc()
		return // the agent stops
	case err != nil && flushRejected(err):
		// Connections to endpoints that left go on until they end by
		// themselves (OVS before 3.1 has no NXT_CT_FLUSH; no second
		// flush then: it would fail the same way).
		d.m.ofErrors.WithLabelValues("conntrack-flush").Inc()
		d.log.Warn("service proxy: the switch rejected ending connections of removed endpoints; not tried again", "err", err)
		return
	case err != nil:
		d.m.ofErrors.WithLabelValues("conntrack-flush").Inc()
		d.log.Warn("service proxy: ending connections of removed endpoints failed; trying again after the revalidation until it succeeds", "err", err)
	default:
		d.m.svcFlushes.WithLabelValues("bundle").Add(float64(len(out.Flushes)))
	}
	if d.svcLate != nil {
		d.svcLate.add(out.Flushes, err != nil)
	}
}

// flushRejected reports whether a FlushConntrack call failed in a way
// another try would repeat: the switch itself rejected a flush (an
// OpenFlow error reply: OVS before 3.1 has no NXT_CT_FLUSH), or a flush
// cannot be encoded. The call sends one message per flush and joins the
// errors of those the switch rejected, so the others were done; the whole
// batch counts as rejected all the same. Any other error (the connection
// dropped, is being re-established, the call timed out) is transient.
func flushRejected(err error) bool {
	var se *openflow.SwitchError
	return errors.As(err, &se) || errors.Is(err, openflow.ErrInvalidFlush)
}

// errFlushNotTried is a flush not tried because the OpenFlow connection
// is down (a transient failure).
var errFlushNotTried = fmt.Errorf("%w: conntrack flush not tried", openflow.ErrDisconnected)

// flushConntrack runs flushes, called with d.mu held. With the OpenFlow
// connection down it tries none (errFlushNotTried): the call would wait
// for the reconnection holding d.mu, and every realization with it.
func (d *ovsDatapath) flushConntrack(ctx context.Context, fs []openflow.ConntrackFlush) error {
	if !d.of.Connected() {
		return errFlushNotTried
	}
	return d.of.FlushConntrack(ctx, fs...)
}

// revalidationFallback is how long the second flush waits when the
// switch cannot be asked whether it revalidated (ovs-appctl missing, no
// control socket): its revalidators dump the datapath flows at least
// every 500 ms when idle, twice that covers a dump that started after
// the bundle, and some more a loaded machine.
const revalidationFallback = 2 * time.Second

// flushRetryMin and flushRetryMax bound the wait before trying again a
// flush that failed for a transient reason: it starts at flushRetryMin
// and doubles with each failed try in a row.
const (
	flushRetryMin = 200 * time.Millisecond
	flushRetryMax = 5 * time.Second
)

// lateFlushes are the flushes waiting for their second run, or for
// another try after a failed one. The first flush, right after the
// bundle that stopped choosing an endpoint, is not enough: until the
// switch's revalidators have checked its datapath flow cache against the
// new tables, a cached flow of the old tables still balances packets
// that conntrack calls new to the removed endpoint — the next packet of
// a connection the flush just ended (userspace conntrack takes a TCP
// connection up mid-stream) and a new connection alike — and commits
// them again. Waiting for the revalidators under d.mu would hold every
// realization for up to a second, so the first flush stays where it is
// and a goroutine runs the second one once the revalidators have
// finished a dump that began after the bundle.
type lateFlushes struct {
	mu sync.Mutex
	// pending maps each waiting flush to whether a try of it failed
	// already (the first flush or an earlier late one).
	pending map[openflow.ConntrackFlush]bool
	// fresh: flushes were added after their bundle since the last take,
	// so the next try waits for a revalidation (retries alone do not).
	fresh bool
	kick  chan struct{}
}

// add hands over the flushes of a bundle, after their first flush
// (failed: it failed).
func (l *lateFlushes) add(fs []openflow.ConntrackFlush, failed bool) { l.put(fs, failed, true) }

// retry puts back flushes whose try failed, for the next try.
func (l *lateFlushes) retry(fs []openflow.ConntrackFlush) { l.put(fs, true, false) }

// put adds fs to the pending flushes (failed: a try of them failed;
// fresh: after their bundle, so the next try waits for a revalidation)
// and wakes the goroutine that runs them.
func (l *lateFlushes) put(fs []openflow.ConntrackFlush, failed, fresh bool) {
	l.mu.Lock()
	for _, f := range fs {
		l.pending[f] = l.pending[f] || failed
	}
	l.fresh = l.fresh || fresh
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// take empties the pending flushes and returns them (each mapped to
// whether a try of it failed): every one of them was added after its
// bundle, so a revalidation that starts now covers them all. fresh says
// whether any was added since the last take (and needs that
// revalidation).
func (l *lateFlushes) take() (pending map[openflow.ConntrackFlush]bool, fresh bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pending, l.pending = l.pending, map[openflow.ConntrackFlush]bool{}
	fresh, l.fresh = l.fresh, false
	return pending, fresh
}

// startLateFlushes runs the second flushes until ctx ends: revalidated
// returns once the switch's datapath flows have been revalidated against
// the tables installed when it was called. Flushes that pile up while it
// waits share the next wait. The flush itself runs under d.mu, after
// dropping the endpoints and frontends the installed Services choose
// again (their new connections are legitimate), so that no bundle
// putting one back comes between that check and the flush.
//
// A flush that fails for a transient reason is tried again, after
// flushRetryMin doubling up to flushRetryMax (never waiting under d.mu),
// until it succeeds, its endpoint or frontend is back, or ctx ends;
// flushes added meanwhile share the next try. One the switch rejects
// (flushRejected) is dropped.
func (d *ovsDatapath) startLateFlushes(ctx context.Context, revalidated func(context.Context) error) {
	l := &lateFlushes{pending: map[openflow.ConntrackFlush]bool{}, kick: make(chan struct{}, 1)}
	d.mu.Lock()
	d.svcLate = l
	d.mu.Unlock()
	go func() {
		warned := false
		var backoff time.Duration // before the next try; 0: the last did not fail
		failures := 0             // tries failed in a row
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.kick:
			}
			if backoff > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
			}
			failed, fresh := l.take()
			if len(failed) == 0 {
				continue
			}
			batch := slices.Collect(maps.Keys(failed))
			if fresh {
				if err := revalidated(ctx); err != nil {
					if ctx.Err() != nil {
						return
					}
					d.m.ofErrors.WithLabelValues("revalidator-wait").Inc()
					if !warned {
						warned = true
						d.log.Warn("service proxy: cannot wait for the switch's revalidators; the second flush of removed endpoints' connections waits a fixed time instead (logged once)",
							"wait", revalidationFallback, "err", err)
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(revalidationFallback):
					}
				}
			}
			left, err := d.lateFlush(ctx, batch)
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil && flushRejected(err):
				d.m.ofErrors.WithLabelValues("conntrack-flush").Inc()
				d.log.Warn("service proxy: the switch rejected ending connections of removed endpoints (after revalidation); not tried again", "err", err)
				backoff, failures = 0, 0
			case err != nil:
				d.m.ofErrors.WithLabelValues("conntrack-flush").Inc()
				failures++
				backoff = min(max(2*backoff, flushRetryMin), flushRetryMax)
				if failures == 1 {
					d.log.Warn("service proxy: ending connections of removed endpoints (after revalidation) failed; trying again until it succeeds",
						"flushes", len(left), "retryIn", backoff, "err", err)
				} else {
					d.log.Debug("service proxy: ending connections of removed endpoints failed again", "tries", failures, "retryIn", backoff, "err", err)
				}
				l.retry(left)
			default:
				retried := 0
				for _, f := range left {
					if failed[f] {
						retried++
					}
				}
				d.m.svcFlushes.WithLabelValues("revalidated").Add(float64(len(left) - retried))
				d.m.svcFlushes.WithLabelValues("retried").Add(float64(retried))
				d.m.svcFlushes.WithLabelValues("back").Add(float64(len(batch) - len(left)))
				if retried > 0 {
					d.log.Info("service proxy: connections of removed endpoints ended after failed tries", "flushes", len(left), "retried", retried, "failedTries", failures)
				} else {
					d.log.Debug("service proxy: connections of removed endpoints ended again after revalidation", "flushes", len(left), "back", len(batch)-len(left))
				}
				backoff, failures = 0, 0
			}
		}
	}()
}

// lateFlush runs the flushes of batch whose endpoints and frontends are
// still out, under d.mu, and returns them. While the OpenFlow connection
// is down it tries none (errFlushNotTried) and returns all of batch,
// without waiting for d.mu.
func (d *ovsDatapath) lateFlush(ctx context.Context, batch []openflow.ConntrackFlush) ([]openflow.ConntrackFlush, error) {
	if !d.of.Connected() {
		return batch, errFlushNotTried
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	left := d.svcComp.StillOut(batch)
	if len(left) == 0 {
		return nil, nil
	}
	return left, d.flushConntrack(ctx, left)
}
