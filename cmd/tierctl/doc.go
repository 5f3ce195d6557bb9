// Command tierctl inspects tierflow network policy.
//
//	tierctl explain -f FILE [-f FILE ...] --src NS/POD|IP --dst NS/POD|IP --port PROTO/PORT [-o json|yaml|table]
//	tierctl explain -f FILE [-f FILE ...] --matrix --port PROTO/PORT [--port PROTO/PORT ...] [-o json|yaml|table]
//
// explain works offline, from manifests; see pkg/explain/README.md for the
// output and pkg/explain/load for how manifests are read.
package main
