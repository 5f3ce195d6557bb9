package cni

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"

	"github.com/tierflow/tierflow/pkg/cni/hostguard"
	"github.com/tierflow/tierflow/pkg/ovs/ovsdb"
)

// Interface external_ids tierflow-cni sets on the host end's OVS Interface.
// The first five identify the pod for the agent and are defined by package
// ovsdb (the contract the agent reads); the last two let CHECK and
// operators find the CNI attachment a port belongs to.
const (
	ExternalIDPodNamespace = ovsdb.KeyPodNamespace
	ExternalIDPodName      = ovsdb.KeyPodName
	ExternalIDPodIPs       = ovsdb.KeyPodIPs
	ExternalIDPodMAC       = ovsdb.KeyPodMAC
	ExternalIDPodUID       = ovsdb.KeyPodUID
	ExternalIDContainerID  = "tierflow.io/container-id"
	ExternalIDIfName       = "tierflow.io/container-ifname"
)

// HostVethName is the name of the host end of the veth for one attachment:
// "tf" and 12 hex digits of a hash of the container ID and interface name,
// 14 characters (the kernel allows 15). It is a pure function so that DEL
// and CHECK find the veth and the OVS port without any saved state.
func HostVethName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifName))
	return "tf" + hex.EncodeToString(sum[:])[:12]
}

// Funcs are the plugin's commands for skel.PluginMainFuncs.
func Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: Add, Del: Del, Check: Check, Status: Status}
}

// VersionInfo lists the CNI spec versions the plugin supports.
func VersionInfo() version.PluginInfo { return version.All }

