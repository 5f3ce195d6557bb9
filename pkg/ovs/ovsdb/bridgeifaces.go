package ovsdb

import (
	"context"
	"fmt"
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
// few hundred pods, milliseconds of every realization).
func (c *Client) BridgeInterfaces(ctx context.Context, bridge string) (map[string]bool, error) {
	return boundedValue(c, ctx, func(ctx context.Context) (map[string]bool, error) { return c.bridgeInterfaces(ctx, bridge) })
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
