package queryapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
	src, _ := ParseEndpoint("app-ns/client")
	dst, _ := ParseEndpoint("sensitive-ns/vault")
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
