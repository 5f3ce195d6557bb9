package realizer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/proxy"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/pkg/services"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestServiceChangesEqualFullCompile: over random sequences of Service
// and endpoint changes, a bridge updated with only the Services that
// changed (Compiler.CompileChanges, realizer.UpdateServiceChanges, as the
// agent does) holds exactly the flows and groups of a bridge whose Service
// flows are compiled and synced whole every time, and both end the same
// connections and learned affinities. The changes include what makes the
// incremental path fall back to a full compile: frontend addresses two
// Services claim, and node addresses that change.
func TestServiceChangesEqualFullCompile(t *testing.T) {
	env := ovsenv.Start(t, ovsenv.WithOwnNetns())
	inc := newSvcNode(t, env, "inc", 7)
	full := newSvcNode(t, env, "full", 7)
	// One node name for both compilers: traffic policy Local picks by it.
	inc.comp, full.comp = proxy.NewCompiler("n1", 7), proxy.NewCompiler("n1", 7)
	inc.start(t)
	full.start(t)
	if inc.r.Round() != full.r.Round() {
		t.Fatalf("rounds %d and %d: the bridges cannot be compared", inc.r.Round(), full.r.Round())
	}
	ctx := context.Background()
	// The seeds go on from one another's Services.
	svcs := map[string][]services.Port{}
	nodes := []netip.Addr{netip.MustParseAddr("172.18.0.2")}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 16))
		incremental, steps := 0, 30
		for step := 0; step < steps; step++ {
			// One to three Services change (or go); now and then the
			// node addresses.
			ch := proxy.Change{Services: map[string][]services.Port{}}
			for n := 1 + rng.IntN(3); n > 0; n-- {
				i := rng.IntN(12)
				name := fmt.Sprintf("svc%d", i)
				key := "ns/" + name
				if rng.IntN(5) == 0 {
					delete(svcs, key)
				} else {
					svcs[key] = randomService(rng, i)
				}
				ch.Services[key] = svcs[key]
			}
			if rng.IntN(12) == 0 {
				nodes = []netip.Addr{netip.MustParseAddr("172.18.0.2")}
				if rng.IntN(2) == 0 {
					nodes = append(nodes, netip.MustParseAddr("fd00:18::2"))
				}
			}
			ch.NodeAddrs = nodes
			var in proxy.Input
			for _, ports := range svcs {
				in.Ports = append(in.Ports, ports...)
			}
			in.NodeAddrs = nodes

			want := full.comp.Compile(in, full.r.Round())
			if _, err := full.r.UpdateServices(ctx, realizer.Services{Flows: want.Flows, Keys: want.Keys, Groups: want.Groups, DeleteCookies: want.DeleteCookies}); err != nil {
				t.Fatalf("seed %d step %d: full: %v", seed, step, err)
			}
			full.comp.Commit()

			got := inc.comp.CompileChanges(ch, inc.r.Round())
			if got != nil {
				incremental++
				if _, err := inc.r.UpdateServiceChanges(ctx, realizer.ServiceChanges{Flows: got.FlowChanges, Groups: got.GroupChanges, DeleteCookies: got.DeleteCookies}); err != nil {
					t.Fatalf("seed %d step %d: changes: %v", seed, step, err)
				}
			} else {
				got = inc.comp.Compile(in, inc.r.Round())
				if _, err := inc.r.UpdateServices(ctx, realizer.Services{Flows: got.Flows, Keys: got.Keys, Groups: got.Groups, DeleteCookies: got.DeleteCookies}); err != nil {
					t.Fatalf("seed %d step %d: full fallback: %v", seed, step, err)
				}
			}
			inc.comp.Commit()

			what := fmt.Sprintf("seed %d step %d (changed %v)", seed, step, keysOf(ch.Services))
			if g, w := sortedStrings(got.Flushes), sortedStrings(want.Flushes); g != w {
				t.Fatalf("%s: flushes\n got %s\nwant %s", what, g, w)
			}
			if g, w := sortedStrings(got.DeleteCookies), sortedStrings(want.DeleteCookies); g != w {
				t.Fatalf("%s: affinity deletions\n got %s\nwant %s", what, g, w)
			}
			if g, w := sortedStrings(got.Warnings), sortedStrings(want.Warnings); g != w {
				t.Fatalf("%s: warnings\n got %s\nwant %s", what, g, w)
			}
			if g, w := bridgeState(t, inc), bridgeState(t, full); g != w {
				t.Fatalf("%s: the bridges differ\n%s", what, lineDiff(g, w))
			}
		}
		t.Logf("seed %d: %d of %d updates incremental", seed, incremental, steps)
		if incremental < steps/2 {
			t.Errorf("seed %d: only %d of %d updates were incremental", seed, incremental, steps)
		}
	}
}

