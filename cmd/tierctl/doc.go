// Command tierctl inspects tierflow network policy.
//
//	tierctl explain -f FILE [-f FILE ...] --src NS/POD|IP --dst NS/POD|IP --port PROTO/PORT [-o json|yaml|table]
//	tierctl explain -f FILE [-f FILE ...] --matrix --port PROTO/PORT [--port PROTO/PORT ...]
//	tierctl explain --controller HOST:PORT --src NS/POD|IP --dst NS/POD|IP --port PROTO/PORT
//	tierctl get policies|appliedtogroups|addressgroups [-n NS] [--node NODE]
//	tierctl flows [--node NODE] (--policy KIND/[NS/]NAME [--rule INDEX|NAME] | --pod NS/POD | --table NAME) [--check]
//	tierctl trace --src NS/POD --dst NS/POD|IP --port PROTO/PORT
//
// explain works offline, from manifests (see pkg/explain/README.md for the
// output and pkg/explain/load for how manifests are read), or live against
// the controller with the same output. get and live explain ask the
// controller's query API (pkg/queryapi); flows and trace ask the agents
// (pkg/queryapi/agentquery) through the controller, which forwards the
// queries over the agents' distribution streams (--controller without
// --agent-socket), or on their node-local query sockets, running ovs-ofctl
// and ovs-appctl on the node. README.md describes how each command reaches its
// data and the choices made.
package main
