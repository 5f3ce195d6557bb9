package nodatapath

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tierflow/tierflow/pkg/distribution/client"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// Agent is a client.Receiver that only keeps the state it is handed.
type Agent struct {
	node string

	mu      sync.Mutex
	state   *wire.NodeState // the client's, read-only
	applied int
	failing map[string]error
	hold    chan struct{} // while non-nil, Apply waits for it to close
	changed chan struct{}
}

// New returns an agent for node holding an empty state.
func New(node string) *Agent {
	return &Agent{node: node, state: wire.NewNodeState(node), failing: map[string]error{}, changed: make(chan struct{})}
}

// Node is the agent's node name.
func (a *Agent) Node() string { return a.node }

// Apply implements client.Receiver: it keeps st and reports every policy
// of d realized, except those Fail names.
func (a *Agent) Apply(d *wire.Delta, st *wire.NodeState) error {
	a.mu.Lock()
	hold := a.hold
	a.mu.Unlock()
	if hold != nil {
		<-hold
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.state = st
	a.applied++
	close(a.changed)
	a.changed = make(chan struct{})

	errs := client.PolicyErrors{}
	for _, p := range d.Policies {
		if err := a.failing[p.ID]; err != nil {
			errs[p.ID] = err
		}
	}
	if d.Full {
		for id, err := range a.failing {
			if a.state.Policies[id] != nil {
				errs[id] = err
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Fail makes the agent report err for policyID from now on (nil: succeed
// again), as a datapath that cannot realize it would.
func (a *Agent) Fail(policyID string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		delete(a.failing, policyID)
	} else {
		a.failing[policyID] = err
	}
}

// Hold makes Apply block until Release: a stuck agent.
func (a *Agent) Hold() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold == nil {
		a.hold = make(chan struct{})
	}
}

// Release lets a held Apply continue.
func (a *Agent) Release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold != nil {
		close(a.hold)
		a.hold = nil
	}
}

// State returns the state the agent holds (shared and read-only).
func (a *Agent) State() *wire.NodeState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// Applied is how many deltas the agent applied.
func (a *Agent) Applied() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied
}

// WaitFor waits until cond holds for the state (checked now and after
// each applied delta) or ctx ends.
func (a *Agent) WaitFor(ctx context.Context, cond func(*wire.NodeState) bool) error {
	for {
		a.mu.Lock()
		ok := cond(a.state)
		ch := a.changed
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s: %w", a.node, ctx.Err())
		case <-ch:
		}
	}
}

// Runtime is a datapath-less agent connected to a controller.
type Runtime struct {
	*Agent
	Client *client.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// Start connects a datapath-less agent with cfg (cfg.Receiver is set to
// the agent) and runs it until Stop or ctx ends.
func Start(ctx context.Context, cfg client.Config) (*Runtime, error) {
	if cfg.Node == "" {
		return nil, errors.New("datapath-less agent: node name required")
	}
	a := New(cfg.Node)
	cfg.Receiver = a
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Runtime{Agent: a, Client: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = c.Run(ctx)
	}()
	return r, nil
}

// Stop disconnects the agent and waits for it to finish.
func (r *Runtime) Stop() {
	r.cancel()
	r.Release()
	<-r.done
}
