// Package agnhost reimplements, for the tierflow test bed, the parts of the
// Kubernetes e2e test image agnhost (registry.k8s.io/e2e-test-images/agnhost)
// that network-policy conformance suites use, so that their probes run
// unchanged against pods that are network namespaces rather than
// containers:
//
//   - connect HOST:PORT [--timeout=D] [--protocol=tcp|udp] [--udp-data=S]:
//     the probe. Same flags, stdout/stderr text and exit status as agnhost:
//     exit 0 and no output on success; exit 1 with "TIMEOUT", "REFUSED",
//     "DNS: ...", "OTHER: ..." or "UNKNOWN: ..." on stderr otherwise.
//   - serve-hostname [--tcp] [--udp] [--http] [--port=N]: answers with the
//     pod's hostname (raw TCP: write and close; UDP: one datagram per
//     datagram; HTTP: the body).
//   - porter: serves the value of each SERVE_PORT_N / SERVE_TCP_PORT_N
//     (HTTP), SERVE_UDP_PORT_N (UDP) and SERVE_TLS_PORT_N (HTTPS, with a
//     generated self-signed certificate) environment variable on port N.
//   - netexec [--http-port=N] [--udp-port=N]: HTTP /hostname, /echo?msg=,
//     /clientip, /healthz and the UDP commands "hostname", "echo MSG" and
//     "clientip".
//   - pause: serves nothing.
//
// Not agnhost: for a CoreDNS container (image name containing "coredns")
// the test bed serves its declared ports with a DNS stand-in (dns.go) that
// answers every A and AAAA query with a fixed documentation address, so
// DNS traffic to a kube-dns Service can be tested.
//
// Differences from agnhost, chosen for the test bed: servers listen on all
// addresses of both families (agnhost's porter binds 0.0.0.0 only), so that
// IPv6 pods are probed like IPv4 ones; SCTP is not supported (connect and
// the servers report it as an error), because the test bed's userspace OVS
// datapath does not carry it; the hostname is the pod's, passed in, because
// the pod's processes share the node's UTS namespace.
package agnhost
