package explain

import (
	"fmt"
	"testing"

	"github.com/tierflow/tierflow/pkg/model"
)

// benchWorld is a cluster of 50 namespaces of 20 pods, with 100 Admin-tier
// policies of 5 rules, one NetworkPolicy per namespace and a baseline.
func benchWorld(b *testing.B) (*Evaluator, []model.PodRef) {
	var pods []Pod
	for n := 0; n < 50; n++ {
		for p := 0; p < 20; p++ {
			pods = append(pods, mkPod(fmt.Sprintf("ns%d/pod%d", n, p), fmt.Sprintf("10.%d.0.%d", n, p+1)).
				withPorts(model.NamedPort{Name: "http", Protocol: tcp, Port: int32(8000 + p)}))
		}
	}
	w := newWorld(pods...)
	nsPods := func(n int) []string {
		var refs []string
		for p := 0; p < 20; p++ {
			refs = append(refs, fmt.Sprintf("ns%d/pod%d", n, p))
		}
		return refs
	}
	for n := 0; n < 50; n++ {
		w.atg(fmt.Sprintf("atg%d", n), nsPods(n)...)
		w.ag(fmt.Sprintf("ag%d", n), nsPods(n)...)
		w.np(fmt.Sprintf("ns%d", n), "np", fmt.Sprintf("atg%d", n), both,
			rule(in, 0, model.ActionAllow, fromGroups(fmt.Sprintf("ag%d", (n+1)%50)), model.Port{Protocol: tcp, Name: "http"}),
			rule(out, 0, model.ActionAllow, cidr("10.0.0.0/8", "10.49.0.0/16")))
	}
	for i := 0; i < 100; i++ {
		var rules []model.Rule
		for r := 0; r < 5; r++ {
			rules = append(rules, rule(in, r, model.ActionDeny, fromGroups(fmt.Sprintf("ag%d", (i+r)%50)), model.Port{Protocol: udp, Port: 9000, EndPort: 9100}))
		}
		w.anp(fmt.Sprintf("anp%d", i), int32(i), fmt.Sprintf("atg%d", i%50), rules...)
	}
	w.banp("atg0", rule(in, 0, model.ActionDeny, cidr("0.0.0.0/0")))
	inv, err := NewInventory(w.pods)
	if err != nil {
		b.Fatal(err)
	}
	ev, err := NewEvaluator(w.snap, inv)
	if err != nil {
		b.Fatal(err)
	}
	refs := make([]model.PodRef, len(pods))
	for i := range pods {
		refs[i] = pods[i].Ref
	}
	return ev, refs
}

func BenchmarkExplain(b *testing.B) {
	ev, refs := benchWorld(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s, d := refs[i%len(refs)], refs[(i*7+3)%len(refs)]
		if _, err := ev.Explain(Query{Src: Endpoint{Pod: &s}, Dst: Endpoint{Pod: &d}, Protocol: tcp, Port: 8005}); err != nil {
			b.Fatal(err)
		}
	}
}
