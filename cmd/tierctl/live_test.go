package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/agent/audit"
	"github.com/tierflow/tierflow/pkg/agent/runtime"
	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/queryapi"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestLive drives every live command against real parts: a kube-apiserver,
// the tierflow-controller binary, two agents on two bridges of a private
// OVS joined by patch ports (nodes n1 and n2), pods in network namespaces.
//
// Policies: an AdminNetworkPolicy denies a -> c (egress, on n1); a
// NetworkPolicy isolates b for ingress and allows a on TCP 80 (on n2); the
// BaselineAdminNetworkPolicy denies b -> c (ingress, on n2).
func TestLive(t *testing.T) {
	c := livecluster.New(t)
	env := ovsenv.Start(t)
	br1, br2 := env.AddBridge("n1"), env.AddBridge("n2")
	u1, u2 := "tf"+env.ID+"u1", "tf"+env.ID+"u2"
	if _, err := env.Vsctl(
		"add-port", br1.Name, u1, "--", "set", "Interface", u1, "type=patch", "options:peer="+u2, `external_ids:"tierflow.io/role"=uplink`,
		"--", "add-port", br2.Name, u2, "--", "set", "Interface", u2, "type=patch", "options:peer="+u1, `external_ids:"tierflow.io/role"=uplink`); err != nil {
		t.Fatal(err)
	}
	mac := func(i byte) net.HardwareAddr { return net.HardwareAddr{0x0a, 0x58, 0, 0, 0, i} }
	pfx := func(i int) netip.Prefix { return netip.MustParsePrefix(fmt.Sprintf("10.0.0.%d/16", i)) }
	a := br1.AddPod("a", mac(1), pfx(1))
	b := br2.AddPod("b", mac(2), pfx(2))
	cc := br2.AddPod("c", mac(3), pfx(3))
	srv := b.ListenTCP(80)
	t.Cleanup(srv.Close)

	tok1, tok2 := c.AddNode(t, "n1"), c.AddNode(t, "n2")
	c.AddPod(t, a, "n1", map[string]string{"app": "a"})
	c.AddPod(t, b, "n2", map[string]string{"app": "b"})
	c.AddPod(t, cc, "n2", map[string]string{"app": "c"})
	createPolicies(t, c)

	// Created early: RBAC takes a moment to see new bindings.
	kubeconfig, _ := c.QueryUser(t, "viewer", true)
	grantServiceView(t, c, "viewer")
	nobody, _ := c.QueryUser(t, "nobody", false)
	c.StartController(t)
	// The agents run the Service proxy (its own watches, with the agent's
	// RBAC), for the "services" subtest.
	agentKubeconfig := c.Kube.ServiceAccountKubeconfig(t, livecluster.AgentNamespace, livecluster.AgentSA, "tierflow-agent", c.Dir)
	withProxy := func(o runtime.Options) runtime.Options {
		o.Config.ServiceProxy.Enabled = true
		o.Config.Kubeconfig = agentKubeconfig
		return o
	}
	ag1 := livecluster.StartAgent(t, "n1", withProxy(c.AgentOptions(env, br1, "n1", tok1, 1)))
	ag2 := livecluster.StartAgent(t, "n2", withProxy(c.AgentOptions(env, br2, "n2", tok2, 2)))
	const anpRef, npRef, banpRef = "AdminNetworkPolicy/a-not-to-c", "NetworkPolicy/default/b-web", "BaselineAdminNetworkPolicy/default"
	ag1.RealizedOn(t, anpRef)
	ag2.RealizedOn(t, npRef, banpRef)

	ctl := []string{"--kubeconfig", kubeconfig, "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile}
	agents := []string{"--agent-socket", "n1=" + ag1.Opts.QuerySocket, "--agent-socket", "n2=" + ag2.Opts.QuerySocket,
		"--ovs-rundir", env.Dir, "--vswitchd-ctl", filepath.Join(env.Dir, "ovs-vswitchd.ctl")}
	// remote reaches the agents through the controller (no sockets, no
	// local OVS tools): the controller forwards over the agents' streams.
	remote := ctl
	tierctl := func(args ...string) (string, error) {
		t.Helper()
		stdout, _, err := run(args...)
		return stdout, err
	}
	mustTierctl := func(args ...string) string {
		t.Helper()
		out, err := tierctl(args...)
		if err != nil {
			t.Fatalf("tierctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	t.Run("get", func(t *testing.T) {
		// Realization reaches the controller shortly after the agents.
		var ps []queryapi.PolicyStatus
		livecluster.Eventually(t, 30*time.Second, "policies realized on their span", func() error {
			ps = nil
			out, err := tierctl(append([]string{"get", "policies", "-o", "json"}, ctl...)...)
			if err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(out), &ps); err != nil {
				return err
			}
			for _, p := range ps {
				if p.Realization.Realized != len(p.Span) || len(p.Span) != 1 {
					return fmt.Errorf("%s realized on %d of %v", p.Source, p.Realization.Realized, p.Span)
				}
			}
			if len(ps) != 3 {
				return fmt.Errorf("%d policies, want 3", len(ps))
			}
			return nil
		})
		want := map[string]string{anpRef: "Admin/10/n1", npRef: "NetworkPolicy/0/n2", banpRef: "Baseline/0/n2"}
		for _, p := range ps {
			if got := fmt.Sprintf("%s/%d/%s", p.Tier, p.Priority, strings.Join(p.Span, ",")); got != want[p.Source.String()] {
				t.Errorf("%s: tier/priority/span %s, want %s", p.Source, got, want[p.Source.String()])
			}
			if len(p.Rules) != 1 {
				t.Errorf("%s: %d rules, want 1", p.Source, len(p.Rules))
			}
		}
		table := mustTierctl(append([]string{"get", "policies"}, ctl...)...)
		for _, w := range []string{"POLICY", anpRef, "Admin", "n1", "1/1"} {
			if !strings.Contains(table, w) {
				t.Errorf("get policies table lacks %q:\n%s", w, table)
			}
		}
		onlyN1 := mustTierctl(append([]string{"get", "policies", "--node", "n1"}, ctl...)...)
		if !strings.Contains(onlyN1, anpRef) || strings.Contains(onlyN1, npRef) || strings.Contains(onlyN1, banpRef) {
			t.Errorf("get policies --node n1:\n%s", onlyN1)
		}
		inDefault := mustTierctl(append([]string{"get", "policies", "-n", "default", "-o", "yaml"}, ctl...)...)
		if !strings.Contains(inDefault, "name: b-web") || strings.Contains(inDefault, "a-not-to-c") {
			t.Errorf("get policies -n default:\n%s", inDefault)
		}
		var atgs []map[string]any
		if err := json.Unmarshal([]byte(mustTierctl(append([]string{"get", "appliedtogroups", "--node", "n2", "-o", "json"}, ctl...)...)), &atgs); err != nil {
			t.Fatal(err)
		}
		if len(atgs) != 2 { // b's (NP) and c's (BANP)
			t.Errorf("appliedtogroups on n2: %d, want 2: %v", len(atgs), atgs)
		}
		ags := mustTierctl(append([]string{"get", "addressgroups"}, ctl...)...)
		for _, w := range []string{"default/a", "default/b", "default/c"} {
			if !strings.Contains(ags, w) {
				t.Errorf("get addressgroups lacks member %s:\n%s", w, ags)
			}
		}
	})

	// The offline form of the same cluster, for the output contract.
	manifests := writeManifests(t, c)
	pods := []string{"default/a", "default/b", "default/c"}
	ports := []string{"TCP/80", "TCP/8080"}
	verdicts := map[string]explain.Verdict{}

	t.Run("explain", func(t *testing.T) {
		for _, src := range pods {
			for _, dst := range pods {
				if src == dst {
					continue
				}
				for _, port := range ports {
					q := []string{"explain", "--src", src, "--dst", dst, "--port", port, "-o", "json"}
					live := mustTierctl(append(q, ctl...)...)
					offline := mustTierctl(append(q, "-f", manifests)...)
					if live != offline {
						t.Errorf("%s -> %s %s: live and offline explain differ:\nlive    %s\noffline %s", src, dst, port, live, offline)
					}
					var res explain.Result
					if err := json.Unmarshal([]byte(live), &res); err != nil {
						t.Fatal(err)
					}
					verdicts[src+">"+dst+">"+port] = res.Verdict
				}
			}
		}
		want := map[string]explain.Verdict{
			"default/a>default/b>TCP/80": explain.VerdictAllow, "default/a>default/b>TCP/8080": explain.VerdictDeny,
			"default/a>default/c>TCP/80": explain.VerdictDeny, "default/b>default/c>TCP/80": explain.VerdictDeny,
			"default/c>default/a>TCP/80": explain.VerdictAllow, "default/c>default/b>TCP/80": explain.VerdictDeny,
			"default/b>default/a>TCP/8080": explain.VerdictAllow,
		}
		for k, v := range want {
			if verdicts[k] != v {
				t.Errorf("explain %s: %s, want %s", k, verdicts[k], v)
			}
		}
		// A bare pod name is in the kubeconfig context's namespace.
		short := mustTierctl(append([]string{"explain", "--src", "a", "--dst", "c", "--port", "TCP/80"}, ctl...)...)
		if !strings.Contains(short, `"name": "a-not-to-c"`) {
			t.Errorf("explain a -> c:\n%s", short)
		}
		liveM := mustTierctl(append([]string{"explain", "--matrix", "--port", "TCP/80", "--port", "TCP/8080"}, ctl...)...)
		offM := mustTierctl("explain", "--matrix", "--port", "TCP/80", "--port", "TCP/8080", "-f", manifests)
		if liveM != offM {
			t.Errorf("live and offline matrix differ:\nlive    %s\noffline %s", liveM, offM)
		}
	})

	t.Run("flows", func(t *testing.T) {
		var fl agentquery.Flows
		out := mustTierctl(append([]string{"flows", "--node", "n1", "--policy", anpRef, "--rule", "deny-c", "-o", "json"}, agents...)...)
		if err := json.Unmarshal([]byte(out), &fl); err != nil {
			t.Fatal(err)
		}
		actions := 0
		for _, f := range fl.Flows {
			if f.Role == "action" {
				actions++
				if f.Table != "EgressAdmin" || f.Rule == nil || f.Rule.Name != "deny-c" || f.Rule.Action != "Deny" {
					t.Errorf("deny-c action flow: %+v", f)
				}
			}
		}
		if actions == 0 {
			t.Errorf("no action flow for deny-c:\n%s", out)
		}
		// Real packets show in the counters of the NetworkPolicy's rule.
		var err error
		for i := 0; i < 5; i++ {
			if err = a.ProbeTCP(netip.AddrPortFrom(b.IPv4(), 80), 2*time.Second); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("a -> b:80: %v", err)
		}
		livecluster.Eventually(t, 20*time.Second, "b-web counters", func() error {
			var fl agentquery.Flows
			out := mustTierctl(append([]string{"flows", "--node", "n2", "--policy", npRef, "--rule", "0", "-o", "json"}, agents...)...)
			if err := json.Unmarshal([]byte(out), &fl); err != nil {
				return err
			}
			for _, f := range fl.Flows {
				if f.Role == "action" && f.Packets > 0 && f.Table == "IngressNetworkPolicy" {
					return nil
				}
			}
			return fmt.Errorf("no IngressNetworkPolicy action flow of b-web counted a packet:\n%s", out)
		})
		table := mustTierctl(append([]string{"flows", "--node", "n2", "--table", "IngressBaseline"}, agents...)...)
		// On the node (one agent socket), --node defaults to its agent's.
		named := withoutCounters(t, mustTierctl(append([]string{"flows", "--node", "n2", "--table", "IngressBaseline", "-o", "json"}, agents...)...))
		if onNode := withoutCounters(t, mustTierctl("flows", "--table", "IngressBaseline", "-o", "json", "--agent-socket", ag2.Opts.QuerySocket)); onNode != named {
			t.Errorf("flows --table IngressBaseline on n2 without --node:\n%s\nwith --node n2:\n%s", onNode, named)
		}
		if !strings.Contains(table, banpRef+" ingress[0]") || !strings.Contains(table, "PACKETS") {
			t.Errorf("flows --table IngressBaseline:\n%s", table)
		}
		podFlows := mustTierctl(append([]string{"flows", "--node", "n1", "--pod", "default/a", "-o", "json"}, agents...)...)
		if !strings.Contains(podFlows, "SpoofGuard") {
			t.Errorf("flows --pod default/a lacks its SpoofGuard flows:\n%s", podFlows)
		}
		// Through the controller: the same flows (counters aside: they move
		// with any packet between the two calls).
		for _, q := range [][]string{
			{"flows", "--node", "n1", "--policy", anpRef, "--rule", "deny-c", "-o", "json"},
			{"flows", "--node", "n2", "--policy", npRef, "--rule", "0", "-o", "json"},
			{"flows", "--node", "n2", "--table", "IngressBaseline", "-o", "json"},
			{"flows", "--node", "n1", "--pod", "default/a", "-o", "json"},
		} {
			local := withoutCounters(t, mustTierctl(append(q, agents...)...))
			viaCtl := withoutCounters(t, mustTierctl(append(q, remote...)...))
			if local != viaCtl {
				t.Errorf("tierctl %s: local and through the controller differ:\nlocal %s\nremote %s", strings.Join(q, " "), local, viaCtl)
			}
		}
		for _, node := range []string{"n1", "n2"} {
			q := []string{"flows", "--node", node, "--check", "-o", "json"}
			if local, viaCtl := mustTierctl(append(append(q, agents...), ctl...)...), mustTierctl(append(q, remote...)...); local != viaCtl {
				t.Errorf("check %s: local and through the controller differ:\nlocal %s\nremote %s", node, local, viaCtl)
			}
			out := mustTierctl(append(append([]string{"flows", "--node", node, "--check", "-o", "json"}, agents...), ctl...)...)
			var rep audit.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.FlowsInstalled == 0 || rep.FlowsInstalled != rep.FlowsInBridge {
				t.Errorf("check %s: %s", node, out)
			}
			for _, p := range rep.Policies {
				for _, r := range p.Rules {
					if r.Status != "ok" {
						t.Errorf("check %s: %s rule %d: %s", node, p.Policy, r.Index, r.Status)
					}
				}
			}
		}
	})

	t.Run("trace agrees with explain", func(t *testing.T) {
		for _, src := range pods {
			for _, dst := range pods {
				if src == dst {
					continue
				}
				for _, port := range ports {
					q := []string{"trace", "--src", src, "--dst", dst, "--port", port, "-o", "json"}
					out := mustTierctl(append(q, agents...)...)
					if viaCtl := mustTierctl(append(q, remote...)...); normalizeTrace(viaCtl) != normalizeTrace(out) {
						t.Errorf("trace %s -> %s %s: local and through the controller differ:\nlocal %s\nremote %s", src, dst, port, out, viaCtl)
					}
					var tr TraceResult
					if err := json.Unmarshal([]byte(out), &tr); err != nil {
						t.Fatal(err)
					}
					if want := verdicts[src+">"+dst+">"+port]; tr.Verdict != string(want) {
						t.Errorf("trace %s -> %s %s: %s, explain says %s\n%s", src, dst, port, tr.Verdict, want, out)
					}
				}
			}
		}
		out := mustTierctl(append([]string{"trace", "--src", "default/a", "--dst", "default/c", "--port", "TCP/80"}, agents...)...)
		for _, w := range []string{"VERDICT: Deny", "EgressAdmin", anpRef + " egress[0] (deny-c)"} {
			if !strings.Contains(out, w) {
				t.Errorf("trace a -> c lacks %q:\n%s", w, out)
			}
		}
		// An address that is no pod: policy allows it (explain: NotAPod
		// ingress, default egress); the test bed has nowhere to send it.
		out = mustTierctl(append([]string{"trace", "--src", "default/a", "--dst", "10.0.9.9", "--port", "TCP/80", "-o", "json"}, agents...)...)
		if viaCtl := mustTierctl(append([]string{"trace", "--src", "default/a", "--dst", "10.0.9.9", "--port", "TCP/80", "-o", "json"}, remote...)...); normalizeTrace(viaCtl) != normalizeTrace(out) {
			t.Errorf("trace a -> 10.0.9.9: local and through the controller differ:\nlocal %s\nremote %s", out, viaCtl)
		}
		var ext TraceResult
		if err := json.Unmarshal([]byte(out), &ext); err != nil {
			t.Fatal(err)
		}
		if ext.Verdict == "Deny" || ext.Verdict == "Unknown" {
			t.Errorf("trace a -> 10.0.9.9: %s, want Allow or Dropped outside the policy tables\n%s", ext.Verdict, out)
		}
		if ex := mustTierctl(append([]string{"explain", "--src", "default/a", "--dst", "10.0.9.9", "--port", "TCP/80"}, ctl...)...); !strings.Contains(ex, `"verdict": "Allow"`) {
			t.Errorf("explain a -> 10.0.9.9:\n%s", ex)
		}
		out = mustTierctl(append([]string{"trace", "--src", "default/b", "--dst", "default/c", "--port", "TCP/80", "-o", "json"}, agents...)...)
		if !strings.Contains(out, banpRef+" ingress[0]") {
			t.Errorf("trace b -> c does not name the baseline rule:\n%s", out)
		}
	})

	t.Run("services", func(t *testing.T) {
		web := createWebService(t, c, b)
		// A real connection through the ClusterIP, decided on b: a may
		// reach b on 80, c may not (b-web).
		livecluster.Eventually(t, 30*time.Second, "a reaches b through the ClusterIP", func() error {
			conn, err := a.DialTCP(netip.AddrPortFrom(web, 80), time.Second)
			if err != nil {
				return err
			}
			conn.Close()
			return nil
		})
		if conn, err := cc.DialTCP(netip.AddrPortFrom(web, 80), time.Second); err == nil {
			conn.Close()
			t.Errorf("c reached b through the ClusterIP; b-web allows only a")
		}

		withServices := writeManifests(t, c)
		cases := []struct {
			src, dst string
			want     explain.Verdict
		}{
			{"default/a", "service/default/web", explain.VerdictAllow},
			{"default/a", web.String(), explain.VerdictAllow},
			{"default/c", "service/default/web", explain.VerdictDeny},
		}
		for _, tc := range cases {
			q := []string{"explain", "--src", tc.src, "--dst", tc.dst, "--port", "TCP/80", "-o", "json"}
			live := mustTierctl(append(q, ctl...)...)
			if offline := mustTierctl(append(q, "-f", withServices)...); live != offline {
				t.Errorf("explain %s -> %s: live and offline differ:\nlive    %s\noffline %s", tc.src, tc.dst, live, offline)
			}
			var res explain.ServiceResult
			if err := json.Unmarshal([]byte(live), &res); err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.want || res.Service != "default/web" || len(res.Endpoints) != 1 ||
				res.Endpoints[0].Endpoint != netip.AddrPortFrom(b.IPv4(), 80).String() || res.Endpoints[0].Pod != "default/b" || res.Endpoints[0].Node != "n2" {
				t.Errorf("explain %s -> %s: want %s through default/web to default/b on n2:\n%s", tc.src, tc.dst, tc.want, live)
			}

			// trace reads the Services through the kubeconfig.
			q[0] = "trace"
			out := mustTierctl(append(append(q, agents...), "--kubeconfig", kubeconfig)...)
			if viaCtl := mustTierctl(append(q, remote...)...); normalizeTrace(viaCtl) != normalizeTrace(out) {
				t.Errorf("trace %s -> %s: local and through the controller differ:\nlocal %s\nremote %s", tc.src, tc.dst, out, viaCtl)
			}
			var tr ServiceTrace
			if err := json.Unmarshal([]byte(out), &tr); err != nil {
				t.Fatal(err)
			}
			if tr.Verdict != string(tc.want) || tr.FrontendTrace == nil || len(tr.Endpoints) != 1 || tr.Endpoints[0].Trace == nil ||
				tr.Endpoints[0].Trace.Verdict != string(tc.want) {
				t.Errorf("trace %s -> %s: want %s, the frontend traced and one endpoint:\n%s", tc.src, tc.dst, tc.want, out)
			}
		}

		// a's connection learned its affinity: a flow of the bridge's own,
		// which the audit counts apart (not extra).
		out := mustTierctl(append(append([]string{"flows", "--node", "n1", "--check", "-o", "json"}, agents...), ctl...)...)
		var rep audit.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if !rep.OK || rep.LearnedFlows == 0 {
			t.Errorf("check of n1 with the Service proxy: want OK with learned affinity flows:\n%s", out)
		}
	})

	t.Run("errors", func(t *testing.T) {
		cases := map[string]struct {
			args []string
			want string
		}{
			"unknown pod":          {append([]string{"explain", "--src", "default/nope", "--dst", "default/a", "--port", "TCP/80"}, ctl...), "unknown pod default/nope"},
			"forbidden":            {[]string{"get", "policies", "--kubeconfig", nobody, "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile}, "may not get"},
			"bad token":            {[]string{"get", "policies", "--token", "garbage", "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile}, "unauthenticated"},
			"no controller":        {[]string{"get", "policies", "--kubeconfig", kubeconfig}, "no controller address"},
			"controller down":      {[]string{"get", "policies", "--kubeconfig", kubeconfig, "--controller", "127.0.0.1:1", "--controller-ca-file", c.CAFile}, "unreachable"},
			"untrusted controller": {[]string{"get", "policies", "--kubeconfig", kubeconfig, "--controller", c.QueryAddress}, "certificate"},
			"node unreachable":     {append([]string{"flows", "--node", "n9", "--table", "IngressAdmin"}, agents...), "node n9 unreachable"},
			"policy not found":     {append([]string{"flows", "--node", "n1", "--policy", "NetworkPolicy/default/nope"}, agents...), "policy NetworkPolicy/default/nope not found"},
			"rule not found":       {append([]string{"flows", "--node", "n1", "--policy", anpRef, "--rule", "nope"}, agents...), "rule nope not found"},
			"unknown table":        {append([]string{"flows", "--node", "n1", "--table", "Nope"}, agents...), "unknown table"},
			"trace unknown pod":    {append([]string{"trace", "--src", "default/nope", "--dst", "default/a", "--port", "TCP/80"}, agents...), "unknown pod default/nope"},
			"node unreachable through the controller":  {append([]string{"flows", "--node", "n9", "--table", "IngressAdmin"}, remote...), "node n9 unreachable"},
			"trace unknown pod through the controller": {append([]string{"trace", "--src", "default/nope", "--dst", "default/a", "--port", "TCP/80"}, remote...), "unknown pod default/nope"},
			"flows forbidden through the controller":   {[]string{"flows", "--node", "n1", "--table", "IngressAdmin", "--kubeconfig", nobody, "--controller", c.QueryAddress, "--controller-ca-file", c.CAFile}, "may not get"},
			"bad get":                                  {append([]string{"get", "pods"}, ctl...), "unknown object type"},
		}
		for name, tc := range cases {
			out, err := tierctl(tc.args...)
			if err == nil {
				t.Errorf("%s: no error; output %s", name, out)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) {
				t.Errorf("%s: error %q, want one line containing %q", name, msg, tc.want)
			}
		}
	})

	t.Run("check finds a missing flow", func(t *testing.T) {
		rules, err := ag1.Q.Rules(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cookie := ""
		for _, r := range rules.Rules {
			if r.Policy.String() == anpRef {
				cookie = r.Cookie
			}
		}
		if cookie == "" {
			t.Fatalf("no rule of %s in %+v", anpRef, rules)
		}
		if _, err := env.Ofctl("del-flows", br1.Name, "cookie="+cookie+"/-1"); err != nil {
			t.Fatal(err)
		}
		out, err := tierctl(append(append([]string{"flows", "--node", "n1", "--check", "-o", "json"}, agents...), ctl...)...)
		if err == nil || !strings.Contains(err.Error(), "problem") {
			t.Fatalf("check after deleting a flow: %v\n%s", err, out)
		}
		var rep audit.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.OK || len(rep.MissingFlows) == 0 || !strings.Contains(rep.MissingFlows[0].Rule, "deny-c") {
			t.Errorf("check report: %s", out)
		}
		viaCtl, err := tierctl(append([]string{"flows", "--node", "n1", "--check", "-o", "json"}, remote...)...)
		if err == nil || viaCtl != out {
			t.Errorf("check through the controller after deleting a flow: %v\nlocal %s\nremote %s", err, out, viaCtl)
		}
		found := false
		for _, p := range rep.Policies {
			if p.Policy == anpRef && p.Status == "rulesMissing" && len(p.Rules) == 1 && p.Rules[0].Status == "missing" {
				found = true
			}
		}
		if !found {
			t.Errorf("check does not report deny-c missing: %s", out)
		}
	})
}

// recircID matches the recirculation IDs in ofproto/trace output:
// ovs-vswitchd allocates them per trace, so two traces of the same packet
// may name different ones.
var recircID = regexp.MustCompile(`(recirc\(|recirc_id[=(])0x[0-9a-f]+`)

// normalizeTrace is a trace answer with its recirculation IDs blanked.
func normalizeTrace(out string) string { return recircID.ReplaceAllString(out, "${1}0xN") }

// withoutCounters is a flows JSON answer with its packet and byte counters
// zeroed.
func withoutCounters(t *testing.T, out string) string {
	t.Helper()
	var fl agentquery.Flows
	if err := json.Unmarshal([]byte(out), &fl); err != nil {
		t.Fatalf("flows answer: %v\n%s", err, out)
	}
	for i := range fl.Flows {
		fl.Flows[i].Packets, fl.Flows[i].Bytes = 0, 0
	}
	b, err := json.Marshal(fl)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func createPolicies(t *testing.T, c *livecluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	sel := func(app string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	anp := &anpv1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "a-not-to-c"},
		Spec: anpv1.AdminNetworkPolicySpec{
			Priority: 10,
			Subject:  anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: sel("a")}},
			Egress: []anpv1.AdminNetworkPolicyEgressRule{{Name: "deny-c", Action: anpv1.AdminNetworkPolicyRuleActionDeny,
				To: []anpv1.AdminNetworkPolicyEgressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: sel("c")}}}}},
		},
	}
	if _, err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	banp := &anpv1.BaselineAdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: anpv1.BaselineAdminNetworkPolicySpec{
			Subject: anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: sel("c")}},
			Ingress: []anpv1.BaselineAdminNetworkPolicyIngressRule{{Name: "deny-from-b", Action: anpv1.BaselineAdminNetworkPolicyRuleActionDeny,
				From: []anpv1.AdminNetworkPolicyIngressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: sel("b")}}}}},
		},
	}
	if _, err := c.Kube.Policy.PolicyV1alpha1().BaselineAdminNetworkPolicies().Create(ctx, banp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tcp := corev1.ProtocolTCP
	port80 := intstr.FromInt32(80)
	aSel := sel("a")
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "b-web", Namespace: ovsenv.PodNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel("b"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &aSel}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port80}},
			}},
		},
	}
	if _, err := c.Kube.Kube.NetworkingV1().NetworkPolicies(ovsenv.PodNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantServiceView lets service account default/NAME read what tierctl
// reads itself for a Service destination: Services, EndpointSlices, Nodes
// and the source pod (cmd/tierctl/README.md).
func grantServiceView(t *testing.T, c *livecluster.Cluster, name string) {
	t.Helper()
	ctx := context.Background()
	role := "tierctl-services-" + name
	if _, err := c.Kube.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "nodes", "pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createWebService creates the Service default/web (TCP 80, session
// affinity ClientIP) in front of pod b and its EndpointSlice (the test's
// API server runs no EndpointSlice controller), and returns its ClusterIP.
func createWebService(t *testing.T, c *livecluster.Cluster, b *ovsenv.Pod) netip.Addr {
	t.Helper()
	ctx := context.Background()
	svc, err := c.Kube.Kube.CoreV1().Services(ovsenv.PodNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "b"}, SessionAffinity: corev1.ServiceAffinityClientIP,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name, tcp, port, ready, node := "http", corev1.ProtocolTCP, int32(80), true, "n2"
	if _, err := c.Kube.Kube.DiscoveryV1().EndpointSlices(ovsenv.PodNamespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &tcp, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{b.IPv4().String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName: &node, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ovsenv.PodNamespace, Name: "b"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return netip.MustParseAddr(svc.Spec.ClusterIP)
}

// writeManifests reads the cluster's objects back from the API server and
// writes them as one multi-document YAML file, as offline explain takes.
func writeManifests(t *testing.T, c *livecluster.Cluster) string {
	t.Helper()
	ctx := context.Background()
	var docs []string
	emit := func(v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	kube, pol := c.Kube.Kube, c.Kube.Policy
	nss, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range nss.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "v1", "Namespace", nil
		emit(x)
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range nodes.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "v1", "Node", nil
		emit(x)
	}
	pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range pods.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "v1", "Pod", nil
		emit(x)
	}
	nps, err := kube.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range nps.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "networking.k8s.io/v1", "NetworkPolicy", nil
		emit(x)
	}
	anps, err := pol.PolicyV1alpha1().AdminNetworkPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range anps.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "policy.networking.k8s.io/v1alpha1", "AdminNetworkPolicy", nil
		emit(x)
	}
	banps, err := pol.PolicyV1alpha1().BaselineAdminNetworkPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range banps.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "policy.networking.k8s.io/v1alpha1", "BaselineAdminNetworkPolicy", nil
		emit(x)
	}
	svcs, err := kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range svcs.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "v1", "Service", nil
		emit(x)
	}
	slices, err := kube.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range slices.Items {
		x.APIVersion, x.Kind, x.ManagedFields = "discovery.k8s.io/v1", "EndpointSlice", nil
		emit(x)
	}
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
