// Package services reads Kubernetes Services and EndpointSlices the way
// kube-proxy does and says, for each Service port, which addresses it
// answers on (its frontends: ClusterIPs, NodePorts, externalIPs,
// LoadBalancer ingress IPs) and which endpoints a connection from a pod of
// a given node may reach through each. It is the one reading of those APIs
// shared by the agent's Service proxy (pkg/agent/proxy, which turns it
// into OpenFlow) and by tierctl explain/trace (pkg/explain, which shows
// the backends a Service address resolves to).
//
// What it follows (k8s.io/api core/v1 and discovery/v1, and kube-proxy's
// documented behaviour):
//
//   - Services of type ExternalName, headless Services (clusterIP None)
//     and Services labelled service.kubernetes.io/service-proxy-name (left
//     to another proxy) have no frontends.
//   - A port's endpoints come from the EndpointSlices labelled
//     kubernetes.io/service-name with the Service's name, of the
//     frontend's address family; the endpoint's port is the slice's port
//     with the Service port's name and protocol, so a named targetPort
//     resolves per endpoint (per slice) as the EndpointSlice controller
//     wrote it. An address listed twice (in two slices) counts once.
//   - Usable endpoints are the ready ones (a nil condition means ready);
//     when none is ready, the serving and terminating ones (so
//     connections drain to terminating pods that still serve).
//   - internalTrafficPolicy Local: ClusterIP frontends reach only the
//     endpoints on the client's node; none there while the Service has
//     endpoints elsewhere: the connection is dropped.
//     externalTrafficPolicy Local does not restrict pods: traffic from a
//     pod to a NodePort, externalIP or LoadBalancer IP goes to every
//     endpoint, as kube-proxy short-circuits it.
//   - No usable endpoint at all: the connection is rejected (TCP RST or
//     ICMP port unreachable, as kube-proxy's REJECT).
//   - sessionAffinity ClientIP with timeoutSeconds (default 10800).
//   - LoadBalancer ingress IPs with ipMode Proxy are not handled by the
//     node (KEP-1860), so they are no frontends.
//
// Bad input never fails the whole set: a port with an unknown protocol, an
// address that does not parse, a slice port without a number are left out
// with a warning naming the object.
package services
