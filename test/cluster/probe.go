package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Connect runs `/agnhost connect TARGET --protocol=PROTO` in pod ns/name
// through `kubectl exec` (the API server, the node's kubelet and
// containerd, as any user's exec), and returns nil when the connection
// succeeded. proto is tcp or udp; a UDP probe needs an agnhost server that
// answers (netexec, serve-hostname).
func (c *Cluster) Connect(ctx context.Context, ns, pod, target, proto string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := c.Kubectl(ctx, nil, "exec", "-n", ns, pod, "--", "/agnhost", "connect", target,
		"--timeout=3s", "--protocol="+strings.ToLower(proto))
	if err != nil {
		return fmt.Errorf("%s/%s → %s/%s: %v %s", ns, pod, proto, target, err, out)
	}
	return nil
}

// PeerRecorder is a TCP server on this machine that records the source
// address of every connection: what "outside the cluster" sees of a pod.
type PeerRecorder struct {
	ln    net.Listener
	mu    sync.Mutex
	peers []string
}

// RecordPeers listens on addr (HOST:PORT).
func RecordPeers(addr string) (*PeerRecorder, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &PeerRecorder{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
			r.mu.Lock()
			r.peers = append(r.peers, host)
			r.mu.Unlock()
			conn.Close()
		}
	}()
	return r, nil
}

// Addr is the address the recorder listens on.
func (r *PeerRecorder) Addr() string { return r.ln.Addr().String() }

// Peers returns the source addresses seen so far.
func (r *PeerRecorder) Peers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.peers...)
}

// Close stops listening.
func (r *PeerRecorder) Close() error { return r.ln.Close() }

// Leftovers lists, per node, what tierflow may leave on a node and is
// still there: the gateway interface, routes of protocol 0x54, iptables
// nat rules naming TIERFLOW, the nftables table tierflow-cni, CNI
// configuration and binaries tierflow installs, its state directories.
func (c *Cluster) Leftovers(ctx context.Context) (map[string][]string, error) {
	checks := []struct{ what, script string }{
		{"gateway interface", "ip -o link show tierflow-gw0 2>/dev/null"},
		{"OVS bridge interface", "ip -o link show br-int 2>/dev/null"},
		{"routes proto 0x54", "ip route show table all proto 0x54; ip -6 route show table all proto 0x54"},
		{"nat rules", "{ iptables-save -t nat; ip6tables-save -t nat; } 2>/dev/null | grep -i tierflow"},
		{"nftables", "nft list tables 2>/dev/null | grep -i tierflow"},
		{"CNI configuration", "ls /etc/cni/net.d 2>/dev/null | grep -i tierflow"},
		{"CNI binaries", "ls /opt/cni/bin 2>/dev/null | grep -E '^(tierflow-cni|host-local|loopback)$'"},
		{"state directories", "ls -d /var/lib/tierflow /var/log/tierflow 2>/dev/null"},
	}
	left := map[string][]string{}
	for _, n := range c.Nodes {
		for _, ch := range checks {
			out, _ := c.Exec(ctx, n.Name, "sh", "-c", ch.script)
			if strings.TrimSpace(out) != "" {
				left[n.Name] = append(left[n.Name], ch.what+": "+strings.Join(strings.Fields(out), " "))
			}
		}
	}
	return left, nil
}
