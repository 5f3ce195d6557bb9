package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// run executes tierctl in-process with args and returns stdout, stderr and
// the error Execute returned.
func run(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	cmd := newRootCommand(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// scenarioCase is one entry of a testdata/*/cases.yaml file.
type scenarioCase struct {
	Name string         `json:"name"`
	Args []string       `json:"args"`
	Want map[string]any `json:"want"`
}

// TestScenarios runs every KEP-2091 user story (and the API-comment
// examples) through the command and checks the JSON it prints: each field
// of want must be present in the output with exactly that value.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*/cases.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("scenarios missing: %v %v", files, err)
	}
	for _, casesFile := range files {
		dir := filepath.Dir(casesFile)
		data, err := os.ReadFile(casesFile)
		if err != nil {
			t.Fatal(err)
		}
		var cases []scenarioCase
		if err := yaml.UnmarshalStrict(data, &cases); err != nil {
			t.Fatalf("%s: %v", casesFile, err)
		}
		for _, tc := range cases {
			t.Run(filepath.Base(dir)+"/"+tc.Name, func(t *testing.T) {
				args := append([]string{"explain", "-f", "testdata/cluster.yaml", "-f", filepath.Join(dir, "policies.yaml")}, tc.Args...)
				stdout, stderr, err := run(append(args, "-o", "json")...)
				if err != nil {
					t.Fatalf("tierctl %s: %v (stderr %s)", strings.Join(args, " "), err, stderr)
				}
				var got map[string]any
				if err := json.Unmarshal([]byte(stdout), &got); err != nil {
					t.Fatalf("output is not JSON: %v\n%s", err, stdout)
				}
				want := normalize(t, tc.Want)
				if diffs := contains(got, want, ""); len(diffs) > 0 {
					t.Errorf("tierctl %s:\n%s\noutput:\n%s", strings.Join(args, " "), strings.Join(diffs, "\n"), stdout)
				}
			})
		}
	}
}

