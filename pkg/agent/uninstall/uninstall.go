package uninstall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/tierflow/tierflow/pkg/agent/nodenet"
	"github.com/tierflow/tierflow/pkg/cni/hostguard"
	"github.com/tierflow/tierflow/pkg/config"
	"github.com/tierflow/tierflow/pkg/config/cniinstall"
	"github.com/tierflow/tierflow/pkg/ovs/ovsctl"
)

// ErrOVSRunning: tierflow's OVS still answers on its OVSDB socket; the
// release manifest has not been deleted (or its pods are still stopping).
var ErrOVSRunning = errors.New("tierflow's OVS is still running on this node")

// Options say what belongs to tierflow on the node.
type Options struct {
	// Agent is the agent's configuration: bridge and gateway names, the
	// OVSDB socket, the CNI directories.
	Agent *config.Agent
	// CNISourceDir holds tierflow's copies of the CNI plugins (the image's
	// /usr/local/lib/tierflow/cni): a node's host-local or loopback is
	// removed only if it is byte-identical to tierflow's.
	CNISourceDir string
	// OVSDatabase is the database file of tierflow's OVS, read without a
	// server for the interfaces OVS created ("" or missing: only the
	// bridge, the gateway and ovs-netdev are looked for).
	OVSDatabase string
	// Remove are directories deleted at the end (absolute, never "/").
	Remove []string
	// NetNS is the node's network namespace ("": this process's); tests.
	NetNS string
	// KernelModuleDir is where the openvswitch module shows when loaded
	// (default /sys/module/openvswitch): without it there is no kernel
	// datapath to clean.
	KernelModuleDir string
}

// netdevDatapathPort is the userspace datapath's own tap device.
const netdevDatapathPort = "ovs-netdev"

// Run removes tierflow's state from the node and returns what it removed.
func Run(ctx context.Context, o Options) ([]string, error) {
	if o.Agent == nil {
		return nil, errors.New("uninstall: no agent configuration")
	}
	for _, d := range o.Remove {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			return nil, fmt.Errorf("uninstall: will not remove %q (an absolute directory other than / is required)", d)
		}
	}
	if running, err := ovsRunning(o.Agent.OVSDBSocketPath()); err != nil {
		return nil, err
	} else if running {
		return nil, fmt.Errorf("%w: it answers on %s; delete the release manifest and wait for its agent pods to go first", ErrOVSRunning, o.Agent.OVSDBSocketPath())
	}
	var removed []string
	var errs []error
	step := func(r []string, err error) {
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	ifaces, err := ovsInterfaces(ctx, o.OVSDatabase)
	if err != nil {
		errs = append(errs, err)
	}
	// The node's addresses before anything else: with them on the
	// underlay bridge's device, deleted below, the node would have none.
	step(revertUnderlay(ctx, o))
	// Routes first: those via the gateway would go with it, unreported.
	step(nodenet.Cleanup(o.NetNS))
	owned := ownedDevices(o.Agent, ifaces)
	step(removeKernelDatapathPorts(ctx, o.moduleDir(), ifaces, owned))
	step(removeLinks(o.NetNS, owned))
	if ok, err := hostguard.RemoveTable(o.NetNS); ok {
		step([]string{"netdev nftables table " + hostguard.Table}, err)
	} else {
		step(nil, err)
	}
	step(cniinstall.Uninstall(o.Agent, o.CNISourceDir))
	for _, d := range o.Remove {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, d)
	}
	return removed, errors.Join(errs...)
}

func (o Options) moduleDir() string {
	if o.KernelModuleDir != "" {
		return o.KernelModuleDir
	}
	return "/sys/module/openvswitch"
}

// ovsRunning reports whether an OVSDB server accepts connections on
// socket (a socket file left by a stopped server refuses them).
func ovsRunning(socket string) (bool, error) {
	c, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err == nil {
		c.Close()
		return true, nil
	}
	if _, serr := os.Stat(socket); serr != nil && !errors.Is(serr, os.ErrNotExist) {
		return false, fmt.Errorf("uninstall: OVSDB socket %s: %w", socket, serr)
	}
	return false, nil
}

// ovsInterfaces reads the interfaces of tierflow's OVS database file.
func ovsInterfaces(ctx context.Context, db string) ([]ovsctl.Interface, error) {
	if db == "" {
		return nil, nil
	}
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := ovsctl.Run(ctx, nil, "ovsdb-tool", ovsctl.QueryInterfacesArgs(db)...)
	if err != nil {
		return nil, fmt.Errorf("reading tierflow's OVS database: %w", err)
	}
	return ovsctl.ParseQueryInterfaces(out)
}

// revertUnderlay moves the node's addresses and routes back from the
// underlay bridge's device to the network interface they came from (encap
// mode with the userspace datapath), as the bridge's record in the
// database file says. A stopping agent does that itself; after one that
// crashed or was killed the node's addresses are still on the bridge's
// device, which OVS no longer serves.
func revertUnderlay(ctx context.Context, o Options) ([]string, error) {
	bridge := o.Agent.NodeNetwork.UnderlayBridge
	if o.OVSDatabase == "" || bridge == "" {
		return nil, nil
	}
	if _, err := os.Stat(o.OVSDatabase); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := ovsctl.Run(ctx, nil, "ovsdb-tool", ovsctl.QueryBridgeExternalIDsArgs(o.OVSDatabase, bridge)...)
	if err != nil {
		return nil, fmt.Errorf("reading tierflow's OVS database: %w", err)
	}
	ids, err := ovsctl.ParseQueryBridgeExternalIDs(out)
	if err != nil {
		return nil, fmt.Errorf("reading tierflow's OVS database: %w", err)
	}
	iface, err := nodenet.RevertUnderlayHost(bridge, o.NetNS, ids)
	if iface == "" {
		return nil, err
	}
	return []string{"the node's addresses and routes moved back from " + bridge + " to " + iface}, err
}

