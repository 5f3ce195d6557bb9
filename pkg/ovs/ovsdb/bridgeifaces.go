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
func (c *Client) BridgeInterfaces(bridge string) (map[string]bool, error) {
	m := &c.ifaces
	m.mu.Lock()
	defer m.mu.Unlock()
	// The generation is read before the rows: a change the scan misses
	// bumps it afterwards (its event follows the change in the cache).
	gen := m.gen.get()
	if ifaces, ok := m.byBridge[bridge]; ok && m.at == gen {
		return ifaces, nil
	}
	ifaces, err := c.scanBridgeInterfaces(bridge)
	if err != nil {
		return nil, err
	}
	if m.at != gen || m.byBridge == nil {
		m.byBridge, m.at = map[string]map[string]bool{}, gen
	}
	m.byBridge[bridge] = ifaces
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

// scanBridgeInterfaces is BridgeInterfaces read from the cached rows.
func (c *Client) scanBridgeInterfaces(bridge string) (map[string]bool, error) {
	var ports map[string]bool
	if err := c.scan(func(b *Bridge) bool {
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
	if err := c.scan(func(p *Port) bool {
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
	if err := c.scan(func(i *Interface) bool {
		if ifaces[i.UUID] {
			out[i.Name] = true
		}
		return false
	}, &[]Interface{}); err != nil {
		return nil, err
	}
	return out, nil
}

// scan runs visit on every cached row of the table of rows' element type
// (read-only: visit must not keep or change the row). visit returns
// false, so nothing is selected or cloned; rows only names the table.
func (c *Client) scan(visit any, rows any) error {
	return c.ovs.WhereCache(visit).List(context.Background(), rows)
}
