package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	libovsdb "github.com/ovn-org/libovsdb/ovsdb"
)

// The subset of the Open_vSwitch schema (vswitch.ovsschema) tierflow uses.
// libovsdb validates these against the server's schema on connect.

// OpenvSwitch is the root row.
type OpenvSwitch struct {
	UUID    string   `ovsdb:"_uuid"`
	Bridges []string `ovsdb:"bridges"`
	NextCfg int      `ovsdb:"next_cfg"`
	CurCfg  int      `ovsdb:"cur_cfg"`
}

// Bridge is a Bridge row.
type Bridge struct {
	UUID         string            `ovsdb:"_uuid"`
	Name         string            `ovsdb:"name"`
	Ports        []string          `ovsdb:"ports"`
	DatapathType string            `ovsdb:"datapath_type"`
	FailMode     *string           `ovsdb:"fail_mode"`
	Protocols    []string          `ovsdb:"protocols"`
	ExternalIDs  map[string]string `ovsdb:"external_ids"`
	OtherConfig  map[string]string `ovsdb:"other_config"`
}

// Port is a Port row.
type Port struct {
	UUID        string            `ovsdb:"_uuid"`
	Name        string            `ovsdb:"name"`
	Interfaces  []string          `ovsdb:"interfaces"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// Interface is an Interface row.
type Interface struct {
	UUID          string            `ovsdb:"_uuid"`
	Name          string            `ovsdb:"name"`
	Type          string            `ovsdb:"type"`
	OFPort        *int              `ovsdb:"ofport"`
	OFPortRequest *int              `ovsdb:"ofport_request"`
	Options       map[string]string `ovsdb:"options"`
	ExternalIDs   map[string]string `ovsdb:"external_ids"`
	Error         *string           `ovsdb:"error"`
	MACInUse      *string           `ovsdb:"mac_in_use"`
	MTURequest    *int              `ovsdb:"mtu_request"`
}

const (
	tableOpenvSwitch = "Open_vSwitch"
	tableBridge      = "Bridge"
	tablePort        = "Port"
	tableInterface   = "Interface"
)

// Options configure a Client.
type Options struct {
	// NoWait makes changes return once ovsdb-server committed them, without
	// waiting for ovs-vswitchd to apply them (ovs-vsctl --no-wait). By
	// default every change waits, like ovs-vsctl, until ovs-vswitchd has
	// reconfigured (cur_cfg caught up with next_cfg).
	NoWait bool
	// WaitTimeout bounds waiting for ovs-vswitchd when the caller's context
	// has no deadline (default 30s).
	WaitTimeout time.Duration
	// Logger for libovsdb; nil discards its logs.
	Logger *logr.Logger
}

// Client is a connection to ovsdb-server's Open_vSwitch database with a
// monitored cache of the Open_vSwitch, Bridge, Port and Interface tables.
// It reconnects by itself. Every call that takes a context returns when
// that context ends, reconnecting or not (see bounded).
type Client struct {
	ovs  client.Client
	opts Options
	// life ends with Close, and with it every call still running.
	life     context.Context
	endLife  context.CancelFunc
	inFlight atomic.Int64 // bounded calls still running (abandoned ones too)
	// ifaces keeps BridgeInterfaces' answers while the tables are unchanged.
	ifaces ifaceMemo
}

// Connect connects to endpoint ("unix:/var/run/openvswitch/db.sock" or
// "tcp:HOST:PORT") and starts monitoring.
func Connect(ctx context.Context, endpoint string, opts Options) (*Client, error) {
	dbModel, err := model.NewClientDBModel("Open_vSwitch", map[string]model.Model{
		tableOpenvSwitch: &OpenvSwitch{},
		tableBridge:      &Bridge{},
		tablePort:        &Port{},
		tableInterface:   &Interface{},
	})
	if err != nil {
		return nil, fmt.Errorf("ovsdb model: %w", err)
	}
	logger := logr.Discard()
	if opts.Logger != nil {
		logger = *opts.Logger
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0 // never give up
	ovs, err := client.NewOVSDBClient(dbModel,
		client.WithEndpoint(endpoint),
		client.WithReconnect(10*time.Second, bo),
		client.WithLogger(&logger))
	if err != nil {
		return nil, fmt.Errorf("ovsdb client: %w", err)
	}
	if err := ovs.Connect(ctx); err != nil {
		return nil, fmt.Errorf("ovsdb connect %s: %w", endpoint, err)
	}
	// Name the columns: without a list libovsdb monitors every column of
	// the schema and then fails to apply updates to columns the models
	// lack (losing e.g. ofport updates).
	root, br, port, iface := &OpenvSwitch{}, &Bridge{}, &Port{}, &Interface{}
	if _, err := ovs.Monitor(ctx, ovs.NewMonitor(
		client.WithTable(root, &root.Bridges, &root.NextCfg, &root.CurCfg),
		client.WithTable(br, &br.Name, &br.Ports, &br.DatapathType, &br.FailMode, &br.Protocols, &br.ExternalIDs, &br.OtherConfig),
		client.WithTable(port, &port.Name, &port.Interfaces, &port.ExternalIDs),
		client.WithTable(iface, &iface.Name, &iface.Type, &iface.OFPort, &iface.OFPortRequest, &iface.Options,
			&iface.ExternalIDs, &iface.Error, &iface.MACInUse, &iface.MTURequest),
	)); err != nil {
		ovs.Close()
		return nil, fmt.Errorf("ovsdb monitor: %w", err)
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 30 * time.Second
	}
	life, endLife := context.WithCancel(context.Background())
	c := &Client{ovs: ovs, opts: opts, life: life, endLife: endLife}
	ovs.Cache().AddEventHandler(c.ifaces.gen.handler())
	return c, nil
}

// Close ends the calls still running (they return ErrClosed) and
// disconnects.
func (c *Client) Close() {
	c.endLife()
	c.ovs.Close()
}

// ErrClosed is returned by a call the Client's Close ended.
var ErrClosed = errors.New("ovsdb client closed")

// ConnectionLost reports whether err says that ovsdb-server was not there
// to answer: the connection closed or reset under the call, the client
// not connected (reconnecting) or closed. It is what a client sees when
// ovsdb-server stops, as opposed to an answer of the server (a refused
// transaction) or a fault of the caller.
func ConnectionLost(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, client.ErrNotConnected) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// bounded runs call, which talks to libovsdb, and returns when call does
// or when ctx ends (ctx's error) or Close is called (ErrClosed), whichever
// comes first. libovsdb v0.7.0 does not always stop at its context's end
// while it reconnects: a transaction waits for the connection lock that a
// reconnection attempt holds until the attempt's own timeout (10 s; an
// ovsdb-server that accepts connections but does not answer), and a
// stopping agent, whose ovsdb-server stops with its pod, must not wait
// for that. call gets a context that ends with ctx and with Close, so an
// abandoned call finishes as soon as libovsdb lets it: within one
// reconnection attempt.
func (c *Client) bounded(ctx context.Context, call func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ovsdb: %w", err)
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.life, cancel)
	defer stop()
	done := make(chan error, 1)
	c.inFlight.Add(1)
	go func() {
		defer c.inFlight.Add(-1)
		done <- call(callCtx)
	}()
	select {
	case err := <-done:
		return err
	case <-callCtx.Done():
	}
	if ctx.Err() == nil {
		return ErrClosed
	}
	// A call that heeds its context returns at once, with an error that
	// says what it waited for.
	select {
	case err := <-done:
		return err
	case <-time.After(heedGrace):
		return fmt.Errorf("ovsdb: no answer before the context ended: %w", ctx.Err())
	}
}

// boundedValue is bounded for a call with a result, read only once the
// call returned (an abandoned call may still write it).
func boundedValue[T any](c *Client, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	var out T
	err := c.bounded(ctx, func(ctx context.Context) (err error) {
		out, err = call(ctx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// heedGrace is how long bounded waits, once the caller's context ended,
// for a call that heeds it to return its own error.
const heedGrace = 100 * time.Millisecond

// root returns the Open_vSwitch row. libovsdb's List waits while it
// reconnects (its cache is being rebuilt) until ctx ends, and then reads
// the stale cache: so ctx's end is an error here.
func (c *Client) root(ctx context.Context) (*OpenvSwitch, error) {
	var rows []OpenvSwitch
	if err := c.ovs.List(ctx, &rows); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ovsdb: reading the Open_vSwitch row: %w", err)
	}
	if len(rows) != 1 {
		return nil, fmt.Errorf("Open_vSwitch table has %d rows, want 1 (run ovs-vsctl init)", len(rows))
	}
	return &rows[0], nil
}

// transact runs ops, checks every result, and (unless NoWait) waits for
// ovs-vswitchd to apply the change.
func (c *Client) transact(ctx context.Context, ops ...libovsdb.Operation) ([]libovsdb.OperationResult, error) {
	selectCfg := -1
	if !c.opts.NoWait {
		// Like ovs-vsctl: bump next_cfg and read it back in the same
		// transaction (the cache may lag), then wait for cur_cfg to reach it.
		root, err := c.root(ctx)
		if err != nil {
			return nil, err
		}
		mutate, err := c.ovs.Where(root).Mutate(root, model.Mutation{Field: &root.NextCfg, Mutator: libovsdb.MutateOperationAdd, Value: 1})
		if err != nil {
			return nil, err
		}
		ops = append(ops, mutate...)
		ops = append(ops, libovsdb.Operation{Op: libovsdb.OperationSelect, Table: tableOpenvSwitch,
			Where:   []libovsdb.Condition{{Column: "_uuid", Function: libovsdb.ConditionEqual, Value: libovsdb.UUID{GoUUID: root.UUID}}},
			Columns: []string{"next_cfg"}})
		selectCfg = len(ops) - 1
	}
	res, err := c.ovs.Transact(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("ovsdb transact: %w", err)
	}
	if _, err := libovsdb.CheckOperationResults(res, ops); err != nil {
		return nil, fmt.Errorf("ovsdb transact: %w", err)
	}
	var wantCfg int
	if selectCfg >= 0 {
		if len(res) <= selectCfg || len(res[selectCfg].Rows) != 1 {
			return nil, errors.New("ovsdb transact: no next_cfg in reply")
		}
		switch v := res[selectCfg].Rows[0]["next_cfg"].(type) {
		case float64:
			wantCfg = int(v)
		case int:
			wantCfg = v
		default:
			return nil, fmt.Errorf("ovsdb transact: next_cfg is %T", v)
		}
	}
	if !c.opts.NoWait {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.opts.WaitTimeout)
			defer cancel()
		}
		if err := c.waitCurCfg(ctx, wantCfg); err != nil {
			return res, err
		}
	}
	return res, nil
}

// waitCurCfg waits until ovs-vswitchd reports cur_cfg >= want.
func (c *Client) waitCurCfg(ctx context.Context, want int) error {
	return c.poll(ctx, func() (bool, error) {
		root, err := c.root(ctx)
		if err != nil {
			return false, err
		}
		return root.CurCfg >= want, nil
	}, "ovs-vswitchd to apply the change (is it running?)")
}

// poll evaluates cond against the cache until it holds or ctx ends.
func (c *Client) poll(ctx context.Context, cond func() (bool, error), what string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			if ctx.Err() != nil { // root found ctx ended
				return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			}
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// ErrNotFound is returned for a missing bridge, port or interface.
var ErrNotFound = errors.New("not found")

// list reads the cached rows that pred (a func(*Model) bool) selects into
// rows (a pointer to a slice of Model): how this package reads the cache
// (root aside). Unlike libovsdb's List, which waits while the client
// reconnects for the cache to be rebuilt, it reads the cache as it is:
// the rows of before the connection dropped (or none, in the moment
// between a reconnection's purge and refill). The Watcher's state is
// that cache too, and an agent's realization goes on while only
// ovsdb-server restarts (ovs-vswitchd keeps its ports and takes flows).
// Exported reads run it through bounded with their caller's context; the
// others run inside a call already bounded.
func (c *Client) list(ctx context.Context, pred any, rows any) error {
	return c.ovs.WhereCache(pred).List(ctx, rows)
}

// Bridge returns the bridge named name from the cache.
func (c *Client) Bridge(ctx context.Context, name string) (*Bridge, error) {
	return boundedValue(c, ctx, func(ctx context.Context) (*Bridge, error) { return c.bridge(ctx, name) })
}

func (c *Client) bridge(ctx context.Context, name string) (*Bridge, error) {
	var rows []Bridge
	err := c.list(ctx, func(b *Bridge) bool { return b.Name == name }, &rows)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("bridge %s: %w", name, ErrNotFound)
	}
	return &rows[0], nil
}

// BridgeConfig is the wanted configuration of tierflow's bridge.
type BridgeConfig struct {
	Name string
	// DatapathType is "system" (kernel datapath, the default) or "netdev"
	// (userspace).
	DatapathType string
	// Protocols default to OpenFlow13; OpenFlow13 is always included
	// because the openflow client speaks only 1.3.
	Protocols   []string
	ExternalIDs map[string]string
	// Standalone makes the bridge a plain learning switch when it has no
	// flows of a controller (fail_mode=standalone), for a bridge no
	// OpenFlow client programs; by default it is secure: no forwarding
	// without flows.
	Standalone bool
	// OtherConfig keys given are merged in (e.g. hwaddr, the MAC address
	// of the bridge's own interface).
	OtherConfig map[string]string
}

func (cfg *BridgeConfig) normalize() error {
	if cfg.Name == "" {
		return errors.New("bridge name is empty")
	}
	switch cfg.DatapathType {
	case "":
		cfg.DatapathType = "system"
	case "system", "netdev":
	default:
		return fmt.Errorf("datapath type %q: want system or netdev", cfg.DatapathType)
	}
	protos := map[string]bool{"OpenFlow13": true}
	for _, p := range cfg.Protocols {
		switch p {
		case "OpenFlow13", "OpenFlow14", "OpenFlow15":
			protos[p] = true
		default:
			return fmt.Errorf("protocol %q: want OpenFlow13 or later", p)
		}
	}
	cfg.Protocols = cfg.Protocols[:0]
	for p := range protos {
		cfg.Protocols = append(cfg.Protocols, p)
	}
	sort.Strings(cfg.Protocols)
	return nil
}

// EnsureBridge creates the bridge, or adopts an existing one by setting its
// datapath type, fail_mode=secure (no forwarding without flows: a bridge
// without policy flows must not pass traffic; standalone if asked) and
// protocols. External IDs and other_config keys given are merged in. It
// reports whether the bridge was created.
func (c *Client) EnsureBridge(ctx context.Context, cfg BridgeConfig) (bool, error) {
	return boundedValue(c, ctx, func(ctx context.Context) (bool, error) { return c.ensureBridge(ctx, cfg) })
}

func (c *Client) ensureBridge(ctx context.Context, cfg BridgeConfig) (bool, error) {
	if err := cfg.normalize(); err != nil {
		return false, err
	}
	failMode := "secure"
	if cfg.Standalone {
		failMode = "standalone"
	}
	existing, err := c.bridge(ctx, cfg.Name)
	if err == nil {
		br := *existing
		br.DatapathType = cfg.DatapathType
		br.FailMode = &failMode
		br.Protocols = cfg.Protocols
		br.ExternalIDs = merged(br.ExternalIDs, cfg.ExternalIDs)
		br.OtherConfig = merged(br.OtherConfig, cfg.OtherConfig)
		ops, err := c.ovs.Where(&br).Update(&br, &br.DatapathType, &br.FailMode, &br.Protocols, &br.ExternalIDs, &br.OtherConfig)
		if err != nil {
			return false, err
		}
		if _, err := c.transact(ctx, ops...); err != nil {
			return false, fmt.Errorf("adopt bridge %s: %w", cfg.Name, err)
		}
		return false, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	// Like ovs-vsctl add-br: the bridge, its internal port and interface.
	iface := &Interface{UUID: "newiface", Name: cfg.Name, Type: "internal"}
	port := &Port{UUID: "newport", Name: cfg.Name, Interfaces: []string{iface.UUID}}
	br := &Bridge{UUID: "newbridge", Name: cfg.Name, Ports: []string{port.UUID}, DatapathType: cfg.DatapathType,
		FailMode: &failMode, Protocols: cfg.Protocols, ExternalIDs: cfg.ExternalIDs, OtherConfig: cfg.OtherConfig}
	ops, err := c.ovs.Create(iface, port, br)
	if err != nil {
		return false, err
	}
	root, err := c.root(ctx)
	if err != nil {
		return false, err
	}
	mutate, err := c.ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: libovsdb.MutateOperationInsert, Value: []string{br.UUID}})
	if err != nil {
		return false, err
	}
	if _, err := c.transact(ctx, append(ops, mutate...)...); err != nil {
		return false, fmt.Errorf("create bridge %s: %w", cfg.Name, err)
	}
	return true, nil
}

// merged returns base with add's keys set (a new map: base may be the
// cache's).
func merged(base, add map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(add))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range add {
		out[k] = v
	}
	return out
}

// SetBridgeExternalIDs merges ids into a bridge's external_ids.
func (c *Client) SetBridgeExternalIDs(ctx context.Context, name string, ids map[string]string) error {
	return c.bounded(ctx, func(ctx context.Context) error { return c.setBridgeExternalIDs(ctx, name, ids) })
}

func (c *Client) setBridgeExternalIDs(ctx context.Context, name string, ids map[string]string) error {
	cur, err := c.bridge(ctx, name)
	if err != nil {
		return err
	}
	br := &Bridge{UUID: cur.UUID, ExternalIDs: merged(cur.ExternalIDs, ids)}
	ops, err := c.ovs.Where(br).Update(br, &br.ExternalIDs)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, ops...)
	return err
}

// DeleteBridge removes a bridge with its ports; a missing bridge is not an
// error.
func (c *Client) DeleteBridge(ctx context.Context, name string) error {
	return c.bounded(ctx, func(ctx context.Context) error { return c.deleteBridge(ctx, name) })
}

func (c *Client) deleteBridge(ctx context.Context, name string) error {
	br, err := c.bridge(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	root, err := c.root(ctx)
	if err != nil {
		return err
	}
	ops, err := c.ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: libovsdb.MutateOperationDelete, Value: []string{br.UUID}})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, ops...)
	return err
}

// PortType is an interface type.
type PortType string

const (
	// PortSystem attaches an existing network device (e.g. a veth end).
	PortSystem PortType = ""
	// PortInternal is a device created by OVS.
	PortInternal PortType = "internal"
	// PortPatch connects two bridges; PortConfig.Peer names the other end.
	PortPatch PortType = "patch"
	// PortGeneve and PortVXLAN are tunnel ports; PortConfig.Options
	// configure them (remote_ip, key, dst_port, ...).
	PortGeneve PortType = "geneve"
	PortVXLAN  PortType = "vxlan"
)

// PortConfig describes a port with a single interface of the same name.
type PortConfig struct {
	Name string
	Type PortType
	// Peer is the peer port of a patch port.
	Peer string
	// OFPortRequest asks ovs-vswitchd for this ofport (1-65279); 0: any.
	OFPortRequest int
	// Options of a tunnel port.
	Options map[string]string
	// MTURequest asks ovs-vswitchd to set the interface's MTU; 0: OVS
	// decides.
	MTURequest int
	// ExternalIDs of the interface (see the tierflow.io/ keys).
	ExternalIDs map[string]string
}

// AddPort adds a port to a bridge, or updates it (type, peer, requested
// ofport, external IDs) if the bridge already has it.
func (c *Client) AddPort(ctx context.Context, bridge string, cfg PortConfig) error {
	return c.bounded(ctx, func(ctx context.Context) error { return c.addPort(ctx, bridge, cfg) })
}

func (c *Client) addPort(ctx context.Context, bridge string, cfg PortConfig) error {
	if cfg.Name == "" {
		return errors.New("port name is empty")
	}
	var options map[string]string
	switch cfg.Type {
	case PortSystem, PortInternal:
		if cfg.Peer != "" {
			return fmt.Errorf("port %s: Peer only applies to patch ports", cfg.Name)
		}
	case PortPatch:
		if cfg.Peer == "" {
			return fmt.Errorf("patch port %s needs a Peer", cfg.Name)
		}
		options = map[string]string{"peer": cfg.Peer}
	case PortGeneve, PortVXLAN:
		if cfg.Peer != "" {
			return fmt.Errorf("port %s: Peer only applies to patch ports", cfg.Name)
		}
		options = cfg.Options
	default:
		return fmt.Errorf("port %s: unsupported type %q", cfg.Name, cfg.Type)
	}
	if cfg.OFPortRequest < 0 || cfg.OFPortRequest > 65279 {
		return fmt.Errorf("port %s: ofport request %d out of range 1-65279", cfg.Name, cfg.OFPortRequest)
	}
	if len(cfg.Options) > 0 && cfg.Type != PortGeneve && cfg.Type != PortVXLAN {
		return fmt.Errorf("port %s: Options only apply to tunnel ports", cfg.Name)
	}
	if cfg.MTURequest < 0 || cfg.MTURequest > 65535 {
		return fmt.Errorf("port %s: MTU request %d out of range", cfg.Name, cfg.MTURequest)
	}
	br, err := c.bridge(ctx, bridge)
	if err != nil {
		return err
	}
	iface := &Interface{Name: cfg.Name, Type: string(cfg.Type), Options: options, ExternalIDs: cfg.ExternalIDs}
	if cfg.OFPortRequest > 0 {
		req := cfg.OFPortRequest
		iface.OFPortRequest = &req
	}
	if cfg.MTURequest > 0 {
		mtu := cfg.MTURequest
		iface.MTURequest = &mtu
	}
	if _, err := c.portOnBridge(ctx, br, cfg.Name); err == nil {
		cur, err := c.iface(ctx, cfg.Name)
		if err != nil {
			return err
		}
		iface.UUID = cur.UUID
		ops, err := c.ovs.Where(iface).Update(iface, &iface.Type, &iface.Options, &iface.ExternalIDs, &iface.OFPortRequest, &iface.MTURequest)
		if err != nil {
			return err
		}
		_, err = c.transact(ctx, ops...)
		return err
	}
	iface.UUID = "newiface"
	port := &Port{UUID: "newport", Name: cfg.Name, Interfaces: []string{iface.UUID}}
	ops, err := c.ovs.Create(iface, port)
	if err != nil {
		return err
	}
	mutate, err := c.ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: libovsdb.MutateOperationInsert, Value: []string{port.UUID}})
	if err != nil {
		return err
	}
	if _, err := c.transact(ctx, append(ops, mutate...)...); err != nil {
		return fmt.Errorf("add port %s to %s: %w", cfg.Name, bridge, err)
	}
	return nil
}

func (c *Client) portOnBridge(ctx context.Context, br *Bridge, name string) (*Port, error) {
	var rows []Port
	err := c.list(ctx, func(p *Port) bool { return p.Name == name }, &rows)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		for _, u := range br.Ports {
			if u == rows[i].UUID {
				return &rows[i], nil
			}
		}
	}
	return nil, fmt.Errorf("port %s on bridge %s: %w", name, br.Name, ErrNotFound)
}

// DeletePort removes a port from a bridge; a missing port is not an error.
func (c *Client) DeletePort(ctx context.Context, bridge, name string) error {
	return c.bounded(ctx, func(ctx context.Context) error { return c.deletePort(ctx, bridge, name) })
}

func (c *Client) deletePort(ctx context.Context, bridge, name string) error {
	br, err := c.bridge(ctx, bridge)
	if err != nil {
		return err
	}
	port, err := c.portOnBridge(ctx, br, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// Port and Interface rows are garbage-collected once unreferenced.
	ops, err := c.ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: libovsdb.MutateOperationDelete, Value: []string{port.UUID}})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, ops...)
	return err
}

// Interface returns the interface named name from the cache.
func (c *Client) Interface(ctx context.Context, name string) (*Interface, error) {
	return boundedValue(c, ctx, func(ctx context.Context) (*Interface, error) { return c.iface(ctx, name) })
}

func (c *Client) iface(ctx context.Context, name string) (*Interface, error) {
	var rows []Interface
	err := c.list(ctx, func(i *Interface) bool { return i.Name == name }, &rows)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("interface %s: %w", name, ErrNotFound)
	}
	return &rows[0], nil
}

// SetInterfaceExternalIDs replaces an interface's external_ids.
func (c *Client) SetInterfaceExternalIDs(ctx context.Context, name string, ids map[string]string) error {
	return c.bounded(ctx, func(ctx context.Context) error { return c.setInterfaceExternalIDs(ctx, name, ids) })
}

func (c *Client) setInterfaceExternalIDs(ctx context.Context, name string, ids map[string]string) error {
	cur, err := c.iface(ctx, name)
	if err != nil {
		return err
	}
	iface := &Interface{UUID: cur.UUID, ExternalIDs: ids}
	if iface.ExternalIDs == nil {
		iface.ExternalIDs = map[string]string{}
	}
	ops, err := c.ovs.Where(iface).Update(iface, &iface.ExternalIDs)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, ops...)
	return err
}

// SetInterfaceExternalID sets one external_ids key of an interface,
// leaving the others as they are. ovs-vswitchd does not read
// external_ids, so the change is not waited for.
func (c *Client) SetInterfaceExternalID(ctx context.Context, name, key, value string) error {
	return c.bounded(ctx, func(ctx context.Context) error { return c.setInterfaceExternalID(ctx, name, key, value) })
}

func (c *Client) setInterfaceExternalID(ctx context.Context, name, key, value string) error {
	cur, err := c.iface(ctx, name)
	if err != nil {
		return err
	}
	iface := &Interface{UUID: cur.UUID}
	del, err := c.ovs.Where(iface).Mutate(iface, model.Mutation{Field: &iface.ExternalIDs, Mutator: libovsdb.MutateOperationDelete, Value: []string{key}})
	if err != nil {
		return err
	}
	ins, err := c.ovs.Where(iface).Mutate(iface, model.Mutation{Field: &iface.ExternalIDs, Mutator: libovsdb.MutateOperationInsert, Value: map[string]string{key: value}})
	if err != nil {
		return err
	}
	ops := append(del, ins...)
	res, err := c.ovs.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("ovsdb transact: %w", err)
	}
	if _, err := libovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("ovsdb transact: %w", err)
	}
	return nil
}

// WaitOFPort waits until ovs-vswitchd assigned an OpenFlow port number to
// the interface, and returns it. An interface ovs-vswitchd could not open
// (ofport -1) fails with its error column.
func (c *Client) WaitOFPort(ctx context.Context, name string) (uint32, error) {
	return boundedValue(c, ctx, func(ctx context.Context) (uint32, error) { return c.waitOFPort(ctx, name) })
}

func (c *Client) waitOFPort(ctx context.Context, name string) (uint32, error) {
	var port uint32
	err := c.poll(ctx, func() (bool, error) {
		iface, err := c.iface(ctx, name)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if iface.OFPort == nil {
			return false, nil
		}
		if *iface.OFPort < 0 {
			msg := "no error reported"
			if iface.Error != nil {
				msg = *iface.Error
			}
			return false, fmt.Errorf("interface %s has no ofport: %s", name, msg)
		}
		if *iface.OFPort > 0 {
			port = uint32(*iface.OFPort)
			return true, nil
		}
		return false, nil
	}, "an ofport for interface "+name)
	return port, err
}

// PortBridge returns the name of the bridge holding the port named name,
// or "" when no bridge does.
func (c *Client) PortBridge(ctx context.Context, name string) (string, error) {
	return boundedValue(c, ctx, func(ctx context.Context) (string, error) {
		var ports []Port
		if err := c.list(ctx, func(p *Port) bool { return p.Name == name }, &ports); err != nil {
			return "", err
		}
		if len(ports) == 0 {
			return "", nil
		}
		uuids := map[string]bool{}
		for _, p := range ports {
			uuids[p.UUID] = true
		}
		var bridges []Bridge
		if err := c.list(ctx, func(b *Bridge) bool { return slices.ContainsFunc(b.Ports, func(u string) bool { return uuids[u] }) }, &bridges); err != nil {
			return "", err
		}
		if len(bridges) == 0 {
			return "", nil
		}
		return bridges[0].Name, nil
	})
}
