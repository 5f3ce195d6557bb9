package statestore

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

func sampleState() *wire.NodeState {
	st := wire.NewNodeState("n1")
	st.Policies["p1"] = &model.Policy{
		Meta: model.Meta{ID: "p1", Generation: 3}, Tier: model.TierAdmin, Priority: 5,
		Source:          model.PolicyRef{Kind: model.KindAdminNetworkPolicy, Name: "a"},
		AppliedToGroups: []string{"g1"},
		Rules: []model.Rule{{Direction: model.DirectionOut, Action: model.ActionDeny, Peer: model.Peer{
			AddressGroups: []string{"ag1"},
			IPBlocks:      []model.IPBlock{{CIDR: netip.MustParsePrefix("10.0.0.0/8"), Except: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}},
		}}},
	}
	st.AppliedToGroups["g1"] = &model.AppliedToGroup{Meta: model.Meta{ID: "g1"}, MembersByNode: model.MembersByNode{
		{Node: "n1", Members: []model.GroupMember{{Pod: &model.PodRef{Namespace: "ns", Name: "a"}, Node: "n1", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}},
	}}
	st.AddressGroups["ag1"] = &model.AddressGroup{Meta: model.Meta{ID: "ag1", Generation: 2}, Members: []model.GroupMember{
		{Pod: &model.PodRef{Namespace: "ns", Name: "b"}, Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("fd00::2")},
			Ports: []model.NamedPort{{Name: "http", Protocol: model.ProtocolTCP, Port: 80}}},
	}}
	return st
}

func TestSaveLoadRoundTrip(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	if sv, err := s.Load(); err != nil || sv != nil {
		t.Fatalf("empty store: %v %v", sv, err)
	}
	st := sampleState()
	if err := s.Save("epoch-1", 42, st); err != nil {
		t.Fatal(err)
	}
	sv, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if sv.Epoch != "epoch-1" || sv.Version != 42 || sv.FormatVersion != FormatVersion {
		t.Errorf("loaded %+v", sv)
	}
	if d := wire.Diff(st, sv.State); len(d) > 0 {
		t.Errorf("state changed through the store:\n%s", strings.Join(d, "\n"))
	}
	// A second save replaces the first and leaves no temporary files.
	st2 := wire.NewNodeState("n1")
	if err := s.Save("epoch-2", 1, st2); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Dir(s.Path()))
	if len(ents) != 1 {
		t.Errorf("store directory holds %d entries, want only the state file", len(ents))
	}
	sv, err = s.Load()
	if err != nil || sv.Epoch != "epoch-2" || len(sv.State.Policies) != 0 {
		t.Errorf("after replace: %+v %v", sv, err)
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	for name, content := range map[string]string{
		"corrupt":        `{"formatVersion":1,"state":{`,
		"future format":  `{"formatVersion":99,"epoch":"e","version":1,"state":{"node":"n1"}}`,
		"missing state":  `{"formatVersion":1,"epoch":"e","version":1}`,
		"truncated save": `{"formatVersion":1,"epoch":"e","ver`,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path(), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if sv, err := s.Load(); err == nil {
				t.Fatalf("loaded %+v from a bad file", sv)
			}
		})
	}
}

func TestLoadFillsMissingMaps(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(), []byte(`{"formatVersion":2,"epoch":"e","version":3,"state":{"node":"n1"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sv, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if sv.State.Policies == nil || sv.State.AppliedToGroups == nil || sv.State.AddressGroups == nil {
		t.Fatal("nil maps in loaded state")
	}
}

// A version 1 file (before the node's pods were saved) would admit no
// pod: it is refused, and the agent keeps the previous run's flows until
// the controller's state arrives.
func TestVersion1IsRefused(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(), []byte(`{"formatVersion":1,"epoch":"e","version":3,"state":{"node":"n1"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if sv, err := s.Load(); err == nil {
		t.Fatalf("loaded a version 1 file: %+v", sv)
	}
}
