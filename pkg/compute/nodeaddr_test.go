package compute

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A nodes peer selects "the IPs present in the node.Status.Addresses
// field": every entry that is an IP, of any type, IPv4-mapped IPv6 as
// IPv4, each once; host names are not addresses.
func TestNodePeerAddressesAreEveryIPInStatus(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n1.example"},
		{Type: corev1.NodeInternalIP, Address: "192.168.0.1"},
		{Type: corev1.NodeInternalIP, Address: "fd00::1"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.1"},
		{Type: corev1.NodeHostName, Address: "192.168.0.9"},
		{Type: corev1.NodeInternalDNS, Address: "::ffff:192.168.0.1"},
		{Type: corev1.NodeExternalDNS, Address: "n1.public.example"},
	}}}
	var got []string
	for _, a := range nodeAddresses(n) {
		got = append(got, a.String())
	}
	want := []string{"192.168.0.1", "192.168.0.9", "203.0.113.1", "fd00::1"}
	if !slices.Equal(got, want) {
		t.Errorf("node addresses %v, want %v", got, want)
	}
}

// A nodes peer also selects the node's gateway address in each of its pod
// CIDRs (its first address): pods reach their node's host by it in
// noEncap mode. CIDRs the agent would make no gateway of add nothing.
func TestNodePeerAddressesIncludeTheGateway(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.1"}}}}
	got := fmt.Sprint(nodePeerAddresses(n))
	if want := "[10.244.1.1 192.168.0.1 fd00:10:244:1::1]"; got != want {
		t.Errorf("node peer addresses %s, want %s", got, want)
	}
	// Only the legacy single-CIDR field.
	n.Spec.PodCIDRs = nil
	if got, want := fmt.Sprint(nodePeerAddresses(n)), "[10.244.1.1 192.168.0.1]"; got != want {
		t.Errorf("node peer addresses %s, want %s", got, want)
	}
	for _, bad := range []string{"10.244.1.1/24", "10.244.1.0/31", "garbage", "::ffff:10.244.1.0/120"} {
		n.Spec.PodCIDR = bad
		if got, want := fmt.Sprint(nodePeerAddresses(n)), "[192.168.0.1]"; got != want {
			t.Errorf("pod CIDR %q: node peer addresses %s, want %s", bad, got, want)
		}
	}
}
