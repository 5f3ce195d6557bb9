package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/explain/load"
	"github.com/tierflow/tierflow/pkg/model"
)

// The handler over cmd/tierctl's offline test cluster, without the
// Authorizer (TokenReview and SubjectAccessReview need a kube-apiserver:
// cmd/tierctl's TestLive covers them end to end).
func testServer(t *testing.T, ready *bool) *httptest.Server {
	t.Helper()
	objs, err := load.Files("../../cmd/tierctl/testdata/cluster.yaml", "../../cmd/tierctl/testdata/story1-deny/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	built, err := load.Build(objs)
	if err != nil {
		t.Fatal(err)
	}
	src := Source{
		Snapshot: func() *model.Snapshot { return built.Snapshot },
		Realization: func(id string) (Realization, bool) {
			return Realization{SpanNodes: 2, Realized: 1, Failed: map[string]string{"node-2": "boom"}}, true
		},
		Pods:  func() ([]*corev1.Pod, error) { return objs.Pods, nil },
		Ready: func() bool { return *ready },
	}
	s := httptest.NewServer(NewHandler(src, nil, nil))
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, s *httptest.Server, path string, q url.Values, out any) int {
	t.Helper()
	resp, err := http.Get(s.URL + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return resp.StatusCode
}

func TestHandler(t *testing.T) {
	ready := true
	s := testServer(t, &ready)

	var ps Policies
	if code := get(t, s, "/v1/policies", nil, &ps); code != 200 || len(ps.Policies) == 0 {
		t.Fatalf("/v1/policies: %d %+v", code, ps)
	}
	if r := ps.Policies[0].Realization; r.Realized != 1 || r.Pending() != 0 || r.Failed["node-2"] != "boom" {
		t.Errorf("realization %+v", r)
	}

	// Same evaluation as offline explain.
	var res explain.Result
	q := url.Values{"src": {"app-ns/client"}, "dst": {"sensitive-ns/vault"}, "port": {"TCP/8443"}}
	if code := get(t, s, "/v1/explain", q, &res); code != 200 {
		t.Fatalf("/v1/explain: %d", code)
	}
	objs, _ := load.Files("../../cmd/tierctl/testdata/cluster.yaml", "../../cmd/tierctl/testdata/story1-deny/policies.yaml")
	built, _ := load.Build(objs)
	src, _ := explain.ParseEndpoint("app-ns/client")
	dst, _ := explain.ParseEndpoint("sensitive-ns/vault")
	want, err := explain.Explain(built.Snapshot, built.Inventory, explain.Query{Src: src, Dst: dst, Protocol: "TCP", Port: 8443})
	if err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(res)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("live explain %s, offline %s", gotJSON, wantJSON)
	}

	var m MatrixResult
	if code := get(t, s, "/v1/matrix", url.Values{"port": {"TCP/80"}}, &m); code != 200 || len(m.Cells) == 0 {
		t.Errorf("/v1/matrix: %d, %d cells", code, len(m.Cells))
	}

	for _, tc := range []struct {
		path string
		q    url.Values
		code int
		want string
	}{
		{"/v1/explain", url.Values{"src": {"app-ns/nope"}, "dst": {"sensitive-ns/vault"}, "port": {"TCP/80"}}, 404, "unknown pod app-ns/nope"},
		{"/v1/explain", url.Values{"src": {"kube-system/hostagent"}, "dst": {"sensitive-ns/vault"}, "port": {"TCP/80"}}, 400, "host network"},
		{"/v1/explain", url.Values{"src": {"app-ns/client"}, "dst": {"x"}, "port": {"TCP/80"}}, 400, "NS/POD"},
		{"/v1/explain", url.Values{"src": {"app-ns/client"}, "dst": {"sensitive-ns/vault"}, "port": {"TCP/0"}}, 400, "1-65535"},
		{"/v1/matrix", nil, 400, "port"},
		{"/v1/nothing", nil, 404, "no such query endpoint"},
	} {
		var e Error
		if code := get(t, s, tc.path, tc.q, &e); code != tc.code || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %v: %d %q, want %d containing %q", tc.path, tc.q, code, e.Error, tc.code, tc.want)
		}
	}

	// A controller that is not ready answers nothing rather than an empty
	// model.
	ready = false
	var e Error
	if code := get(t, s, "/v1/policies", nil, &e); code != http.StatusServiceUnavailable || !strings.Contains(e.Error, "not ready") {
		t.Errorf("not ready: %d %q", code, e.Error)
	}
}

