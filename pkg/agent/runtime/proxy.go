package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/proxy"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
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
// that left, after the bundle that stopped choosing them.
func (d *ovsDatapath) flushServicesLocked(ctx context.Context, out *proxy.Output) {
	if len(out.Flushes) == 0 {
		return
	}
	d.log.Info("service proxy: ending the connections of removed endpoints and frontends", "flushes", fmt.Sprint(out.Flushes))
	if err := d.of.FlushConntrack(ctx, out.Flushes...); err != nil {
		// Connections to endpoints that left go on until they end by
		// themselves (OVS before 3.1 has no NXT_CT_FLUSH).
		d.m.ofErrors.WithLabelValues("conntrack-flush").Inc()
		d.log.Warn("service proxy: ending connections of removed endpoints", "err", err)
	}
}
