package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Reference renders, as a Markdown table, every configuration key of the
// component whose defaults are given: file key, flag, environment variable,
// default and meaning.
func Reference(defaults any) string {
	var b strings.Builder
	b.WriteString("| file key | flag | environment | default | meaning |\n|---|---|---|---|---|\n")
	dv := reflect.ValueOf(defaults)
	for _, o := range optionsOf(dv.Type()) {
		def := dv.FieldByIndex(o.index).Interface()
		defText := "`" + formatValue(def) + "`"
		if s, ok := def.(string); ok && s == "" {
			defText = "empty"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | %s | %s |\n", o.key, o.flag, o.env, defText, o.usage)
	}
	return b.String()
}

// ReferenceDoc is docs/configuration.md of this package: both components'
// Reference tables. The agent's node name default is shown as NODE_NAME's
// role rather than its value on the machine generating the document, and
// so are the controller's identity and addresses.
func ReferenceDoc() string {
	agent := DefaultAgent()
	agent.NodeName = ""
	controller := DefaultController()
	controller.Identity = ""
	controller.AdvertiseAddresses = ""
	return "# tierflow configuration reference\n\n" +
		"Generated from `pkg/config` by `go test ./pkg/config -run TestReferenceDocUpToDate -update`; do not edit.\n\n" +
		"Precedence, highest first: flags > `TIERFLOW_*` environment > the `--config` YAML file > defaults.\n" +
		"Unknown file keys and invalid values stop the component at start.\n\n" +
		"## tierflow-controller\n\n" +
		"The identity defaults to the environment variable `POD_NAME` (set by the Deployment from `metadata.name`), else the hostname; " +
		"`advertiseAddresses` to `POD_IPS` (set by the Deployment from `status.podIPs`).\n\n" +
		Reference(controller) +
		"\n## tierflow-agent\n\n" +
		"The node name defaults to the environment variable `NODE_NAME` (set by the DaemonSet from `spec.nodeName`).\n\n" +
		Reference(agent)
}
