// Package cyclonus runs cyclonus (github.com/mattfenwick/cyclonus, its
// own module, built into _output/bin) against a cluster: its generated
// NetworkPolicy cases, probed through pod IPs, Service IPs or Service
// names, with the flags tierflow's suites share, and its JUnit report read
// back as one subtest per case. test/conformance runs cyclonus's own
// command on the simulated cluster; test/clustere2e runs cmd/cyclonus-batch
// on the real one (the same cases with cyclonus's batch prober: one exec
// per pod and step, the connections made by cmd/cyclonus-worker in the
// pod).
package cyclonus
