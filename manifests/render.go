package manifests

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/config"
)

//go:embed crds/*.yaml parts/*.yaml cleanup/*.yaml
var sources embed.FS

// Values are the tunable parts of the manifests.
type Values struct {
	ControllerImage string
	AgentImage      string
	// ImagePullPolicy applies to both images: IfNotPresent suits images
	// loaded into the nodes (kind load docker-image).
	ImagePullPolicy string
	// DatapathType is the agent's datapathType: system or netdev.
	DatapathType string
	// LogLevel is both components' logLevel.
	LogLevel              string
	AgentPort             int // controller port the agents connect to (and the Service's)
	ControllerMetricsPort int
	AgentMetricsPort      int // on every node: the agent runs on the host network
	QueryPort             int // tierctl's queries: the controller's query API (and the Service's port)
	// PodMTU is the agent's cni.mtu: 0 keeps the kernel default (encap:
	// derived from the node's interface minus the tunnel overhead).
	PodMTU int
	// NodeNetworkMode is the agent's nodeNetwork.mode (encap or noEncap),
	// TunnelType its nodeNetwork.tunnelType (geneve or vxlan).
	NodeNetworkMode string
	TunnelType      string
	// ControllerMemoryRequest and ControllerMemoryLimit are the
	// controller container's memory request and limit (quantities such as
	// "2Gi"); the defaults are sized from the benchmarks at the 100k-pod
	// reference shapes (manifests/README.md, "Sizing the controller").
	ControllerMemoryRequest string
	ControllerMemoryLimit   string
}

// ControllerGoMemLimit is GOMEMLIMIT for the controller: 90% of its memory
// limit, so that the Go runtime collects harder before the kernel's limit
// is reached (the rest is room for what is not Go heap). Valid only for
// validated Values.
func (v Values) ControllerGoMemLimit() string {
	limit := resource.MustParse(v.ControllerMemoryLimit)
	return fmt.Sprintf("%dMiB", limit.Value()*9/10>>20)
}

// DefaultValues are the values tierflow.yaml is committed with.
func DefaultValues() Values {
	return Values{
		ControllerImage:       "tierflow/tierflow-controller:latest",
		AgentImage:            "tierflow/tierflow-agent:latest",
		ImagePullPolicy:       "IfNotPresent",
		DatapathType:          config.DatapathSystem,
		LogLevel:              "info",
		AgentPort:             config.DefaultAgentPort,
		ControllerMetricsPort: config.DefaultControllerMetricsPort,
		AgentMetricsPort:      config.DefaultAgentMetricsPort,
		QueryPort:             config.DefaultQueryPort,
		NodeNetworkMode:       config.NodeNetworkEncap,
		TunnelType:            config.TunnelGeneve,
		// See manifests/README.md, "Sizing the controller".
		ControllerMemoryRequest: "2Gi",
		ControllerMemoryLimit:   "3Gi",
	}
}

// imageRef is a loose image reference check: no spaces or quotes, and a
// form a container runtime could parse (name[:tag][@digest]).
var imageRef = regexp.MustCompile(`^[a-z0-9]+([._/:@-][a-zA-Z0-9_.-]+)*$`)