// ownedDevices are the host devices tierflow's OVS created: its bridge's
// and gateway's interfaces, every other internal port of its database,
// and the userspace datapath's own device. A pod's veth (type "") is the
// pod's: it goes with the pod.
func ownedDevices(agent *config.Agent, ifaces []ovsctl.Interface) []string {
	names := []string{agent.BridgeName, agent.NodeNetwork.GatewayName, netdevDatapathPort}
	for _, i := range ifaces {
		if i.Type == "internal" && !slices.Contains(names, i.Name) {
			names = append(names, i.Name)
		}
	}
	return names
}

// removeKernelDatapathPorts removes tierflow's ports from the openvswitch
// module's datapaths: a datapath whose every port is tierflow's (its
// database's interfaces, devices it owns, tunnel vports) goes whole,
// otherwise only the devices tierflow owns leave it.
func removeKernelDatapathPorts(ctx context.Context, moduleDir string, ifaces []ovsctl.Interface, owned []string) ([]string, error) {
	if _, err := os.Stat(moduleDir); err != nil {
		return nil, nil
	}
	out, err := ovsctl.Run(ctx, nil, "ovs-dpctl", ovsctl.DpctlShowArgs()...)
	if err != nil {
		return nil, fmt.Errorf("kernel datapath: %w", err)
	}
	known := slices.Clone(owned)
	for _, i := range ifaces {
		known = append(known, i.Name)
	}
	var removed []string
	var errs []error
	for _, dp := range ovsctl.ParseDpctlShow(out) {
		whole := true
		for _, p := range dp.Ports {
			if p != dp.Name && !slices.Contains(known, p) && !isTunnelVport(p) {
				whole = false
			}
		}
		if whole {
			if _, err := ovsctl.Run(ctx, nil, "ovs-dpctl", "del-dp", dp.Name); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "kernel datapath "+dp.Name+" ("+strings.Join(dp.Ports, ", ")+")")
			continue
		}
		for _, p := range dp.Ports {
			if p == dp.Name || !slices.Contains(owned, p) {
				continue
			}
			if _, err := ovsctl.Run(ctx, nil, "ovs-dpctl", "del-if", dp.Name, p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "kernel datapath port "+dp.Name+"/"+p)
		}
	}
	return removed, errors.Join(errs...)
}

// isTunnelVport: the kernel devices the openvswitch module creates for
// tunnel ports (genev_sys_6081, vxlan_sys_4789, gre_sys, ...).
func isTunnelVport(name string) bool { return strings.Contains(name, "_sys") }

// removeLinks deletes the devices tierflow owns that are still there (the
// userspace datapath's taps outlive ovs-vswitchd). A kernel datapath port
// cannot be deleted this way: it is reported if the datapath kept it.
func removeLinks(nsPath string, names []string) ([]string, error) {
	h, err := handle(nsPath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var removed []string
	var errs []error
	for _, name := range names {
		link, err := h.LinkByName(name)
		if err != nil {
			var notFound netlink.LinkNotFoundError
			if !errors.As(err, &notFound) {
				errs = append(errs, fmt.Errorf("device %s: %w", name, err))
			}
			continue
		}
		if link.Type() == "openvswitch" {
			errs = append(errs, fmt.Errorf("device %s is still a port of a kernel datapath", name))
			continue
		}
		if err := h.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("deleting device %s: %w", name, err))
			continue
		}
		removed = append(removed, "device "+name)
	}
	return removed, errors.Join(errs...)
}

func handle(nsPath string) (*netlink.Handle, error) {
	if nsPath == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// Flags are the arguments of `tierflow-agent cleanup` besides the
// agent's configuration (config.BindAgent).
type Flags struct {
	CNISourceDir string
	OVSDatabase  string
	Remove       []string
	// Wait is how long the command waits for tierflow's OVS to stop.
	Wait time.Duration
}

// BindFlags defines the command's flags in fs.
func BindFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.CNISourceDir, "cni-source-dir", "/usr/local/lib/tierflow/cni", "tierflow's copies of the CNI plugins (a node's own host-local and loopback stay)")
	fs.StringVar(&f.OVSDatabase, "ovs-db", "/var/lib/tierflow/ovs/conf.db", "the database file of tierflow's OVS (read for the devices OVS created)")
	fs.StringArrayVar(&f.Remove, "remove", nil, "a directory to delete at the end (repeatable)")
	fs.DurationVar(&f.Wait, "wait", 2*time.Minute, "how long to wait for tierflow's OVS to stop")
	return f
}

// Options returns the options of Run for the agent's configuration.
func (f *Flags) Options(agent *config.Agent) Options {
	return Options{Agent: agent, CNISourceDir: f.CNISourceDir, OVSDatabase: f.OVSDatabase, Remove: f.Remove}
}
