package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// BenchmarkFanOut measures the time from one change in the engine until
// every datapath-less agent holds it, with N agents connected over TLS.
// Authentication is by static tokens: this measures distribution, not
// TokenReview (whose results the server caches anyway).
//
//	policy-edit:    a policy applied to pods on every node changes (the
//	                policy goes to all N agents)
//	peer-pod-added: a pod joins the policy's address group (a patch to all
//	                N agents)
//	local-pod-added: a pod joins the applied-to group on one node (one
//	                agent receives it; the others nothing)
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{100, 200} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) { benchFanOut(b, n) })
	}
}

func benchFanOut(b *testing.B, nAgents int) {
	toks := server.StaticTokens{}
	nodes := make([]string, nAgents)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%03d", i)
		toks["tok-"+nodes[i]] = nodes[i]
	}
	e := newEnv(b, toks, server.Options{})
	en := e.engine
	en.UpsertNamespace(namespace("app", map[string]string{"team": "app"}))
	en.UpsertNamespace(namespace("clients", map[string]string{"team": "clients"}))
	for i, nd := range nodes {
		en.UpsertNode(node(nd, fmt.Sprintf("192.168.%d.%d", i/250, i%250+1)))
		// Two app pods per node (the applied-to group) and one client pod
		// (the address group).
		en.UpsertPod(pod("app", fmt.Sprintf("web-%d-a", i), nd, ip(3*i), map[string]string{"app": "web"}))
		en.UpsertPod(pod("app", fmt.Sprintf("web-%d-b", i), nd, ip(3*i+1), map[string]string{"app": "web"}))
		en.UpsertPod(pod("clients", fmt.Sprintf("client-%d", i), nd, ip(3*i+2), map[string]string{"app": "client"}))
	}
	en.UpsertNetworkPolicy(allowFrom("app", "web-allow", "web", "clients", "client"))

	start := time.Now()
	agents := make([]*nodatapath.Runtime, nAgents)
	for i, nd := range nodes {
		agents[i] = e.startAgent(e.agentConfig(nd, "tok-"+nd, e.addr, ""))
	}
	e.waitConverged(agents...)
	b.Logf("%d agents connected and holding their full state in %v", nAgents, time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	waitAll := func(b *testing.B, cond func(*wire.NodeState) bool, who []*nodatapath.Runtime) {
		for _, a := range who {
			if err := a.WaitFor(ctx, cond); err != nil {
				b.Fatal(err)
			}
		}
	}
	policyGen := func(st *wire.NodeState) int64 {
		for _, p := range st.Policies {
			if p.Source.Name == "web-allow" {
				return p.SourceGeneration
			}
		}
		return -1
	}

	b.Run("policy-edit", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			gen := int64(1000 + i)
			np := allowFrom("app", "web-allow", "web", "clients", "client")
			np.Generation = gen
			np.Spec.Ingress[0].Ports[0].EndPort = ptr(int32(9000 + i%100))
			en.UpsertNetworkPolicy(np)
			waitAll(b, func(st *wire.NodeState) bool { return policyGen(st) == gen }, agents)
		}
	})
	b.Run("peer-pod-added", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("late-client-%d", i)
			en.UpsertPod(pod("clients", name, nodes[i%nAgents], ip(10000+i), map[string]string{"app": "client"}))
			waitAll(b, func(st *wire.NodeState) bool { return hasAddressMember(st, name) }, agents)
		}
	})
	b.Run("local-pod-added", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("late-web-%d", i)
			a := agents[i%nAgents]
			en.UpsertPod(pod("app", name, a.Node(), ip(20000+i), map[string]string{"app": "web"}))
			waitAll(b, func(st *wire.NodeState) bool { return hasAppliedMember(st, name) }, []*nodatapath.Runtime{a})
		}
	})
}

func ptr[T any](v T) *T { return &v }

func hasAddressMember(st *wire.NodeState, pod string) bool {
	for _, g := range st.AddressGroups {
		for _, m := range g.Members {
			if m.Pod != nil && m.Pod.Name == pod {
				return true
			}
		}
	}
	return false
}

func hasAppliedMember(st *wire.NodeState, pod string) bool {
	for _, g := range st.AppliedToGroups {
		for _, e := range g.MembersByNode {
			for _, m := range e.Members {
				if m.Pod != nil && m.Pod.Name == pod {
					return true
				}
			}
		}
	}
	return false
}
