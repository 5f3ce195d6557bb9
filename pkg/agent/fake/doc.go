// Package fake is a datapath-less agent: it keeps the rule cache an agent
// would build from the distribution stream and reports every policy
// realized as soon as it arrives. It exists for fan-out tests and
// benchmarks with many agents in one process, and as an independent check
// of the stream: its cache is built only from the Deltas it is given.
package fake
