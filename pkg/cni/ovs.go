package cni

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// ovsdbTimeout bounds connecting to OVSDB and every call, so that a dead
// ovsdb-server or ovs-vswitchd turns into an error instead of a hung
// runtime (a CNI command has no context of its own).
const ovsdbTimeout = 20 * time.Second

// ovsdbCallCtx is the context of one OVSDB call: it ends after ovsdbTimeout.
func ovsdbCallCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), ovsdbTimeout)
}

// ovsDB is the plugin's view of the node's Open_vSwitch database. It talks
// OVSDB over the socket itself: a CNI plugin runs in the node's own
// environment (the container runtime's), where no ovs-vsctl is installed.
type ovsDB struct {
	endpoint string
	client   *ovsdb.Client
}

func openOVSDB(endpoint string) (*ovsDB, error) {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	c, err := ovsdb.Connect(ctx, endpoint, ovsdb.Options{WaitTimeout: ovsdbTimeout})
	if err != nil {
		return nil, err
	}
	return &ovsDB{endpoint: endpoint, client: c}, nil
}

func (o *ovsDB) close() { o.client.Close() }

// bridgeExists reports whether bridge exists.
func (o *ovsDB) bridgeExists(bridge string) (bool, error) {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	_, err := o.client.Bridge(ctx, bridge)
	if errors.Is(err, ovsdb.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// datapathType returns the bridge's datapath_type ("" or "system" for the
// kernel datapath; "netdev" for the userspace one).
func (o *ovsDB) datapathType(bridge string) (string, error) {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	br, err := o.client.Bridge(ctx, bridge)
	if err != nil {
		return "", err
	}
	return br.DatapathType, nil
}

// addPort adds port to bridge with its Interface external_ids in one
// transaction, so the agent never sees the port without its pod identity,
// and waits until ovs-vswitchd has applied it.
func (o *ovsDB) addPort(bridge, port string, externalIDs map[string]string) error {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	return o.client.AddPort(ctx, bridge, ovsdb.PortConfig{Name: port, Type: ovsdb.PortSystem, ExternalIDs: externalIDs})
}

// delPort removes port from whatever bridge holds it; a missing port is not
// an error.
func (o *ovsDB) delPort(port string) error {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	br, err := o.client.PortBridge(ctx, port)
	if err != nil || br == "" {
		return err
	}
	return o.client.DeletePort(ctx, br, port)
}

// portBridge returns the bridge holding port, or "" if there is no such
// port.
func (o *ovsDB) portBridge(port string) (string, error) {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	return o.client.PortBridge(ctx, port)
}

// interfaceExternalIDs reads the external_ids of the Interface named name.
func (o *ovsDB) interfaceExternalIDs(name string) (map[string]string, error) {
	ctx, cancel := ovsdbCallCtx()
	defer cancel()
	iface, err := o.client.Interface(ctx, name)
	if errors.Is(err, ovsdb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	return iface.ExternalIDs, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// waitAdmitted waits until the agent marks port admitted (its
// external_ids, ovsdb.KeyAdmission) and returns "" then; otherwise, at
// timeout, what the agent last wrote ("" when it wrote nothing).
func (o *ovsDB) waitAdmitted(port string, timeout time.Duration) (string, bool) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var last string
	for {
		if iface, err := o.client.Interface(ctx, port); err == nil {
			last = iface.ExternalIDs[ovsdb.KeyAdmission]
			if last == ovsdb.AdmissionAdmitted {
				return "", true
			}
		}
		if time.Now().After(deadline) {
			return last, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
