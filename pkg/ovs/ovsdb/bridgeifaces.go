package ovsdb

import (
	"context"
)

// BridgeInterfaces returns the names of the interfaces of the bridge's
// ports, from the cache. The Watcher tracks every interface of the
// database; an agent uses this to keep only its own bridge's (several
// bridges with tierflow external_ids can share one ovsdb-server, e.g. two
// simulated nodes in tests).
func (c *Client) BridgeInterfaces(bridge string) (map[string]bool, error) {
	br, err := c.Bridge(bridge)
	if err != nil {
		return nil, err
	}
	ports := make(map[string]bool, len(br.Ports))
	for _, u := range br.Ports {
		ports[u] = true
	}
	var rows []Port
	if err := c.ovs.WhereCache(func(p *Port) bool { return ports[p.UUID] }).List(context.Background(), &rows); err != nil {
		return nil, err
	}
	ifaces := map[string]bool{}
	for _, p := range rows {
		for _, u := range p.Interfaces {
			ifaces[u] = true
		}
	}
	var irows []Interface
	if err := c.ovs.WhereCache(func(i *Interface) bool { return ifaces[i.UUID] }).List(context.Background(), &irows); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(irows))
	for _, i := range irows {
		out[i.Name] = true
	}
	return out, nil
}
