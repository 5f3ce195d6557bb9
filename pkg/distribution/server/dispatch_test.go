package server

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// memSource is a Source whose changes the test delivers in exactly the
// batches it wants — something the real engine cannot be made to do
// deterministically (it coalesces by timing).
type memSource struct {
	mu   sync.Mutex
	snap model.Snapshot
	fn   func([]compute.Change)
}

func newMemSource() *memSource {
	return &memSource{snap: model.Snapshot{AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}}
}

func (m *memSource) Snapshot() *model.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := model.Snapshot{Policies: append([]*model.Policy(nil), m.snap.Policies...), AppliedToGroups: map[string]*model.AppliedToGroup{}, AddressGroups: map[string]*model.AddressGroup{}}
	for k, v := range m.snap.AppliedToGroups {
		c.AppliedToGroups[k] = v
	}
	for k, v := range m.snap.AddressGroups {
		c.AddressGroups[k] = v
	}
	if len(m.snap.NodePods) > 0 {
		c.NodePods = map[string]*model.NodePods{}
		for k, v := range m.snap.NodePods {
			c.NodePods[k] = v
		}
	}
	return &c
}

func (m *memSource) NodePods(node string) (*model.NodePods, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	np, ok := m.snap.NodePods[node]
	return np, ok
}

func (m *memSource) Policy(id string) (*model.Policy, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.snap.Policies {
		if p.ID == id {
			return p, true
		}
	}
	return nil, false
}

func (m *memSource) AppliedToGroup(id string) (*model.AppliedToGroup, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.snap.AppliedToGroups[id]
	return g, ok
}

func (m *memSource) AddressGroup(id string) (*model.AddressGroup, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.snap.AddressGroups[id]
	return g, ok
}

func (m *memSource) Subscribe(fn func([]compute.Change)) func() {
	m.fn = fn
	return func() {}
}

func (m *memSource) setPolicy(id string, p *model.Policy) {
	m.mu.Lock()
	var out []*model.Policy
	for _, q := range m.snap.Policies {
		if q.ID != id {
			out = append(out, q)
		}
	}
	if p != nil {
		out = append(out, p)
	}
	m.snap.Policies = out
	m.mu.Unlock()
}

func member(name, node string) model.GroupMember {
	return model.GroupMember{Pod: &model.PodRef{Namespace: "ns", Name: name}, Node: node}
}

// TestGroupMovingBetweenPoliciesInOneRound: when one round deletes the
// only policy using an address group and adds another policy using it,
// the node keeps the group (deleting it after sending the new policy
// would leave the new policy's peer empty).
func TestGroupMovingBetweenPoliciesInOneRound(t *testing.T) {
	src := newMemSource()
	src.snap.AppliedToGroups["atg"] = &model.AppliedToGroup{Meta: model.Meta{ID: "atg", Span: []string{"n1"}},
		MembersByNode: model.MembersByNode{{Node: "n1", Members: []model.GroupMember{member("a", "n1")}}}}
	src.snap.AddressGroups["ag"] = &model.AddressGroup{Meta: model.Meta{ID: "ag"}, Members: []model.GroupMember{member("b", "n2")}}
	pol := func(id string) *model.Policy {
		return &model.Policy{Meta: model.Meta{ID: id, Generation: 1, Span: []string{"n1"}}, AppliedToGroups: []string{"atg"},
			Rules: []model.Rule{{Peer: model.Peer{AddressGroups: []string{"ag"}}}}}
	}
	src.setPolicy("p1", pol("p1"))

	s := New(src, StaticTokens{}, Options{Logger: nil})
	s.dispatchRound()
	ss := newSession("n1")
	ss.conn = 1 // as if connected: the test reads the queued updates itself
	s.mu.Lock()
	s.sessions["n1"] = ss
	full := s.buildFull(ss)
	ss.needFull = false
	s.enqueue(ss, full, time.Now())
	s.mu.Unlock()

	src.setPolicy("p1", nil)
	src.setPolicy("p2", pol("p2"))
	src.fn([]compute.Change{{Kind: compute.KindPolicy, ID: "p1"}, {Kind: compute.KindPolicy, ID: "p2"}})
	s.dispatchRound()

	st := wire.NewNodeState("n1")
	for _, e := range ss.log {
		if _, err := st.Apply(e.u); err != nil {
			t.Fatal(err)
		}
	}
	last := ss.log[len(ss.log)-1].u
	if len(last.DeletedAddressGroups) > 0 || len(last.DeletedAppliedToGroups) > 0 {
		t.Errorf("groups deleted while still used: %+v", last)
	}
	if d := wire.Diff(wire.ForNode(src.Snapshot(), "n1"), st); len(d) > 0 {
		t.Fatalf("node state differs:\n%s", strings.Join(d, "\n"))
	}
}

