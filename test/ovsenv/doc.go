// Package ovsenv runs a private, real Open vSwitch for tests: its own
// ovsdb-server and ovs-vswitchd (userspace "netdev" datapath) in a temporary
// run directory, bridges on it, and "pods" — network namespaces attached to
// a bridge through veth pairs — between which real packets flow.
//
// Typical use:
//
//	env := ovsenv.Start(t)                  // daemons stop on t.Cleanup
//	br := env.AddBridge("br")               // netdev, fail_mode=secure, OpenFlow13
//	a := br.AddPod("a", mac("0a:00:00:00:00:01"), netip.MustParsePrefix("10.0.0.1/24"))
//	b := br.AddPod("b", mac("0a:00:00:00:00:02"), netip.MustParsePrefix("10.0.0.2/24"))
//	srv := b.ListenTCP(8080)                // echo server inside b's netns (also ListenUDP)
//	err := a.ProbeTCP(netip.MustParseAddrPort("10.0.0.2:8080"), time.Second) // errors.Is(err, ErrNoReply) when dropped
//	conn, _ := a.DialTCP(dst, time.Second)  // long-lived: conn.Exchange("msg", timeout) later
//	flows, _ := br.DumpFlows(0)             // dump-flows lines without counters ("cookie=0x0, table=0, priority=...")
//	out, _ := br.Trace("in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=8080")
//	_ = a.InNetns(func() error { ... })     // run Go code (sockets) inside the pod
//	_, _ = a.Exec("ip", "route")            // run a command inside the pod
//
// Each pod's OVS interface carries the tierflow CNI external_ids
// (pkg/ovs/ovsdb: pod-namespace "default", pod-name, pod-ips, pod-mac), and
// Pod.OFPort is its OpenFlow port. Env.RestartVswitchd / StopVswitchd /
// StartVswitchd simulate an ovs-vswitchd restart (flows are lost);
// Env.StopOVSDB and FreezeOVSDB an ovsdb-server that is gone or hangs.
//
// One Env at a time per host: ovs-vswitchd's userspace datapath creates a
// tap device named "ovs-netdev" in the host network namespace, so two
// ovs-vswitchd processes cannot coexist. Start takes an exclusive flock on
// HostLockPath (held until cleanup), so Envs of concurrent test processes
// run one after the other; never start a second Env while one is running
// in the same test (it would wait for itself and fail after 8 minutes).
//
// Flow changes reach packets of existing datapath flows (an established
// connection) once ovs-vswitchd has revalidated them, usually within
// milliseconds; call Env.WaitRevalidated before asserting that traffic is
// blocked right after a change.
//
// Isolation: every Env has a random ID; the run directory, bridge names,
// namespace names and veth names all contain it, so several test processes
// can run at once. Cleanup stops the daemons (ovs-vswitchd with
// `exit --cleanup`, which removes the bridges' tap devices), deletes the
// namespaces (which destroys their veth pairs) and the run directory. Daemons
// are started with a parent-death signal, and Start removes namespaces left
// behind by test processes that no longer exist, so a crashed test does not
// poison the next one.
//
// Setup helpers (Start, AddBridge, AddPod, Listen*) fail the test with
// t.Fatal and must be called from the test goroutine; probes return errors
// so that a test can assert that traffic is blocked.
//
// Pods are wired for a flat L2 network: every address's prefix is on-link and
// a default route (IPv4 and IPv6) points out of the pod's interface, so a pod
// ARPs / sends neighbour solicitations for any destination and the bridge's
// flows decide what is delivered. TX checksum offload is off on both veth
// ends, because the userspace datapath's conntrack would otherwise see TCP
// segments with partial checksums and mark them invalid. IPv6 addresses are
// added with nodad so they are usable at once.
//
// Requirements: root, iproute2, ethtool and openvswitch-switch (see
// test/tools/install-deps.sh). A missing prerequisite fails the test.
package ovsenv