// Add attaches the pod's network namespace to the bridge.
func Add(args *skel.CmdArgs) (retErr error) {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	k8s, err := parseK8sArgs(args.Args)
	if err != nil {
		return err
	}
	ovs, err := connectOVSDB(conf)
	if err != nil {
		return err
	}
	defer ovs.close()
	if err := requireBridge(ovs, conf.Bridge); err != nil {
		return err
	}
	userspace, err := userspaceDatapath(ovs, conf.Bridge)
	if err != nil {
		return err
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("failed to open network namespace %q", args.Netns), err.Error())
	}
	defer netns.Close()

	// Refuse before any side effect if the interface is already there: a
	// repeated ADD must not have its rollback release the addresses the
	// first ADD allocated under the same container ID.
	if err := netns.Do(func(ns.NetNS) error {
		if _, err := netlinksafe.LinkByName(args.IfName); err == nil {
			return types.NewError(types.ErrInternal,
				fmt.Sprintf("interface %q already exists in %s", args.IfName, args.Netns), "")
		}
		return nil
	}); err != nil {
		return err
	}

	hostName := HostVethName(args.ContainerID, args.IfName)
	var undo []func()
	defer func() {
		if retErr != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	r, err := ipam.ExecAdd(conf.IPAM.Type, args.StdinData)
	if err != nil {
		return types.NewError(ErrIPAM, fmt.Sprintf("IPAM plugin %q failed: %v", conf.IPAM.Type, errorText(err)), "")
	}
	undo = append(undo, func() { _ = ipam.ExecDel(conf.IPAM.Type, args.StdinData) })
	ipamResult, err := current.NewResultFromResult(r)
	if err != nil {
		return types.NewError(ErrIPAM, fmt.Sprintf("IPAM plugin %q returned an unusable result", conf.IPAM.Type), err.Error())
	}
	if len(ipamResult.IPs) == 0 {
		return types.NewError(ErrIPAM, fmt.Sprintf("IPAM plugin %q returned no addresses", conf.IPAM.Type), "")
	}

	var hostIf, contIf net.Interface
	err = netns.Do(func(hostNS ns.NetNS) error {
		var err error
		hostIf, contIf, err = ip.SetupVethWithName(args.IfName, hostName, conf.MTU, "", hostNS)
		return err
	})
	if err != nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("failed to create veth %s/%s", hostName, args.IfName), err.Error())
	}
	undo = append(undo, func() { _ = deleteVeth(hostName) })
	if userspace {
		// Before the pod has an address or runs anything: from the first
		// frame on, only OVS sees what the pod sends (see package hostguard).
		if err := hostguard.Install("", hostName); err != nil {
			return types.NewError(types.ErrInternal, "failed to guard the host stack from "+hostName, err.Error())
		}
		undo = append(undo, func() { _ = hostguard.Remove("", hostName) })
	}

	if err := disableTxChecksum(hostIf.Name); err != nil {
		return types.NewError(types.ErrInternal, "failed to turn off TX checksum offload on "+hostIf.Name, err.Error())
	}
	if err := netns.Do(func(ns.NetNS) error { return disableTxChecksum(args.IfName) }); err != nil {
		return types.NewError(types.ErrInternal, "failed to turn off TX checksum offload on "+args.IfName, err.Error())
	}

	result := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: hostIf.Name, Mac: hostIf.HardwareAddr.String()},
			{Name: contIf.Name, Mac: contIf.HardwareAddr.String(), Sandbox: args.Netns},
		},
		DNS: ipamResult.DNS,
	}
	for _, ipc := range ipamResult.IPs {
		c := *ipc
		c.Interface = current.Int(1)
		if conf.DefaultRoute == DefaultRouteOnLink {
			c.Gateway = nil
		}
		result.IPs = append(result.IPs, &c)
	}
	if conf.DefaultRoute == DefaultRouteOnLink {
		result.Routes = withOnLinkDefaultRoutes(result.IPs, ipamResult.Routes)
	} else {
		result.Routes = withDefaultRoutes(result.IPs, ipamResult.Routes)
	}
	if err := netns.Do(func(ns.NetNS) error {
		// Duplicate address detection would keep IPv6 addresses tentative
		// (unusable) for a second or more after ADD; the IPAM plugin already
		// guarantees them unique on this network, so skip it.
		if hasIPv6(result.IPs) {
			if _, err := sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_dad", args.IfName), "0"); err != nil {
				return fmt.Errorf("turn off duplicate address detection: %w", err)
			}
		}
		if err := ipam.ConfigureIface(args.IfName, result); err != nil {
			return err
		}
		// ConfigureIface waits for duplicate address detection only when
		// there is an IPv6 gateway; a pod must be able to use its addresses
		// when ADD returns in either mode.
		return ip.SettleAddresses(args.IfName, 10*time.Second)
	}); err != nil {
		return types.NewError(types.ErrInternal, "failed to configure addresses on "+args.IfName, err.Error())
	}

	ids := externalIDs(k8s, result.IPs, contIf.HardwareAddr.String(), args)
	if err := ovs.addPort(conf.Bridge, hostName, ids); err != nil {
		// The transaction may have been committed before the error (e.g. a
		// timeout waiting for ovs-vswitchd), so remove the port as well.
		undo = append(undo, func() {
			if br, err := ovs.portBridge(hostName); err == nil && br == conf.Bridge {
				_ = ovs.delPort(hostName)
			}
		})
		return types.NewError(ErrOVS, fmt.Sprintf("failed to add port %s to bridge %s", hostName, conf.Bridge), err.Error())
	}
	undo = append(undo, func() { _ = ovs.delPort(hostName) })
	if err := waitAdmission(ovs, conf, k8s, hostName); err != nil {
		return err
	}
	return types.PrintResult(result, conf.CNIVersion)
}

// waitAdmission waits until the agent admits the pod's port: its node's
// policy state lists the pod (by UID) with the port's addresses, and the
// flows policing it are installed (pkg/agent/runtime). The pod's
// containers must not start before: until then it has no connectivity at
// all, and what it sends is not yet denied where it should be. After
// conf's admissionTimeout ADD fails with ErrNotAdmitted and the agent's
// reason, and everything is undone: the kubelet shows the error as an
// event and retries, rather than start a pod whose network stays dark
// while, say, the controller is down. Interfaces of no pod (no pod name
// in CNI_ARGS) are not admitted by anyone and are not waited for.
func waitAdmission(ovs *ovsDB, conf *NetConf, k8s *K8sArgs, port string) error {
	if conf.admissionTimeout == 0 || k8s.K8S_POD_NAME == "" {
		return nil
	}
	why, ok := ovs.waitAdmitted(port, conf.admissionTimeout)
	if ok {
		return nil
	}
	if why == "" {
		why = "the agent wrote nothing (is tierflow-agent running on this node?)"
	}
	return types.NewError(ErrNotAdmitted, fmt.Sprintf("pod %s/%s not admitted by tierflow-agent within %v", k8s.K8S_POD_NAMESPACE, k8s.K8S_POD_NAME, conf.admissionTimeout), why)
}

