package config

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// NodeNameEnv is the environment variable the agent's node name defaults
// to; the DaemonSet sets it from spec.nodeName with the Downward API.
const NodeNameEnv = "NODE_NAME"

// Datapath types of the OVS bridge.
const (
	DatapathSystem = "system" // the Linux kernel datapath (openvswitch module)
	DatapathNetdev = "netdev" // the userspace datapath in ovs-vswitchd
)

// Agent is tierflow-agent's configuration.
type Agent struct {
	NodeName string `json:"nodeName" flag:"node-name" usage:"name of this node as the API server knows it (default: env NODE_NAME)"`

	BridgeName   string `json:"bridgeName" flag:"bridge-name" usage:"OVS bridge the pods are attached to"`
	DatapathType string `json:"datapathType" flag:"datapath-type" usage:"OVS datapath of the bridge: system (kernel module) or netdev (userspace)"`
	// OVSDBSocket accepts a path with or without the "unix:" prefix, as
	// tierflow-cni does.
	OVSDBSocket string `json:"ovsdbSocket" flag:"ovsdb-socket" usage:"OVSDB server unix socket"`
	// OpenFlowSocket is empty by default: ovs-vswitchd's management socket
	// of the bridge, next to the OVSDB socket (see OpenFlowSocketPath).
	OpenFlowSocket string `json:"openflowSocket" flag:"openflow-socket" usage:"OpenFlow unix socket of the bridge; empty: BRIDGE.mgmt in the OVSDB socket's directory"`

	ControllerAddress string `json:"controllerAddress" flag:"controller-address" usage:"host:port of tierflow-controller's agent service"`
	ControllerCAFile  string `json:"controllerCAFile" flag:"controller-ca-file" usage:"PEM CA bundle that verifies the controller's certificate"`
	// ControllerServerName is verified in the controller's certificate
	// whatever address is dialled: in a cluster the agent dials the
	// Service's ClusterIP (DNS may not work before the network does).
	ControllerServerName string `json:"controllerServerName" flag:"controller-server-name" usage:"DNS name the controller's certificate must carry"`
	// TokenFile is a projected service account token bound to the agent's
	// pod (and so to its node); it is reread on every connection because
	// the kubelet rotates it.
	TokenFile string `json:"tokenFile" flag:"token-file" usage:"service account token the agent authenticates to the controller with"`
	StateDir  string `json:"stateDir" flag:"state-dir" usage:"directory keeping the last policy state received, enforced at start when the controller is unreachable"`

	// MetricsAddress is on the host network: unless it is a loopback
	// address, /metrics requires a token allowed to get it (see
	// pkg/agent/runtime), checked through the Kubernetes API.
	MetricsAddress string `json:"metricsAddress" flag:"metrics-address" usage:"host:port serving /metrics, /healthz and /readyz; empty disables. Unless the host is a loopback address, /metrics needs a bearer token whose user may get the non-resource URL /metrics (TokenReview and SubjectAccessReview through the Kubernetes API)"`
	LogLevel       string `json:"logLevel" flag:"log-level" usage:"log level: debug, info, warn or error"`

	CNI CNI `json:"cni"`

	// Kubeconfig is empty in a pod: the in-cluster configuration (the
	// agent's service account) is used. The noEncap and encap node
	// networks (Nodes), the Service proxy (Services, EndpointSlices,
	// Nodes) and the metrics port's authorization talk to the API server;
	// nothing else of the agent does.
	Kubeconfig string `json:"kubeconfig" flag:"kubeconfig" usage:"kubeconfig file for watching Nodes (nodeNetwork.mode noEncap or encap) and Services (serviceProxy), and authorizing /metrics on a non-loopback metricsAddress; empty uses the in-cluster service account"`

	NodeNetwork NodeNetwork `json:"nodeNetwork"`

	ServiceProxy ServiceProxy `json:"serviceProxy"`
}

// ServiceProxy configures the agent's Service load balancing in the
// bridge (pkg/agent/proxy): pods' connections to Services are translated
// to an endpoint before the egress policy tiers, so policy sees the pod
// they reach.
type ServiceProxy struct {
	Enabled bool `json:"enabled" flag:"service-proxy" usage:"load-balance pods' connections to Services (ClusterIP, NodePort, externalIPs, LoadBalancer IPs) in the bridge, before egress policy; watches Services, EndpointSlices and Nodes. The release manifest turns it on; it replaces kube-proxy for pods' traffic only (keep kube-proxy for the nodes' own and external traffic)"`
}

