package cni

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// DefaultOVSDBSocket is the database socket of a standard Open vSwitch
// installation.
const DefaultOVSDBSocket = "/run/openvswitch/db.sock"

// NetConf is tierflow-cni's network configuration.
type NetConf struct {
	types.NetConf
	// Bridge is the OVS bridge pods are attached to.
	Bridge string `json:"bridge"`
	// OVSDBSocket is the OVSDB endpoint: a unix socket path, with or
	// without the "unix:" prefix.
	OVSDBSocket string `json:"ovsdbSocket,omitempty"`
	// MTU of both veth ends; 0 leaves the kernel default (1500).
	MTU int `json:"mtu,omitempty"`
	// DefaultRoute is "via-gateway" (the default: one default route per
	// address family via the IPAM gateway) or "on-link" (default routes out
	// of the pod's interface without a gateway, so the pod resolves every
	// destination itself: the flat L2 network whose forwarding the agent's
	// OpenFlow pipeline does; the IPAM gateway is then left out of the
	// result).
	DefaultRoute string `json:"defaultRoute,omitempty"`
	// AdmissionTimeout bounds how long ADD waits for the agent to admit
	// the pod (a Go duration; default DefaultAdmissionTimeout; "0s": do
	// not wait, for bridges no tierflow agent manages). See Add.
	AdmissionTimeout string `json:"admissionTimeout,omitempty"`

	admissionTimeout time.Duration
}

// DefaultAdmissionTimeout is how long ADD waits for the pod's admission
// unless the configuration says otherwise.
const DefaultAdmissionTimeout = 30 * time.Second

// Default route modes.
const (
	DefaultRouteViaGateway = "via-gateway"
	DefaultRouteOnLink     = "on-link"
)

// K8sArgs are the CNI_ARGS a Kubernetes runtime passes.
type K8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // names fixed by the runtime
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

// ParseConfig decodes and validates a network configuration.
func ParseConfig(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failed to decode network configuration", err.Error())
	}
	if strings.TrimSpace(conf.Bridge) == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `network configuration: "bridge" is required`, "")
	}
	if strings.ContainsAny(conf.Bridge, " \t\n\"'/") || len(conf.Bridge) > 15 {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("network configuration: invalid bridge name %q", conf.Bridge), "")
	}
	if conf.MTU != 0 && (conf.MTU < 68 || conf.MTU > 65535) {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("network configuration: mtu %d out of range 68..65535", conf.MTU), "")
	}
	if conf.IPAM.Type == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `network configuration: "ipam" with a "type" is required`, "")
	}
	switch conf.DefaultRoute {
	case "":
		conf.DefaultRoute = DefaultRouteViaGateway
	case DefaultRouteViaGateway, DefaultRouteOnLink:
	default:
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("network configuration: defaultRoute %q is neither %q nor %q", conf.DefaultRoute, DefaultRouteViaGateway, DefaultRouteOnLink), "")
	}
	if conf.OVSDBSocket == "" {
		conf.OVSDBSocket = DefaultOVSDBSocket
	}
	conf.admissionTimeout = DefaultAdmissionTimeout
	if conf.AdmissionTimeout != "" {
		d, err := time.ParseDuration(conf.AdmissionTimeout)
		if err != nil || d < 0 || d > 10*time.Minute {
			return nil, types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("network configuration: admissionTimeout %q is not a duration in 0s..10m", conf.AdmissionTimeout), "")
		}
		conf.admissionTimeout = d
	}
	return conf, nil
}

// ovsdbEndpoint is the socket as an OVSDB endpoint (unix:PATH, tcp:...).
func (c *NetConf) ovsdbEndpoint() string {
	if strings.Contains(c.OVSDBSocket, ":") {
		return c.OVSDBSocket
	}
	return "unix:" + c.OVSDBSocket
}

// parseK8sArgs reads the pod identity from CNI_ARGS; unknown keys are
// ignored as the CNI conventions require. A pod named without its UID is
// refused: the agent admits a port only for the pod of its UID, never for
// a later pod of the same name (containerd and CRI-O pass K8S_POD_UID).
func parseK8sArgs(args string) (*K8sArgs, error) {
	k := &K8sArgs{}
	k.IgnoreUnknown = true
	if err := types.LoadArgs(args, k); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS", err.Error())
	}
	if k.K8S_POD_NAME != "" && k.K8S_POD_UID == "" {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables,
			"CNI_ARGS name the pod without K8S_POD_UID: tierflow-cni needs the pod's UID to tell it from a deleted pod of the same name", "")
	}
	return k, nil
}