// Del detaches the pod; it succeeds when there is nothing (left) to delete.
func Del(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	hostName := HostVethName(args.ContainerID, args.IfName)
	var errs []error

	if err := ipam.ExecDel(conf.IPAM.Type, args.StdinData); err != nil {
		errs = append(errs, types.NewError(ErrIPAM, fmt.Sprintf("IPAM plugin %q failed to release: %v", conf.IPAM.Type, errorText(err)), ""))
	}

	// Without a database socket no OVS is running, so there is no port to
	// remove; anything else that keeps us from OVSDB is an error the runtime
	// retries.
	if ovsdbSocketMissing(conf.OVSDBSocket) {
		// nothing to delete in OVS
	} else if ovs, err := connectOVSDB(conf); err != nil {
		errs = append(errs, err)
	} else {
		if err := ovs.delPort(hostName); err != nil {
			errs = append(errs, types.NewError(ErrOVS, "failed to delete port "+hostName, err.Error()))
		}
		ovs.close()
	}

	if err := deleteVeth(hostName); err != nil {
		errs = append(errs, types.NewError(types.ErrInternal, "failed to delete veth "+hostName, err.Error()))
	}
	if err := hostguard.Remove("", hostName); err != nil {
		errs = append(errs, types.NewError(types.ErrInternal, "failed to remove the host guard of "+hostName, err.Error()))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Check verifies that the attachment described by the previous result is
// intact.
func Check(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	k8s, err := parseK8sArgs(args.Args)
	if err != nil {
		return err
	}
	if conf.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult in the network configuration", "")
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "failed to parse prevResult", err.Error())
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "failed to convert prevResult", err.Error())
	}
	if err := ipam.ExecCheck(conf.IPAM.Type, args.StdinData); err != nil {
		return types.NewError(ErrIPAM, fmt.Sprintf("IPAM plugin %q check failed: %v", conf.IPAM.Type, errorText(err)), "")
	}
	hostName := HostVethName(args.ContainerID, args.IfName)
	var contIface, hostIface *current.Interface
	for _, i := range prev.Interfaces {
		switch {
		case i.Sandbox != "" && i.Name == args.IfName:
			contIface = i
		case i.Sandbox == "" && i.Name == hostName:
			hostIface = i
		}
	}
	if contIface == nil || hostIface == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("prevResult does not list interfaces %s (sandbox) and %s (host)", args.IfName, hostName), "")
	}

	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("failed to open network namespace %q", args.Netns), err.Error())
	}
	defer netns.Close()

	var contIndex, peerIndex int
	err = netns.Do(func(ns.NetNS) error {
		link, peer, err := ip.GetVethPeerIfindex(args.IfName)
		if err != nil {
			return err
		}
		if mac := link.Attrs().HardwareAddr.String(); mac != contIface.Mac {
			return fmt.Errorf("interface %s has MAC %s, prevResult says %s", args.IfName, mac, contIface.Mac)
		}
		contIndex, peerIndex = link.Attrs().Index, peer
		if err := ip.ValidateExpectedInterfaceIPs(args.IfName, prev.IPs); err != nil {
			return err
		}
		return ip.ValidateExpectedRoute(prev.Routes)
	})
	if err != nil {
		return types.NewError(types.ErrInternal, "container interface check failed", err.Error())
	}
	hostLink, hostPeer, err := ip.GetVethPeerIfindex(hostName)
	if err != nil {
		return types.NewError(types.ErrInternal, "host veth check failed", err.Error())
	}
	if hostLink.Attrs().Index != peerIndex || hostPeer != contIndex {
		return types.NewError(types.ErrInternal,
			fmt.Sprintf("host veth %s is not the peer of %s in %s", hostName, args.IfName, args.Netns), "")
	}
	if mac := hostLink.Attrs().HardwareAddr.String(); hostIface.Mac != "" && mac != hostIface.Mac {
		return types.NewError(types.ErrInternal, fmt.Sprintf("host veth %s has MAC %s, prevResult says %s", hostName, mac, hostIface.Mac), "")
	}

	ovs, err := connectOVSDB(conf)
	if err != nil {
		return err
	}
	defer ovs.close()
	br, err := ovs.portBridge(hostName)
	if err != nil {
		return types.NewError(ErrOVS, "failed to look up OVS port "+hostName, err.Error())
	}
	if br != conf.Bridge {
		return types.NewError(ErrOVS, fmt.Sprintf("port %s is on bridge %q, want %q", hostName, br, conf.Bridge), "")
	}
	ids, err := ovs.interfaceExternalIDs(hostName)
	if err != nil {
		return types.NewError(ErrOVS, "failed to read external_ids of "+hostName, err.Error())
	}
	want := externalIDs(k8s, prev.IPs, contIface.Mac, args)
	for _, k := range sortedKeys(want) {
		if ids[k] != want[k] {
			return types.NewError(ErrOVS, fmt.Sprintf("port %s: external_ids:%s is %q, want %q", hostName, k, ids[k], want[k]), "")
		}
	}
	userspace, err := userspaceDatapath(ovs, conf.Bridge)
	if err != nil {
		return err
	}
	if userspace {
		ok, err := hostguard.Present("", hostName)
		if err != nil {
			return types.NewError(types.ErrInternal, "failed to look up the host guard of "+hostName, err.Error())
		}
		if !ok {
			return types.NewError(types.ErrInternal, fmt.Sprintf("host veth %s has no host guard (nftables netdev chain %s/%s)", hostName, hostguard.Table, hostguard.Chain(hostName)), "")
		}
	}
	return nil
}