// Node network modes: how pods reach anything that is not a pod of their
// own node (see pkg/agent/nodenet).
const (
	// NodeNetworkUplink: the bridge has an uplink port (OVS interface
	// external_ids tierflow.io/role=uplink) joining the nodes' bridges in
	// one L2 network; pods resolve every address themselves. The
	// simulated test bed wires its nodes this way.
	NodeNetworkUplink = "uplink"
	// NodeNetworkNoEncap: a gateway port gives the host the first address
	// of the node's pod CIDRs; pods route through it, and the agent
	// programs a kernel route to every other Node's pod CIDRs via its
	// InternalIP (nodes must be L2-adjacent, or the underlay must route
	// the pod CIDRs).
	NodeNetworkNoEncap = "noEncap"
	// NodeNetworkEncap: the gateway as in noEncap, and a tunnel port
	// (Geneve or VXLAN) that carries pods' traffic to other nodes' pods
	// encapsulated to the node's InternalIP: nodes need only reach each
	// other's InternalIP, in any subnet.
	NodeNetworkEncap = "encap"
)

// Tunnel types of the encap node network.
const (
	TunnelGeneve = "geneve"
	TunnelVXLAN  = "vxlan"
)

// NodeNetwork configures how the node's pods reach other nodes, the host
// and the outside.
type NodeNetwork struct {
	Mode string `json:"mode" flag:"node-network-mode" usage:"uplink (an uplink port joins the nodes' bridges at L2, as in the test bed), noEncap (gateway port and kernel routes to other nodes' pod CIDRs via their InternalIP) or encap (gateway port and a tunnel to other nodes' InternalIP)"`
	// GatewayName is the OVS internal port (and Linux interface) of the
	// gateway in noEncap and encap mode.
	GatewayName string `json:"gatewayName" flag:"gateway-name" usage:"name of the gateway interface (OVS internal port) in noEncap and encap mode"`
	// Masquerade is needed unless the network beyond the nodes routes the
	// pod CIDRs (replies to a pod address would be lost).
	Masquerade bool `json:"masquerade" flag:"masquerade" usage:"noEncap and encap: give pods' traffic to destinations outside every Node's pod CIDRs the node's address (iptables MASQUERADE)"`
	// KubeProxyMasqueradeBit must be kube-proxy's
	// --iptables-masquerade-bit: the connections kube-proxy would
	// masquerade into the gateway (NodePort and external traffic to a pod
	// of this node) get the node's InternalIP as source instead of the
	// gateway's address, which only the node's own traffic may carry.
	KubeProxyMasqueradeBit int `json:"kubeProxyMasqueradeBit" flag:"kube-proxy-masquerade-bit" usage:"noEncap and encap: kube-proxy's --iptables-masquerade-bit; the connections it marks that enter the gateway get the node's InternalIP as source, not the gateway's address (trusted as the node itself)"`
	// TunnelType is the encapsulation of encap mode. Both add 50 bytes
	// per packet over an IPv4 underlay and 70 over IPv6 (see cni.mtu).
	TunnelType string `json:"tunnelType" flag:"tunnel-type" usage:"encap: geneve (UDP 6081) or vxlan (UDP 4789)"`
	// UnderlayBridge: OVS's userspace datapath sends and receives tunnel
	// packets only through an OVS bridge whose own interface holds the
	// node's address. With datapathType netdev the agent moves the
	// interface holding the node's InternalIP (its addresses and routes)
	// onto this bridge and attaches the interface to it, unless the
	// address already is on a netdev bridge's own interface.
	UnderlayBridge string `json:"underlayBridge" flag:"underlay-bridge" usage:"encap with datapathType netdev: OVS bridge that takes over the node's InternalIP and its network interface (userspace tunnelling)"`
}

// CNI configures how tierflow-cni is installed on the node.
type CNI struct {
	ConfDir string `json:"confDir" flag:"cni-conf-dir" usage:"directory of the node's CNI network configurations"`
	BinDir  string `json:"binDir" flag:"cni-bin-dir" usage:"directory of the node's CNI plugin binaries"`
	// MTU of the pods' interfaces (and of the gateway); 0 keeps the
	// kernel default (1500), except in encap mode, where 0 derives it
	// from the MTU of the interface holding the node's InternalIP minus
	// the encapsulation overhead. In encap mode a value that leaves no
	// room for the overhead, or one below the minimum of the pods' address
	// families (576 IPv4, 1280 IPv6), stops the agent at start.
	MTU int `json:"mtu" flag:"cni-mtu" usage:"MTU of pod interfaces; 0 keeps the kernel default (encap: the underlay's MTU minus the tunnel overhead)"`
}

