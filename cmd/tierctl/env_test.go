package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpNeverShowsEnvironmentValues: flags defaulting to an environment
// variable must not print its value as their default in --help (the
// token is a secret), yet the value is used when the flag is not given,
// and the flag wins over it.
func TestHelpNeverShowsEnvironmentValues(t *testing.T) {
	secrets := map[string]string{}
	for _, d := range envDefaults {
		v := "value-of-" + strings.ToLower(d.env) + "-4f1c9e"
		t.Setenv(d.env, v)
		secrets[d.env] = v
	}
	for _, args := range helpInvocations() {
		stdout, stderr, err := run(args...)
		if err != nil {
			t.Fatalf("tierctl %s: %v", strings.Join(args, " "), err)
		}
		if !strings.Contains(stdout+stderr, "--token") {
			t.Fatalf("tierctl %s printed no flags:\n%s", strings.Join(args, " "), stdout)
		}
		for env, v := range secrets {
			if strings.Contains(stdout+stderr, v) {
				t.Errorf("tierctl %s shows $%s's value:\n%s", strings.Join(args, " "), env, stdout+stderr)
			}
		}
	}

	// The environment still supplies the values, and a flag overrides it.
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, `{"error":"no"}`, http.StatusForbidden)
	}))
	defer srv.Close()
	t.Setenv("TIERCTL_CONTROLLER", srv.Listener.Addr().String())
	t.Setenv("TIERCTL_CONTROLLER_CA_FILE", "")
	t.Setenv("TIERCTL_CONTROLLER_SERVER_NAME", "")
	t.Setenv("TIERCTL_TOKEN", "token-from-env")
	if _, _, err := run("get", "policies", "--insecure-skip-tls-verify"); err == nil {
		t.Fatal("want the server's refusal")
	} else if strings.Contains(err.Error(), "token-from-env") {
		t.Fatalf("error shows the token: %v", err)
	}
	if _, _, err := run("get", "policies", "--insecure-skip-tls-verify", "--token", "token-from-flag"); err == nil {
		t.Fatal("want the server's refusal")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "Bearer token-from-env" || got[1] != "Bearer token-from-flag" {
		t.Fatalf("tokens sent %q, want the environment's then the flag's", got)
	}
}

// helpInvocations is every way to ask for help: --help on the root and on
// every command of the tree (walked, so that a new command is covered
// too, cobra's own included), and `help COMMAND`.
func helpInvocations() [][]string {
	out := [][]string{{"--help"}, {"help"}}
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		for _, sub := range c.Commands() {
			p := append(append([]string(nil), path...), sub.Name())
			out = append(out, append(append([]string(nil), p...), "--help"), append([]string{"help"}, p...))
			walk(p, sub)
		}
	}
	root := newRootCommand(io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	walk(nil, root)
	return out
}
