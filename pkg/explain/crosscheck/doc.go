// Package crosscheck holds the differential test of tierflow's NetworkPolicy
// semantics against an independent engine, the matcher of
// github.com/mattfenwick/cyclonus v0.5.6: thousands of randomly generated
// NetworkPolicies (fixed seed) go through tierflow's whole offline path
// (pkg/explain/load defaults, every fourth case from manifest text through
// the parser, pkg/compute, pkg/explain) and through
// cyclonus, and every (source, destination, port) cell of both directions
// must agree. The package has no non-test code.
//
// Cases where cyclonus departs from the API text are excluded by name, not
// silently (see excludedCases in the test):
//
//   - NotInOnMissingKey: cyclonus says a NotIn requirement does not match an
//     object that lacks the key; Kubernetes label selectors
//     (k8s.io/apimachinery labels.Requirement.Matches) match it. The
//     generator uses NotIn only on keys every pod (app) and namespace (team,
//     kubernetes.io/metadata.name) carries; TestNotInMatchesMissingKey
//     checks tierflow against apimachinery for the missing-key case.
//   - MatchLabelsEmptyValue: cyclonus compares labels[key] == value, so
//     matchLabels {k: ""} matches an object without k; Kubernetes requires
//     the key. The generator never uses empty label values.
//
// Inputs the API server rejects (a peer with nothing set, ipBlock together
// with selectors, endPort with a named or missing port, endPort < port, an
// except outside its CIDR) are not generated: cyclonus panics on some, and
// no cluster can hold them.
package crosscheck