// The /v1/nodes endpoints map the forwarding's outcomes to HTTP: the
// agent's answer unchanged, an unreachable node 502, no answer 504.
// cmd/tierctl's TestLive forwards through a real controller and agents.
func TestAgentForwarding(t *testing.T) {
	var asked []string
	src := Source{
		Snapshot: func() *model.Snapshot { return &model.Snapshot{} },
		Pods: func() ([]*corev1.Pod, error) {
			p := &corev1.Pod{}
			p.Namespace, p.Name, p.Spec.NodeName = "ns", "a", "n1"
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.1"}}
			return []*corev1.Pod{p}, nil
		},
		ConnectedNodes: func() []string { return []string{"n1", "n2"} },
		AgentQuery: func(ctx context.Context, node, path, rawQuery string) (int, []byte, error) {
			asked = append(asked, node+" "+path+"?"+rawQuery)
			switch node {
			case "n1":
				return 200, []byte(`{"node":"n1"}`), nil
			case "n2":
				<-ctx.Done()
				return 0, nil, fmt.Errorf("node n2: its agent did not answer in time: %w", ctx.Err())
			}
			return 0, nil, fmt.Errorf("node %s unreachable: no agent of that node is connected to the controller", node)
		},
	}
	s := httptest.NewServer(NewHandler(src, nil, nil))
	defer s.Close()

	var m map[string]string
	if code := get(t, s, "/v1/nodes/n1/agent/v1/flows", url.Values{"policy": {"K/ns/p"}}, &m); code != 200 || m["node"] != "n1" {
		t.Errorf("forwarded flows: %d %v", code, m)
	}
	if len(asked) != 1 || asked[0] != "n1 /v1/flows?policy=K%2Fns%2Fp" {
		t.Errorf("forwarded %q", asked)
	}
	var e Error
	if code := get(t, s, "/v1/nodes/n7/agent/v1/status", nil, &e); code != http.StatusBadGateway || !strings.Contains(e.Error, "node n7 unreachable") {
		t.Errorf("unreachable: %d %q", code, e.Error)
	}
	if code := get(t, s, "/v1/nodes/n1/agent/v1/metrics", nil, &e); code != 404 {
		t.Errorf("an endpoint the agent does not forward: %d %q, want 404", code, e.Error)
	}
	var ns Nodes
	if code := get(t, s, "/v1/nodes", nil, &ns); code != 200 || strings.Join(ns.Nodes, ",") != "n1,n2" {
		t.Errorf("/v1/nodes: %d %v", code, ns)
	}
	if get(t, s, "/v1/nodes", url.Values{"pod": {"ns/a"}}, &ns); strings.Join(ns.Nodes, ",") != "n1" {
		t.Errorf("/v1/nodes?pod=ns/a: %v", ns)
	}
	if get(t, s, "/v1/nodes", url.Values{"pod": {"ns/a"}, "ip": {"10.0.0.1"}}, &ns); strings.Join(ns.Nodes, ",") != "n1" {
		t.Errorf("/v1/nodes?pod=ns/a&ip=10.0.0.1: %v", ns)
	}
	if get(t, s, "/v1/nodes", url.Values{"pod": {"ns/a"}, "ip": {"192.0.2.9"}}, &ns); strings.Join(ns.Nodes, ",") != "n1,n2" {
		t.Errorf("an address no pod holds selects every node: %v", ns)
	}
	// No answer: 504 after the forwarding timeout.
	defer func(d time.Duration) { agentTimeout = d }(agentTimeout)
	agentTimeout = 300 * time.Millisecond
	start := time.Now()
	if code := get(t, s, "/v1/nodes/n2/agent/v1/trace", nil, &e); code != http.StatusGatewayTimeout || !strings.Contains(e.Error, "did not answer within") {
		t.Errorf("timeout: %d %q", code, e.Error)
	}
	if d := time.Since(start); d < agentTimeout {
		t.Errorf("timed out after %s, before %s", d, agentTimeout)
	}
}
