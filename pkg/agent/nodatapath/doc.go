// Package nodatapath is the agent of datapath "none": an agent without a
// dataplane, which holds the state the distribution client hands it and
// reports every policy realized as soon as it arrives.
//
// tierflow-agent runs it with --datapath none (pkg/agent/runtime), so that
// many agents fit in one process or one machine: the fan-out tests and
// benchmarks of pkg/distribution/server and test/bench start them directly
// (Start). Fail and Hold let those tests play an agent that cannot realize
// a policy, or one that is stuck.
package nodatapath