// normalize round-trips v through JSON so numbers compare as float64.
func normalize(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// contains lists where got lacks a field of want or has another value;
// lists compare element by element (same length).
func contains(got, want any, path string) []string {
	if wl, ok := want.([]any); ok && len(wl) > 0 {
		gl, ok := got.([]any)
		if !ok || len(gl) != len(wl) {
			return []string{fmt.Sprintf("%s: got %s, want %d elements like %s", path, js(got), len(wl), js(want))}
		}
		var diffs []string
		for i := range wl {
			diffs = append(diffs, contains(gl[i], wl[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return diffs
	}
	wm, ok := want.(map[string]any)
	if !ok {
		if !reflect.DeepEqual(got, want) {
			return []string{fmt.Sprintf("%s: got %s, want %s", path, js(got), js(want))}
		}
		return nil
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: got %s, want an object", path, js(got))}
	}
	var diffs []string
	for k, wv := range wm {
		gv, present := gm[k]
		if !present {
			diffs = append(diffs, fmt.Sprintf("%s.%s: missing", path, k))
			continue
		}
		diffs = append(diffs, contains(gv, wv, path+"."+k)...)
	}
	return diffs
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestOutputFormats(t *testing.T) {
	base := []string{"explain", "-f", "testdata/cluster.yaml", "-f", "testdata/story1-deny/policies.yaml",
		"--src", "app-ns/client", "--dst", "sensitive-ns/vault", "--port", "TCP/8443"}
	stdout, _, err := run(append(base, "-o", "yaml")...)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(stdout), &got); err != nil || got["verdict"] != "Deny" {
		t.Errorf("yaml output: %v\n%s", err, stdout)
	}
	stdout, _, err = run(append(base, "-o", "table")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"VERDICT: Deny", "ingress", "AdminNetworkPolicy/cluster-wide-deny-example", "0 (select-all-deny-all)", "DefaultAllow"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("table output lacks %q:\n%s", s, stdout)
		}
	}
	// Default output is JSON.
	stdout, _, err = run(base...)
	if err != nil || !json.Valid([]byte(stdout)) {
		t.Errorf("default output is not JSON: %v\n%s", err, stdout)
	}
}

func TestMatrix(t *testing.T) {
	args := []string{"explain", "-f", "testdata/cluster.yaml", "-f", "testdata/story4-tenants/policies.yaml",
		"--matrix", "--port", "TCP/80", "--port", "udp/53"}
	stdout, stderr, err := run(append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var cells []map[string]any
	if err := json.Unmarshal([]byte(stdout), &cells); err != nil {
		t.Fatal(err)
	}
	// 8 pods take part in policy (the host-network pod does not): 8*7
	// pairs, less the 2*6 between the IPv6-only pod and the IPv4-only ones,
	// on 2 ports.
	if want := (8*7 - 2*6) * 2; len(cells) != want {
		t.Fatalf("%d cells, want %d", len(cells), want)
	}
	if !strings.Contains(stderr, "share no address family") {
		t.Errorf("no warning about the pairs left out: %q", stderr)
	}
	if !strings.Contains(stderr, "Deployment") {
		t.Errorf("no warning about the ignored Deployment: %q", stderr)
	}
	found := false
	for _, c := range cells {
		if c["src"] == "tenant-2/web" && c["dst"] == "tenant-1/db" && c["port"] == "UDP/53" {
			found = true
			if c["verdict"] != "Deny" || c["ingress"].(map[string]any)["rule"].(map[string]any)["name"] != "deny-other-tenants" {
				t.Errorf("tenant-2/web -> tenant-1/db: %s", js(c))
			}
		}
		if c["src"] == c["dst"] {
			t.Errorf("cell from a pod to itself: %s", js(c))
		}
	}
	if !found {
		t.Error("no cell tenant-2/web -> tenant-1/db UDP/53")
	}
	stdout, _, err = run(append(args, "-o", "table")...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	// Per port: a header and 8 rows; a blank line between ports.
	if len(lines) != 2*9+1 || !strings.HasPrefix(lines[0], "TCP/80") || !strings.HasPrefix(lines[10], "UDP/53") {
		t.Fatalf("table:\n%s", stdout)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "tenant-2/web") && !strings.Contains(l, "DENY") {
			t.Errorf("row without the tenant denial: %q", l)
		}
	}
}

// TestBadInput runs the built binary: bad input must exit non-zero with a
// one-line reason on stderr and nothing on stdout.
func TestBadInput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tierctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	broken := write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n")
	typo := write("typo.yaml", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: x, namespace: a}\nspec:\n  podSelektor: {}\n")
	oldVersion := write("old.yaml", "apiVersion: extensions/v1beta1\nkind: NetworkPolicy\nmetadata: {name: x}\nspec: {}\n")
	twice := write("twice.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
	c := "testdata/cluster.yaml"
	pair := []string{"--src", "app-ns/client", "--dst", "tenant-1/web"}
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown pod":        {[]string{"-f", c, "--src", "app-ns/nope", "--dst", "tenant-1/web", "--port", "TCP/80"}, "unknown pod app-ns/nope"},
		"unreadable yaml":    {append([]string{"-f", broken, "--port", "TCP/80"}, pair...), "broken.yaml"},
		"missing file":       {append([]string{"-f", filepath.Join(dir, "absent.yaml"), "--port", "TCP/80"}, pair...), "absent.yaml"},
		"port out of range":  {append([]string{"-f", c, "--port", "TCP/99999"}, pair...), "1-65535"},
		"unknown protocol":   {append([]string{"-f", c, "--port", "FOO/80"}, pair...), "FOO"},
		"port without proto": {append([]string{"-f", c, "--port", "80"}, pair...), "PROTO/PORT"},
		"missing port":       {append([]string{"-f", c}, pair...), "--port"},
		"missing file flag":  {append([]string{"--port", "TCP/80"}, pair...), "-f FILE"},
		"missing dst":        {[]string{"-f", c, "--src", "app-ns/client", "--port", "TCP/80"}, "--dst"},
		"bad endpoint":       {[]string{"-f", c, "--src", "client", "--dst", "tenant-1/web", "--port", "TCP/80"}, "NS/POD"},
		"matrix with src":    {append([]string{"-f", c, "--matrix", "--port", "TCP/80"}, pair...), "--matrix"},
		"two ports":          {append([]string{"-f", c, "--port", "TCP/80", "--port", "TCP/81"}, pair...), "one --port"},
		"bad output":         {append([]string{"-f", c, "--port", "TCP/80", "-o", "xml"}, pair...), "xml"},
		"unknown field":      {append([]string{"-f", c, "-f", typo, "--port", "TCP/80"}, pair...), "podSelektor"},
		"wrong apiVersion":   {append([]string{"-f", c, "-f", oldVersion, "--port", "TCP/80"}, pair...), "extensions/v1beta1"},
		"declared twice":     {append([]string{"-f", twice, "--port", "TCP/80"}, pair...), "declared twice"},
		"host network pod":   {[]string{"-f", c, "--src", "kube-system/hostagent", "--dst", "tenant-1/web", "--port", "TCP/80"}, "host network"},
		"no shared family":   {[]string{"-f", c, "--src", "tenant-1/web", "--dst", "app-ns/v6server", "--port", "TCP/80"}, "address family"},
		"unknown flag":       {[]string{"-f", c, "--bogus"}, "bogus"},
	}
	for name, tc := range cases {
		cmd := exec.Command(bin, append([]string{"explain"}, tc.args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			t.Errorf("%s: exit status 0; stdout %s", name, stdout.String())
			continue
		}
		msg := strings.TrimSuffix(stderr.String(), "\n")
		if strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) || stdout.Len() != 0 {
			t.Errorf("%s: want one line containing %q on stderr, nothing on stdout; got stderr %q stdout %q", name, tc.want, stderr.String(), stdout.String())
		}
	}
	// And a good call exits 0.
	out, err := exec.Command(bin, append([]string{"explain", "-f", c, "--port", "TCP/80"}, pair...)...).Output()
	if err != nil || !json.Valid(out) {
		t.Errorf("good call: %v\n%s", err, out)
	}
}
