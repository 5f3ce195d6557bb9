// Package agentimage holds the files of the tierflow-agent container image
// that are not Go programs (see Dockerfile) and tests them: start-ovs, the
// entry point of the DaemonSet's OVS container, is run here against the
// machine's Open vSwitch binaries. It also checks that `make images` stops
// with a clear message when no container engine is reachable.
package agentimage
