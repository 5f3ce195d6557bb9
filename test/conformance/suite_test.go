package conformance

import (
	"strings"
	"testing"
)

// The go test -json lines of a suite run: a case failing on an SCTP probe
// alone, one failing on TCP too, one passing, one skipped, and a parent.
const sampleJSON = `{"Action":"run","Test":"TestConformanceProfiles"}
{"Action":"run","Test":"TestConformanceProfiles/X"}
{"Action":"run","Test":"TestConformanceProfiles/X/sctp_only"}
{"Action":"output","Test":"TestConformanceProfiles/X/sctp_only","Output":"    x.go:70: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/sctp_only","Output":"        \tError Trace:\tx.go:72\n        \tError:      \tShould be true\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/sctp_only","Elapsed":1.5}
{"Action":"run","Test":"TestConformanceProfiles/X/tcp_too"}
{"Action":"output","Test":"TestConformanceProfiles/X/tcp_too","Output":"    x.go:70: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/tcp_too","Output":"        \tError Trace:\tx.go:72\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/tcp_too","Output":"    x.go:80: FAILED Command was [/agnhost connect --timeout=3s --protocol=tcp 10.244.3.3:80]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/tcp_too","Output":"        \tError Trace:\tx.go:82\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/tcp_too","Elapsed":1}
{"Action":"run","Test":"TestConformanceProfiles/X/setup_error"}
{"Action":"output","Test":"TestConformanceProfiles/X/setup_error","Output":"    x.go:70: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/setup_error","Output":"        \tError Trace:\tx.go:72\n        \tError Trace:\tx.go:90\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/setup_error","Elapsed":1}
{"Action":"run","Test":"TestConformanceProfiles/X/polled_sctp"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_sctp","Output":"    helper.go:98: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_sctp","Output":"    helper.go:98: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_sctp","Output":"        \tError Trace:\thelper.go:70\n        \tError:      \tCondition never satisfied\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/polled_sctp","Elapsed":1}
{"Action":"run","Test":"TestConformanceProfiles/X/polled_tcp_then_sctp"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_then_sctp","Output":"    helper.go:71: FAILED Command was [/agnhost connect --timeout=3s --protocol=tcp 10.244.3.3:80]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_then_sctp","Output":"    helper.go:71: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_then_sctp","Output":"        \tError Trace:\thelper.go:70\n        \tError:      \tCondition never satisfied\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/polled_tcp_then_sctp","Elapsed":1}
{"Action":"run","Test":"TestConformanceProfiles/X/polled_tcp_never"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_never","Output":"    helper.go:71: FAILED Command was [/agnhost connect --timeout=3s --protocol=tcp 10.244.3.3:80]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_never","Output":"        \tError Trace:\thelper.go:70\n        \tError:      \tCondition never satisfied\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_never","Output":"    helper.go:71: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/polled_tcp_never","Output":"        \tError Trace:\thelper.go:70\n        \tError:      \tCondition never satisfied\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/polled_tcp_never","Elapsed":1}
{"Action":"run","Test":"TestConformanceProfiles/X/patch_error"}
{"Action":"output","Test":"TestConformanceProfiles/X/patch_error","Output":"    helper.go:98: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.244.3.3:9003]\n"}
{"Action":"output","Test":"TestConformanceProfiles/X/patch_error","Output":"        \tError Trace:\tx.go:70\n        \tError:      \tReceived unexpected error:\n"}
{"Action":"fail","Test":"TestConformanceProfiles/X/patch_error","Elapsed":1}
{"Action":"run","Test":"TestConformanceProfiles/X/ok"}
{"Action":"pass","Test":"TestConformanceProfiles/X/ok","Elapsed":0.2}
{"Action":"fail","Test":"TestConformanceProfiles/X","Elapsed":4}
{"Action":"run","Test":"TestConformanceProfiles/Y"}
{"Action":"skip","Test":"TestConformanceProfiles/Y","Elapsed":0}
{"Action":"run","Test":"TestConformanceProfiles/Z/never_finished"}
not json: build output
{"Action":"fail","Test":"TestConformanceProfiles","Elapsed":5}
`