// DefaultAgent returns the agent's defaults, which fit the manifests in
// manifests/. The node name is read from NODE_NAME.
func DefaultAgent() Agent {
	return Agent{
		NodeName:          os.Getenv(NodeNameEnv),
		BridgeName:        "br-int",
		DatapathType:      DatapathSystem,
		OVSDBSocket:       "/run/openvswitch/db.sock",
		ControllerAddress: "tierflow-controller.kube-system.svc:10349",
		ControllerCAFile:  "/etc/tierflow/tls/ca.crt",
		// The Service's name; manifests/create-tls-secret.sh puts it in
		// the certificate.
		ControllerServerName: "tierflow-controller.kube-system.svc",
		TokenFile:            "/var/run/secrets/tierflow/token",
		StateDir:             "/var/lib/tierflow",
		MetricsAddress:       ":10351",
		LogLevel:             "info",
		CNI: CNI{
			ConfDir: "/etc/cni/net.d",
			BinDir:  "/opt/cni/bin",
		},
		// uplink keeps every existing wiring (the test bed) working; the
		// release manifests select encap for real clusters.
		NodeNetwork: NodeNetwork{
			Mode:           NodeNetworkUplink,
			GatewayName:    "tierflow-gw0",
			Masquerade:     true,
			TunnelType:     TunnelGeneve,
			UnderlayBridge: "tierflow-phy0",
			// kube-proxy's default.
			KubeProxyMasqueradeBit: 14,
		},
		// Off keeps agents without API server access (tests of the
		// dataplane alone) working; the release manifests and the test
		// bed turn it on.
		ServiceProxy: ServiceProxy{Enabled: false},
	}
}

