// Package load reads Kubernetes manifests (multi-document YAML, or a List
// as "kubectl get -o yaml" writes it) into typed API objects, defaults them
// as the API server would, and runs them through pkg/compute to get the
// model and pod inventory that pkg/explain evaluates. It is the offline
// source of `tierctl explain`.
//
// Choices where a real cluster would have decided (see Objects.Complete):
// objects without a namespace are in "default"; a namespace a pod or
// NetworkPolicy uses but the manifests do not declare is taken to exist,
// with only the label kubernetes.io/metadata.name (which every namespace
// gets); policyTypes and port protocols get the API server's (and the
// CRDs') defaults. Unknown fields are errors, not silently dropped, since a
// misspelt field can change what a policy means; a known kind with another
// apiVersion is an error; objects of other kinds are listed in
// Objects.Ignored; an object declared twice is an error. Pods that take no
// part in policy (host network, not scheduled, terminated; see Excluded)
// are in no group and not in the inventory; a scheduled pod without an IP
// yet is in its groups but not in the inventory (it is no end of a
// connection).
package load