func TestParseAndClassify(t *testing.T) {
	var failed []string
	cases, err := parseTestJSON("s", strings.NewReader(sampleJSON), func(test, command string) { failed = append(failed, test+" "+command) })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		outcome  Outcome
		sctpOnly bool
	}{
		"TestConformanceProfiles/X/sctp_only":            {Fail, true},
		"TestConformanceProfiles/X/tcp_too":              {Fail, false},
		"TestConformanceProfiles/X/setup_error":          {Fail, false},
		"TestConformanceProfiles/X/polled_sctp":          {Fail, true},
		"TestConformanceProfiles/X/patch_error":          {Fail, false},
		"TestConformanceProfiles/X/polled_tcp_then_sctp": {Fail, true},
		"TestConformanceProfiles/X/polled_tcp_never":     {Fail, false},
		"TestConformanceProfiles/X/ok":                   {Pass, false},
		"TestConformanceProfiles/Y":                      {Skip, false},
		"TestConformanceProfiles/Z/never_finished":       {Fail, false},
	}
	if len(cases) != len(want) {
		t.Fatalf("got %d leaf cases, want %d: %+v", len(cases), len(want), cases)
	}
	for _, c := range cases {
		w, ok := want[c.Name]
		if !ok {
			t.Errorf("unexpected case %s", c.Name)
			continue
		}
		if c.Outcome != w.outcome || c.FailedOnSCTPOnly() != w.sctpOnly {
			t.Errorf("%s: outcome %s, SCTP only %v; want %s, %v", c.Name, c.Outcome, c.FailedOnSCTPOnly(), w.outcome, w.sctpOnly)
		}
	}
	if p, f, k := Tally(cases); p != 1 || f != 8 || k != 1 {
		t.Errorf("tally %d passed, %d failed, %d skipped; want 1, 8, 1", p, f, k)
	}
	note := SCTPNote(cases, 48, 48, true)
	if !strings.Contains(note, "SCTP: 3 cases failed on SCTP probes only") || !strings.Contains(note, "48/48 agree") || !strings.Contains(note, "(SCTPByTrace PASS)") {
		t.Errorf("SCTP note: %s", note)
	}
	for _, bad := range []string{SCTPNote(cases, 48, 47, true), SCTPNote(cases, 48, 48, false), SCTPNote(cases, 0, 0, true)} {
		if !strings.Contains(bad, "(SCTPByTrace FAIL)") {
			t.Errorf("SCTP note of a failed or empty trace check: %s", bad)
		}
	}
	// Only TCP probes are told as they happen (a retried one too: its
	// first attempts may show a slow realization): SCTP ones fail here anyway.
	wantFailed := []string{
		"TestConformanceProfiles/X/tcp_too /agnhost connect --timeout=3s --protocol=tcp 10.244.3.3:80",
		"TestConformanceProfiles/X/polled_tcp_then_sctp /agnhost connect --timeout=3s --protocol=tcp 10.244.3.3:80",
		"TestConformanceProfiles/X/polled_tcp_never /agnhost connect --timeout=3s --protocol=tcp 10.244.3.3:80",
	}
	if strings.Join(failed, "|") != strings.Join(wantFailed, "|") {
		t.Errorf("failed probes told: %q, want %q", failed, wantFailed)
	}
}

// TestWithExtraFeatures: an extra feature goes to the suite whose profile
// names it, once.
func TestWithExtraFeatures(t *testing.T) {
	anp := Suite{Profiles: []string{"AdminNetworkPolicy", "BaselineAdminNetworkPolicy"}, Features: []string{"AdminNetworkPolicy"}}
	cnp := Suite{Profiles: []string{"ClusterNetworkPolicy"}, Features: []string{"ClusterNetworkPolicy"}}
	extra := " AdminNetworkPolicyEgressNodePeers,BaselineAdminNetworkPolicyEgressNodePeers,AdminNetworkPolicy,,ClusterNetworkPolicyX"
	if got := strings.Join(anp.WithExtraFeatures(extra).Features, ","); got != "AdminNetworkPolicy,AdminNetworkPolicyEgressNodePeers,BaselineAdminNetworkPolicyEgressNodePeers" {
		t.Errorf("ANP suite features %s", got)
	}
	if got := strings.Join(cnp.WithExtraFeatures(extra).Features, ","); got != "ClusterNetworkPolicy,ClusterNetworkPolicyX" {
		t.Errorf("CNP suite features %s", got)
	}
	if len(anp.Features) != 1 {
		t.Errorf("WithExtraFeatures changed the original: %v", anp.Features)
	}
}
