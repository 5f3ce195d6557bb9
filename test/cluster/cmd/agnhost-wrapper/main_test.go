package main

import (
	"slices"
	"testing"
)

func TestWithoutSCTPPorts(t *testing.T) {
	env := []string{"PATH=/bin", "SERVE_SCTP_PORT_9003=foo", "SERVE_PORT_80=foo"}
	kept, dropped := withoutSCTPPorts(env)
	if !slices.Equal(kept, []string{"PATH=/bin", "SERVE_PORT_80=foo"}) || !slices.Equal(dropped, []string{"SERVE_SCTP_PORT_9003"}) {
		t.Errorf("kept %v, dropped %v", kept, dropped)
	}
	if !servesAnything(kept) {
		t.Error("SERVE_PORT_80 is something to serve")
	}
	if kept, _ := withoutSCTPPorts([]string{"PATH=/bin", "SERVE_SCTP_PORT_9005=foo"}); servesAnything(kept) {
		t.Error("nothing is left to serve")
	}
	if !isPorter([]string{"porter"}) || isPorter([]string{"netexec", "porter"}) || isPorter(nil) {
		t.Error("isPorter")
	}
}
