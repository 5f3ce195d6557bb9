// Package scenarios builds the cluster shapes tierflow's performance is
// measured on (see /work/shared/BENCH-REFERENCES.md): namespaces, nodes,
// pods and policies as API objects, deterministic for a given shape. Pods
// are spread over 1000 nodes at random, with random unique IPs.
//
// Its tests hold the from-informer-start benchmarks (informers over a fake
// clientset); pkg/compute's own tests hold the computation-only ones.
package scenarios
