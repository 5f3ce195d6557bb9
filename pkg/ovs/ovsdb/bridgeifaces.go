package ovsdb

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/model"
)

// BridgeInterfaces returns the names of the interfaces of the bridge's
// ports, from the cache. The Watcher tracks every interface of the
// database; an agent uses this to keep only its own bridge's (several
// bridges with tierflow external_ids can share one ovsdb-server, e.g. two
// simulated nodes in tests).
//
// The agent asks at every realization, so the rows are read where they
// lie: a cache predicate sees each row read-only, without a copy, and
// the predicates here collect what they need and select nothing, so no
// row is cloned (libovsdb clones each selected row through JSON: with a
// few hundred pods, milliseconds of every realization). The answer is
// kept until the cache sees a change of the Bridge, Port or Interface
// table (ifaceMemo): a policy change, most realizations, reads none of
// the rows again. The map is shared with later calls: do not change it.
func (c *Client) BridgeInterfaces(ctx context.Context, bridge string) (map[string]bool, error) {
	// The generation is read before the rows: a change the scan misses
	// bumps it afterwards (its event follows the change in the cache).
	gen := c.ifaces.gen.get()
	if ifaces, ok := c.ifaces.get(bridge, gen); ok {
		return ifaces, nil
	}
	ifaces, err := boundedValue(c, ctx, func(ctx context.Context) (map[string]bool, error) { return c.bridgeInterfaces(ctx, bridge) })
	if err != nil {
		return nil, err
	}
	c.ifaces.put(bridge, gen, ifaces)
	return ifaces, nil
}

// ifaceMemo holds BridgeInterfaces' answers of one generation of the
// cached Bridge, Port and Interface tables.
type ifaceMemo struct {
	gen tableGeneration

	mu       sync.Mutex
	at       uint64
	byBridge map[string]map[string]bool
}

// get returns the answer kept for bridge if it is of generation gen.
func (m *ifaceMemo) get(bridge string, gen uint64) (map[string]bool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ifaces, ok := m.byBridge[bridge]
	return ifaces, ok && m.at == gen
}

// put keeps ifaces, read at generation gen, unless answers of a later
// generation are kept.
func (m *ifaceMemo) put(bridge string, gen uint64, ifaces map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.byBridge == nil || gen > m.at:
		m.byBridge, m.at = map[string]map[string]bool{}, gen
	case gen < m.at:
		return
	}
	m.byBridge[bridge] = ifaces
}

// tableGeneration counts the cache's changes of the Bridge, Port and
// Interface tables. libovsdb hands each change to the event handlers
// after applying it to the cache, one event per row.
type tableGeneration struct{ n atomic.Uint64 }

func (g *tableGeneration) get() uint64 { return g.n.Load() }

func (g *tableGeneration) bump(table string) {
	switch table {
	case tableBridge, tablePort, tableInterface:
		g.n.Add(1)
	}
}

// handler is the cache event handler that counts the changes.
func (g *tableGeneration) handler() cache.EventHandler {
	return &cache.EventHandlerFuncs{
		AddFunc:    func(table string, _ model.Model) { g.bump(table) },
		UpdateFunc: func(table string, _, _ model.Model) { g.bump(table) },
		DeleteFunc: func(table string, _ model.Model) { g.bump(table) },
	}
}

// bridgeInterfaces scans the Bridge, Port and Interface rows: each
// predicate returns false (selects nothing), the slice only names the
// table.
func (c *Client) bridgeInterfaces(ctx context.Context, bridge string) (map[string]bool, error) {
	var ports map[string]bool
	if err := c.list(ctx, func(b *Bridge) bool {
		if b.Name == bridge {
			ports = make(map[string]bool, len(b.Ports))
			for _, u := range b.Ports {
				ports[u] = true
			}
		}
		return false
	}, &[]Bridge{}); err != nil {
		return nil, err
	}
	if ports == nil {
		return nil, fmt.Errorf("bridge %s: %w", bridge, ErrNotFound)
	}
	ifaces := map[string]bool{}
	if err := c.list(ctx, func(p *Port) bool {
		if ports[p.UUID] {
			for _, u := range p.Interfaces {
				ifaces[u] = true
			}
		}
		return false
	}, &[]Port{}); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ifaces))
	if err := c.list(ctx, func(i *Interface) bool {
		if ifaces[i.UUID] {
			out[i.Name] = true
		}
		return false
	}, &[]Interface{}); err != nil {
		return nil, err
	}
	return out, nil
}
