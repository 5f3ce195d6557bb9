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

// Uninstall removes tierflow as manifests/README.md documents it (its
// block "uninstall", run verbatim) and returns the block's output and, per
// node, what tierflow left there (Leftovers).
func (c *Cluster) Uninstall(ctx context.Context, repoRoot string) (string, map[string][]string, error) {
	out, err := c.RunDocBlock(ctx, repoRoot, "manifests/README.md", "uninstall")
	if err != nil {
		return out, nil, err
	}
	left, err := c.Leftovers(ctx)
	return out, left, err
}

// Leftovers lists, per node, what tierflow may leave on a node and is
// still there: the devices of its OVS (gateway, bridge, the userspace
// datapath's), routes of protocol 0x54, iptables nat rules naming
// TIERFLOW, the nftables table tierflow-cni, the CNI configuration and
// binaries tierflow installs (the nodes have no CNI plugins of their
// own), its state, log and OVS run directories.
func (c *Cluster) Leftovers(ctx context.Context) (map[string][]string, error) {
	checks := []struct{ what, script string }{
		{"OVS devices", "for d in tierflow-gw0 br-int ovs-netdev ovs-system; do ip -o link show $d 2>/dev/null; done"},
		{"routes proto 0x54", "ip route show table all proto 0x54; ip -6 route show table all proto 0x54"},
		{"nat rules", "{ iptables-save -t nat; ip6tables-save -t nat; } 2>/dev/null | grep -i tierflow"},
		{"nftables", "nft list tables 2>/dev/null | grep -i tierflow"},
		{"CNI configuration", "ls /etc/cni/net.d 2>/dev/null | grep -i tierflow"},
		{"CNI binaries", "ls /opt/cni/bin 2>/dev/null | grep -E '^(tierflow-cni|host-local|loopback)$'"},
		{"directories", "ls -d /var/lib/tierflow /var/log/tierflow /run/openvswitch 2>/dev/null"},
	}
	left := map[string][]string{}
	for _, n := range c.Nodes {
		for _, ch := range checks {
			// A check finds nothing by failing (grep, ls): only a failing
			// docker exec is an error.
			out, err := c.Exec(ctx, n.Name, "sh", "-c", ch.script+"; true")
			if err != nil {
				return nil, fmt.Errorf("%s: checking %s: %w", n.Name, ch.what, err)
			}
			if strings.TrimSpace(out) != "" {
				left[n.Name] = append(left[n.Name], ch.what+": "+strings.Join(strings.Fields(out), " "))
			}
		}
	}
	return left, nil
}