// Validate rejects values that would render a broken installation. The
// rendered configuration is checked again by Check.
func (v Values) Validate() error {
	for name, img := range map[string]string{"controller image": v.ControllerImage, "agent image": v.AgentImage} {
		if !imageRef.MatchString(img) {
			return fmt.Errorf("manifests: %s %q is not an image reference", name, img)
		}
	}
	switch v.ImagePullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		return fmt.Errorf("manifests: image pull policy %q must be Always, IfNotPresent or Never", v.ImagePullPolicy)
	}
	if v.DatapathType != config.DatapathSystem && v.DatapathType != config.DatapathNetdev {
		return fmt.Errorf("manifests: datapath type %q must be system or netdev", v.DatapathType)
	}
	switch v.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("manifests: log level %q must be debug, info, warn or error", v.LogLevel)
	}
	ports := map[int]string{}
	for _, p := range []struct {
		name string
		n    int
	}{{"agent port", v.AgentPort}, {"controller metrics port", v.ControllerMetricsPort}, {"agent metrics port", v.AgentMetricsPort}, {"query port", v.QueryPort}} {
		if p.n < 1 || p.n > 65535 {
			return fmt.Errorf("manifests: %s %d is not in 1..65535", p.name, p.n)
		}
		// All of them are on the host network of the nodes.
		if other, dup := ports[p.n]; dup {
			return fmt.Errorf("manifests: %s and %s are both %d", other, p.name, p.n)
		}
		ports[p.n] = p.name
	}
	if v.PodMTU != 0 && (v.PodMTU < 68 || v.PodMTU > 65535) {
		return fmt.Errorf("manifests: pod MTU %d must be 0 (kernel default) or in 68..65535", v.PodMTU)
	}
	if v.NodeNetworkMode != config.NodeNetworkEncap && v.NodeNetworkMode != config.NodeNetworkNoEncap {
		return fmt.Errorf("manifests: node network mode %q must be %s or %s", v.NodeNetworkMode, config.NodeNetworkEncap, config.NodeNetworkNoEncap)
	}
	if v.TunnelType != config.TunnelGeneve && v.TunnelType != config.TunnelVXLAN {
		return fmt.Errorf("manifests: tunnel type %q must be %s or %s", v.TunnelType, config.TunnelGeneve, config.TunnelVXLAN)
	}
	req, err := resource.ParseQuantity(v.ControllerMemoryRequest)
	if err != nil {
		return fmt.Errorf("manifests: controller memory request %q: %w", v.ControllerMemoryRequest, err)
	}
	limit, err := resource.ParseQuantity(v.ControllerMemoryLimit)
	if err != nil {
		return fmt.Errorf("manifests: controller memory limit %q: %w", v.ControllerMemoryLimit, err)
	}
	if limit.Cmp(resource.MustParse("256Mi")) < 0 || req.Cmp(limit) > 0 || req.Sign() <= 0 {
		return fmt.Errorf("manifests: controller memory request %s and limit %s: want 0 < request <= limit, limit at least 256Mi", v.ControllerMemoryRequest, v.ControllerMemoryLimit)
	}
	return nil
}

// Header starts the rendered file.
const Header = "# tierflow: everything `kubectl apply -f` needs to install it.\n" +
	"# Generated by `make manifests` from manifests/crds and manifests/parts; do not edit.\n"

// Render returns the combined, multi-document manifest for v, checked
// with Check.
func Render(v Values) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString(Header)
	for _, dir := range []string{"crds", "parts"} {
		files, err := fs.Glob(sources, dir+"/*.yaml")
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			src, err := sources.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if dir == "parts" {
				if src, err = execute(f, src, v); err != nil {
					return nil, err
				}
			}
			docs, err := documents(src)
			if err != nil {
				return nil, fmt.Errorf("manifests: %s: %w", f, err)
			}
			for _, d := range docs {
				fmt.Fprintf(&out, "---\n# Source: manifests/%s\n%s", f, d)
			}
		}
	}
	if _, err := Check(out.Bytes()); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func execute(name string, src []byte, v Values) ([]byte, error) {
	tmpl, err := template.New(path.Base(name)).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("manifests: %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("manifests: %s: %w", name, err)
	}
	return b.Bytes(), nil
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// documents splits a multi-document YAML file. Comments between documents
// stay with the document after them; every document must be one object.
func documents(src []byte) ([]string, error) {
	var out []string
	pending := ""
	for _, part := range separator.Split(string(src), -1) {
		part = strings.TrimLeft(part, "\n")
		if strings.TrimSpace(part) == "" {
			continue
		}
		if commentsOnly(part) {
			pending += part
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(part), &obj.Object); err != nil {
			return nil, err
		}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("a document without apiVersion, kind or metadata.name")
		}
		if !strings.HasSuffix(part, "\n") {
			part += "\n"
		}
		out = append(out, pending+part)
		pending = ""
	}
	return out, nil
}

func commentsOnly(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}
