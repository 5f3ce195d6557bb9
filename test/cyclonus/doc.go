// Package cyclonus runs cyclonus (github.com/mattfenwick/cyclonus, its
// own module, built into _output/bin) against a cluster: its generated
// NetworkPolicy cases, probed through pod IPs, Service IPs or Service
// names, with the flags tierflow's suites share, and its JUnit report read
// back as one subtest per case. test/conformance runs it on the simulated
// cluster, test/clustere2e on the real one.
package cyclonus