// Validate checks every value; the first problem is returned as a
// *FieldError.
func (a *Agent) Validate() error {
	if a.NodeName == "" {
		return &FieldError{Key: "nodeName", Value: a.NodeName,
			Reason: "is required: set NODE_NAME, TIERFLOW_NODE_NAME, --node-name or nodeName in the file"}
	}
	if err := checkDNSSubdomain("nodeName", a.NodeName, false); err != nil {
		return err
	}
	if err := checkBridgeName("bridgeName", a.BridgeName); err != nil {
		return err
	}
	if a.DatapathType != DatapathSystem && a.DatapathType != DatapathNetdev {
		return &FieldError{Key: "datapathType", Value: a.DatapathType, Reason: `must be "system" or "netdev"`}
	}
	if err := checkAbsPath("ovsdbSocket", strings.TrimPrefix(a.OVSDBSocket, "unix:")); err != nil {
		err.(*FieldError).Value = a.OVSDBSocket
		return err
	}
	if a.OpenFlowSocket != "" {
		if err := checkAbsPath("openflowSocket", strings.TrimPrefix(a.OpenFlowSocket, "unix:")); err != nil {
			err.(*FieldError).Value = a.OpenFlowSocket
			return err
		}
	}
	if err := checkDialAddress("controllerAddress", a.ControllerAddress); err != nil {
		return err
	}
	if err := checkPath("controllerCAFile", a.ControllerCAFile, true); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(a.ControllerServerName); len(errs) > 0 {
		return &FieldError{Key: "controllerServerName", Value: a.ControllerServerName, Reason: "must be a DNS name: " + errs[0]}
	}
	if err := checkPath("tokenFile", a.TokenFile, true); err != nil {
		return err
	}
	if err := checkAbsPath("stateDir", a.StateDir); err != nil {
		return err
	}
	if err := checkListenAddress("metricsAddress", a.MetricsAddress, true); err != nil {
		return err
	}
	if err := checkLogLevel("logLevel", a.LogLevel); err != nil {
		return err
	}
	if err := checkAbsPath("cni.confDir", a.CNI.ConfDir); err != nil {
		return err
	}
	if err := checkAbsPath("cni.binDir", a.CNI.BinDir); err != nil {
		return err
	}
	if a.CNI.MTU != 0 && (a.CNI.MTU < 68 || a.CNI.MTU > 65535) {
		// The bounds tierflow-cni accepts (68 is IPv4's minimum MTU).
		return &FieldError{Key: "cni.mtu", Value: a.CNI.MTU, Reason: "must be 0 (kernel default) or in 68..65535"}
	}
	if err := checkPath("kubeconfig", a.Kubeconfig, false); err != nil {
		return err
	}
	switch a.NodeNetwork.Mode {
	case NodeNetworkUplink, NodeNetworkNoEncap, NodeNetworkEncap:
	default:
		return &FieldError{Key: "nodeNetwork.mode", Value: a.NodeNetwork.Mode, Reason: fmt.Sprintf("must be %q, %q or %q", NodeNetworkUplink, NodeNetworkNoEncap, NodeNetworkEncap)}
	}
	if err := checkBridgeName("nodeNetwork.gatewayName", a.NodeNetwork.GatewayName); err != nil {
		return err
	}
	if a.NodeNetwork.GatewayName == a.BridgeName {
		return &FieldError{Key: "nodeNetwork.gatewayName", Value: a.NodeNetwork.GatewayName, Reason: "must differ from bridgeName (the bridge's own interface)"}
	}
	if b := a.NodeNetwork.KubeProxyMasqueradeBit; b < 0 || b > 31 {
		return &FieldError{Key: "nodeNetwork.kubeProxyMasqueradeBit", Value: b, Reason: "must be in 0..31 (kube-proxy's --iptables-masquerade-bit)"}
	}
	if a.NodeNetwork.TunnelType != TunnelGeneve && a.NodeNetwork.TunnelType != TunnelVXLAN {
		return &FieldError{Key: "nodeNetwork.tunnelType", Value: a.NodeNetwork.TunnelType, Reason: fmt.Sprintf("must be %q or %q", TunnelGeneve, TunnelVXLAN)}
	}
	if err := checkBridgeName("nodeNetwork.underlayBridge", a.NodeNetwork.UnderlayBridge); err != nil {
		return err
	}
	if ub := a.NodeNetwork.UnderlayBridge; ub == a.BridgeName || ub == a.NodeNetwork.GatewayName {
		return &FieldError{Key: "nodeNetwork.underlayBridge", Value: ub, Reason: "must differ from bridgeName and nodeNetwork.gatewayName"}
	}
	if a.NodeNetwork.Mode == NodeNetworkEncap && a.CNI.MTU != 0 && a.CNI.MTU < MinPodMTUIPv4 {
		return &FieldError{Key: "cni.mtu", Value: a.CNI.MTU, Reason: fmt.Sprintf("is below %d, the least every IPv4 host must take (0 derives it from the underlay)", MinPodMTUIPv4)}
	}
	return nil
}

// The least pod MTU encap mode accepts per address family of the pods:
// what every IPv4 host must be able to receive (RFC 791), and IPv6's
// minimum link MTU (RFC 8200).
const (
	MinPodMTUIPv4 = 576
	MinPodMTUIPv6 = 1280
)

// checkBridgeName accepts the names tierflow-cni accepts: a Linux
// interface name (the bridge's internal port has it).
func checkBridgeName(key, v string) error {
	if v == "" || len(v) > 15 || strings.ContainsAny(v, " \t\n\"'/:") {
		return &FieldError{Key: key, Value: v, Reason: "must be 1 to 15 characters without spaces, quotes, '/' or ':'"}
	}
	return nil
}

// OVSDBSocketPath is the OVSDB socket path without a "unix:" prefix.
func (a *Agent) OVSDBSocketPath() string { return strings.TrimPrefix(a.OVSDBSocket, "unix:") }

// OpenFlowSocketPath is the OpenFlow socket: OpenFlowSocket when set, else
// the management socket ovs-vswitchd creates for the bridge in its run
// directory (the OVSDB socket's directory in every standard layout).
func (a *Agent) OpenFlowSocketPath() string {
	if a.OpenFlowSocket != "" {
		return strings.TrimPrefix(a.OpenFlowSocket, "unix:")
	}
	return filepath.Join(filepath.Dir(a.OVSDBSocketPath()), fmt.Sprintf("%s.mgmt", a.BridgeName))
}

// SlogLevel is the log/slog level of LogLevel (valid after Validate).
func (a *Agent) SlogLevel() slog.Level { return mustLevel(a.LogLevel) }