// randomService is Service i's ports: a TCP and sometimes a UDP port on
// its own ClusterIP (sometimes IPv6 too), sometimes a NodePort, sometimes
// an external IP from a pool of three that Services share (and contest on
// port 80), with up to four endpoints on this node or another, ready or
// not, sometimes with affinity or internal traffic policy Local.
func randomService(rng *rand.Rand, i int) []services.Port {
	var ports []services.Port
	for j, proto := range []uint8{services.ProtoTCP, services.ProtoUDP} {
		if j > 0 && rng.IntN(2) == 0 {
			break
		}
		p := services.Port{Key: services.PortKey{Namespace: "ns", Name: fmt.Sprintf("svc%d", i), Port: fmt.Sprintf("p%d", j)}, Protocol: proto}
		p.Frontends = append(p.Frontends, services.Frontend{Kind: services.ClusterIP, IP: netip.MustParseAddr(fmt.Sprintf("10.96.0.%d", i+1)), Protocol: proto, Port: 80})
		if rng.IntN(3) == 0 {
			p.Frontends = append(p.Frontends, services.Frontend{Kind: services.ClusterIP, IP: netip.MustParseAddr(fmt.Sprintf("fd00:96::%x", i+1)), Protocol: proto, Port: 80})
		}
		if rng.IntN(3) == 0 {
			p.Frontends = append(p.Frontends, services.Frontend{Kind: services.NodePort, Protocol: proto, Port: uint16(30000 + 10*i + j)})
		}
		if rng.IntN(3) == 0 {
			port := uint16(80)
			if rng.IntN(2) == 0 {
				port = uint16(1000 + 10*i + j)
			}
			p.Frontends = append(p.Frontends, services.Frontend{Kind: services.ExternalIP, IP: netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", 1+rng.IntN(3))), Protocol: proto, Port: port})
		}
		for e := 0; e < 6; e++ {
			if rng.IntN(3) != 0 {
				continue
			}
			node := "n1"
			if rng.IntN(3) == 0 {
				node = "n2"
			}
			p.Endpoints = append(p.Endpoints, services.Endpoint{IP: netip.MustParseAddr(fmt.Sprintf("10.0.1.%d", e+1)), Port: 8080,
				NodeName: node, Ready: rng.IntN(4) != 0, Serving: true})
			if rng.IntN(2) == 0 {
				p.Endpoints = append(p.Endpoints, services.Endpoint{IP: netip.MustParseAddr(fmt.Sprintf("fd00::1:%x", e+1)), Port: 8080,
					NodeName: node, Ready: true, Serving: true})
			}
		}
		sort.Slice(p.Endpoints, func(a, b int) bool {
			if p.Endpoints[a].IP != p.Endpoints[b].IP {
				return p.Endpoints[a].IP.Less(p.Endpoints[b].IP)
			}
			return p.Endpoints[a].Port < p.Endpoints[b].Port
		})
		if rng.IntN(4) == 0 {
			p.Affinity = time.Duration(1+rng.IntN(3)) * time.Hour
		}
		p.InternalLocal = rng.IntN(5) == 0
		ports = append(ports, p)
	}
	return ports
}

// bridgeState is every flow and group of the node's bridge, sorted.
func bridgeState(t *testing.T, n *svcNode) string {
	t.Helper()
	n.settle(t)
	flows, err := n.br.DumpFlows(-1)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := n.br.Ofctl("dump-groups")
	if err != nil {
		t.Fatal(err)
	}
	lines := append(flows, strings.Split(strings.TrimSpace(groups), "\n")[1:]...)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// lineDiff is the lines only one of a and b has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for l := range ina {
		if !inb[l] {
			out = append(out, "incremental only: "+l)
		}
	}
	for l := range inb {
		if !ina[l] {
			out = append(out, "full only:        "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func sortedStrings[T any](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	sort.Strings(s)
	return strings.Join(s, "; ")
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
