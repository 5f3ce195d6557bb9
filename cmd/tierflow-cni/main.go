// Command tierflow-cni is the CNI plugin that attaches pods to the node's
// OVS bridge; see package github.com/tierflow/tierflow/pkg/cni.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/tierflow/tierflow/pkg/cni"
)

func main() {
	skel.PluginMainFuncs(cni.Funcs(), cni.VersionInfo(), "tierflow-cni: attaches pods to an Open vSwitch bridge")
}