// externalIDs are the Interface external_ids of an attachment. The pod keys
// are set only when the runtime named the pod: the agent ignores interfaces
// without a pod name, rather than guessing.
func externalIDs(k8s *K8sArgs, ips []*current.IPConfig, mac string, args *skel.CmdArgs) map[string]string {
	ids := map[string]string{
		ExternalIDPodIPs:      joinIPs(ips),
		ExternalIDPodMAC:      mac,
		ExternalIDContainerID: args.ContainerID,
		ExternalIDIfName:      args.IfName,
	}
	if k8s.K8S_POD_NAME != "" && k8s.K8S_POD_NAMESPACE != "" {
		ids[ExternalIDPodNamespace] = string(k8s.K8S_POD_NAMESPACE)
		ids[ExternalIDPodName] = string(k8s.K8S_POD_NAME)
		ids[ExternalIDPodUID] = string(k8s.K8S_POD_UID)
	}
	return ids
}

// Status reports whether pods can be attached: OVSDB answers and the bridge
// exists.
func Status(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	ovs, err := connectOVSDB(conf)
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	defer ovs.close()
	if err := requireBridge(ovs, conf.Bridge); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return ipam.ExecStatus(conf.IPAM.Type, args.StdinData)
}

// connectOVSDB connects to the node's OVSDB; an error is a CNI error the
// runtime retries.
func connectOVSDB(conf *NetConf) (*ovsDB, error) {
	ovs, err := openOVSDB(conf.ovsdbEndpoint())
	if err != nil {
		return nil, types.NewError(ErrOVS, fmt.Sprintf("cannot query OVSDB at %s", conf.ovsdbEndpoint()), err.Error())
	}
	return ovs, nil
}

func requireBridge(ovs *ovsDB, bridge string) error {
	ok, err := ovs.bridgeExists(bridge)
	if err != nil {
		return types.NewError(ErrOVS, fmt.Sprintf("cannot query OVSDB at %s", ovs.endpoint), err.Error())
	}
	if !ok {
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("OVS bridge %q does not exist", bridge), "")
	}
	return nil
}

