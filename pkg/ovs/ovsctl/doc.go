// Package ovsctl is tierflow's one reader of the OVS command-line tools'
// text: the command lines it runs (ovs-ofctl dump-flows, ovs-appctl
// ofproto/trace) and the parsers of their output. The agent answers
// tierctl's bridge dumps and traces with them, and tierctl runs the same
// commands itself on a node.
//
// It knows OVS's formats, not tierflow's pipeline: the steps of a trace
// come with their table number and cookie, and callers name them
// (pkg/agent/pipeline decodes cookies). The formats are those of OVS 3.x;
// testdata holds real output of the agent's pipeline (see the tests).
package ovsctl
