// Package agentimage holds the files of the tierflow-agent container image
// that are not Go programs (see Dockerfile) and tests them: start-ovs, the
// entry point of the DaemonSet's OVS container, is run here against the
// machine's Open vSwitch binaries.
package agentimage
