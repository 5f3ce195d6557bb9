package ovsdb

// Connected reports whether libovsdb has a connection to ovsdb-server
// (its own Connected stays true while it reconnects).
func (c *Client) Connected() bool { return c.ovs.CurrentEndpoint() != "" }

// Reconnect drops the connection; libovsdb reconnects.
func (c *Client) Reconnect() { c.ovs.Disconnect() }

// InFlight is the number of calls still running, those their callers
// gave up on included.
func (c *Client) InFlight() int64 { return c.inFlight.Load() }
