package ovsdb

import "context"

// Connected reports whether libovsdb has a connection to ovsdb-server
// (its own Connected stays true while it reconnects).
func (c *Client) Connected() bool { return c.ovs.CurrentEndpoint() != "" }

// Reconnect drops the connection; libovsdb reconnects.
func (c *Client) Reconnect() { c.ovs.Disconnect() }

// InFlight is the number of calls still running, those their callers
// gave up on included.
func (c *Client) InFlight() int64 { return c.inFlight.Load() }

// SetOFPortRequestForTest sets an interface's ofport_request as given,
// unchecked: the server refuses what its schema does not allow.
func (c *Client) SetOFPortRequestForTest(ctx context.Context, name string, port int) error {
	cur, err := c.iface(ctx, name)
	if err != nil {
		return err
	}
	iface := &Interface{UUID: cur.UUID, OFPortRequest: &port}
	ops, err := c.ovs.Where(iface).Update(iface, &iface.OFPortRequest)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, ops...)
	return err
}

// ScanBridgeInterfaces is BridgeInterfaces without the kept answers.
var ScanBridgeInterfaces = (*Client).bridgeInterfaces
