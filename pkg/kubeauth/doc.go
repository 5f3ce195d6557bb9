// Package kubeauth authenticates and authorizes HTTP requests the way
// kube-rbac-proxy does: the request's bearer token is checked with a
// TokenReview, and what the request asks for with a SubjectAccessReview
// for the token's user — a resource (verb, group, resource, name: the
// controller's query API, "get tierflow.io/queries NAME") or a
// non-resource URL (the agent's "get /metrics"). So plain RBAC grants
// access, e.g. Prometheus' service account bound to a ClusterRole with
// nonResourceURLs ["/metrics"], verbs ["get"].
//
// Definite decisions (authenticated and allowed, unauthenticated,
// forbidden) are cached per token hash and action for a short time, so a
// scraper or a script in a loop does not cost two API calls per request;
// a revoked token or permission takes effect within that time. Failures
// to reach the API server are never cached and answer 503.
package kubeauth