// TestRecreatedPolicyWithSameGeneration: a policy deleted and recreated
// under the same ID within one round may come back with the same
// generation but other content; the node must get the new content. A new
// object with identical content sends nothing.
func TestRecreatedPolicyWithSameGeneration(t *testing.T) {
	src := newMemSource()
	src.snap.AppliedToGroups["atg"] = &model.AppliedToGroup{Meta: model.Meta{ID: "atg", Span: []string{"n1"}},
		MembersByNode: model.MembersByNode{{Node: "n1", Members: []model.GroupMember{member("a", "n1")}}}}
	pol := func(prio int32) *model.Policy {
		return &model.Policy{Meta: model.Meta{ID: "p", Generation: 1, Span: []string{"n1"}}, Priority: prio, AppliedToGroups: []string{"atg"}}
	}
	src.setPolicy("p", pol(5))
	s := New(src, StaticTokens{}, Options{})
	s.dispatchRound()
	ss := newSession("n1")
	ss.conn = 1
	s.mu.Lock()
	s.sessions["n1"] = ss
	full := s.buildFull(ss)
	ss.needFull = false
	s.enqueue(ss, full, time.Now())
	s.mu.Unlock()

	change := func(p *model.Policy) {
		src.setPolicy("p", p)
		src.fn([]compute.Change{{Kind: compute.KindPolicy, ID: "p"}})
		s.dispatchRound()
	}
	change(pol(5)) // same content, new object
	if ss.version != 1 {
		t.Fatalf("identical policy queued an update (version %d)", ss.version)
	}
	change(pol(7)) // other content, same generation
	if ss.version != 2 || len(ss.log[len(ss.log)-1].u.Policies) != 1 || ss.log[len(ss.log)-1].u.Policies[0].Priority != 7 {
		t.Fatalf("changed policy with the same generation not sent: version %d", ss.version)
	}
}

// TestNodePodsNotAheadOfTheirGroups: a node's pods entry (what its agent
// admits a port by) is sent only by a round that has taken every change
// up to the entry's generation — the group changes that make the pod a
// member. A round that reads the node's pods after the engine moved on
// (the pod's changes, generation 10, delivered after the round took its
// changes up to generation 5) leaves the newer entry out; the round
// that takes the pod's changes sends it.
func TestNodePodsNotAheadOfTheirGroups(t *testing.T) {
	src := newMemSource()
	np := func(entries ...model.NodePod) *model.NodePods {
		return &model.NodePods{Meta: model.Meta{ID: "n1", Span: []string{"n1"}}, Pods: entries}
	}
	old := model.NodePod{Pod: model.PodRef{Namespace: "ns", Name: "old"}, UID: "u-old", Generation: 3}
	fresh := model.NodePod{Pod: model.PodRef{Namespace: "ns", Name: "new"}, UID: "u-new", Generation: 10}
	src.snap.NodePods = map[string]*model.NodePods{"n1": np(old)}
	s := New(src, StaticTokens{}, Options{})
	s.dispatchRound()
	ss := newSession("n1")
	ss.conn = 1
	s.mu.Lock()
	s.sessions["n1"] = ss
	full := s.buildFull(ss)
	ss.needFull = false
	s.enqueue(ss, full, time.Now())
	s.mu.Unlock()
	state := func() *wire.NodeState {
		st := wire.NewNodeState("n1")
		for _, e := range ss.log {
			if _, err := st.Apply(e.u); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	names := func(st *wire.NodeState) []string {
		var out []string
		if st.Pods != nil {
			for _, p := range st.Pods.Pods {
				out = append(out, p.Pod.Name)
			}
		}
		return out
	}
	if got := names(state()); len(got) != 1 || got[0] != "old" {
		t.Fatalf("full update: pods %v", got)
	}
	// The engine already holds the new pod (generation 10) when a round
	// that took only changes up to generation 5 reads the node's pods.
	src.mu.Lock()
	src.snap.NodePods["n1"] = np(old, fresh)
	src.mu.Unlock()
	src.fn([]compute.Change{{Kind: compute.KindNodePods, ID: "n1", Generation: 5}})
	s.dispatchRound()
	if got := names(state()); len(got) != 1 || got[0] != "old" {
		t.Fatalf("entry sent ahead of its changes: pods %v", got)
	}
	src.fn([]compute.Change{{Kind: compute.KindNodePods, ID: "n1", Generation: 10}})
	s.dispatchRound()
	if got := names(state()); len(got) != 2 {
		t.Fatalf("entry not sent with its changes: pods %v", got)
	}
	if d := wire.Diff(wire.ForNode(src.Snapshot(), "n1"), state()); len(d) > 0 {
		t.Fatalf("node state differs:\n%s", strings.Join(d, "\n"))
	}
	// The node's last pod goes: the agent holds none.
	src.mu.Lock()
	delete(src.snap.NodePods, "n1")
	src.mu.Unlock()
	src.fn([]compute.Change{{Kind: compute.KindNodePods, ID: "n1", Type: compute.Deleted, Generation: 10}})
	s.dispatchRound()
	if got := names(state()); len(got) != 0 {
		t.Fatalf("pods after the node's last pod went: %v", got)
	}
}