// userspaceDatapath reports whether bridge uses OVS's userspace datapath,
// whose ports need the host guard.
func userspaceDatapath(ovs *ovsDB, bridge string) (bool, error) {
	dp, err := ovs.datapathType(bridge)
	if err != nil {
		return false, types.NewError(ErrOVS, fmt.Sprintf("cannot read the datapath type of bridge %q", bridge), err.Error())
	}
	return dp == "netdev", nil
}

func ovsdbSocketMissing(socket string) bool {
	path, ok := strings.CutPrefix(socket, "unix:")
	if !ok && strings.Contains(socket, ":") {
		return false // tcp:/ssl: endpoints cannot be checked this way
	}
	_, err := os.Stat(path)
	return errors.Is(err, os.ErrNotExist)
}

// withDefaultRoutes adds a default route via the address's gateway for each
// address family that has a gateway and no default route yet.
func withDefaultRoutes(ips []*current.IPConfig, routes []*types.Route) []*types.Route {
	out := append([]*types.Route(nil), routes...)
	has := map[bool]bool{} // keyed by "is IPv4"
	for _, r := range routes {
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			has[r.Dst.IP.To4() != nil] = true
		}
	}
	for _, ipc := range ips {
		if ipc.Gateway == nil {
			continue
		}
		v4 := ipc.Address.IP.To4() != nil
		if has[v4] {
			continue
		}
		has[v4] = true
		dst := net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
		if v4 {
			dst = net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
		}
		out = append(out, &types.Route{Dst: dst, GW: ipc.Gateway})
	}
	return out
}

// withOnLinkDefaultRoutes adds a link-scope default route (no gateway) for
// each address family that has an address and no default route yet.
func withOnLinkDefaultRoutes(ips []*current.IPConfig, routes []*types.Route) []*types.Route {
	out := append([]*types.Route(nil), routes...)
	has := map[bool]bool{}
	for _, r := range routes {
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			has[r.Dst.IP.To4() != nil] = true
		}
	}
	for _, ipc := range ips {
		v4 := ipc.Address.IP.To4() != nil
		if has[v4] {
			continue
		}
		has[v4] = true
		dst := net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
		if v4 {
			dst = net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
		}
		scope := int(netlink.SCOPE_LINK)
		out = append(out, &types.Route{Dst: dst, Scope: &scope})
	}
	return out
}

func hasIPv6(ips []*current.IPConfig) bool {
	for _, ipc := range ips {
		if ipc.Address.IP.To4() == nil {
			return true
		}
	}
	return false
}

func joinIPs(ips []*current.IPConfig) string {
	s := make([]string, 0, len(ips))
	for _, ipc := range ips {
		s = append(s, ipc.Address.IP.String())
	}
	return strings.Join(s, ",")
}

// disableTxChecksum turns off every TX checksum offload feature that is on
// (the equivalent of `ethtool -K IF tx off`) on an interface of the calling
// thread's network namespace.
func disableTxChecksum(ifName string) error {
	et, err := ethtool.NewEthtool()
	if err != nil {
		return err
	}
	defer et.Close()
	features, err := et.FeaturesWithState(ifName)
	if err != nil {
		return err
	}
	off := map[string]bool{}
	for name, st := range features {
		if strings.HasPrefix(name, "tx-checksum-") && st.Available && st.Active {
			off[name] = false
		}
	}
	if len(off) == 0 {
		return nil
	}
	if err := et.Change(ifName, off); err != nil {
		return err
	}
	after, err := et.Features(ifName)
	if err != nil {
		return err
	}
	for name := range off {
		if after[name] {
			return fmt.Errorf("%s is still on", name)
		}
	}
	return nil
}

// deleteVeth deletes the host end of the attachment's veth pair, which
// destroys the container end with it. Deleting by the host name, never by
// the container interface name, guarantees that an interface another plugin
// created in the namespace is left alone. A missing link is not an error.
func deleteVeth(hostName string) error {
	if err := ip.DelLinkByName(hostName); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
		return err
	}
	return nil
}

// errorText is the message of a delegate's error without the JSON wrapping.
func errorText(err error) string {
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		if cniErr.Details != "" {
			return cniErr.Msg + ": " + cniErr.Details
		}
		return cniErr.Msg
	}
	return err.Error()
}
