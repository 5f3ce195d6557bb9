// Package netstamp reads TCP connections with the kernel's receive
// timestamps (SO_TIMESTAMPNS, CLOCK_REALTIME: the clock of time.Now), so
// that a reader learns when bytes arrived rather than when it got round
// to reading them. On loopback the kernel stamps a segment in netif_rx,
// inside the sender's send call (with net.core.netdev_tstamp_prequeue at
// its default, 1), so the stamp is when the peer sent the bytes. Unix
// stream sockets carry no such stamp: TCP only. pkg/ovs/openflow's flow
// Monitor and test/bench's end-to-end latency use it to time what a
// switch reports.
package netstamp
