package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/explain/load"
	"github.com/tierflow/tierflow/pkg/services"
)

const explainLong = `Explain which policy rule decides a new connection, offline from manifests
(-f) or live, against the controller's computed model and pod inventory
(--controller, without -f; pod names without a namespace are in -n's). Both
modes print the same output.

FILE is multi-document YAML (or a List, as "kubectl get -o yaml" writes it)
holding Namespaces, Pods (spec.nodeName, status.podIPs, container ports),
Nodes, NetworkPolicies (networking.k8s.io/v1), AdminNetworkPolicies and
BaselineAdminNetworkPolicies (policy.networking.k8s.io/v1alpha1) and
ClusterNetworkPolicies (policy.networking.k8s.io/v1alpha2), Services (v1) and
EndpointSlices (discovery.k8s.io/v1). Objects of other kinds are ignored
(with a warning). Objects without a namespace are in
"default"; namespaces used but not declared exist with only the label
kubernetes.io/metadata.name, which every namespace gets.

Egress is evaluated for the source pod, ingress for the destination pod, each
through the Admin, NetworkPolicy and Baseline tiers; the verdict is Allow iff
both directions allow. An IP that belongs to a pod is that pod; any other IP
has no policies of its own.

A destination that is a Service — service/NS/NAME with its port in --port, or
an address and port that are a Service's frontend (ClusterIP, externalIP,
LoadBalancer IP, a node address with a NodePort) — is explained as the
Service proxy carries it: every endpoint the proxy of the source pod's node
may choose, each connection evaluated on the endpoint's address and port
(policy decides on the pod behind the Service). Output: verdict (Allow: every
endpoint allows; Deny: none; Mixed; Reject: no usable endpoint, the
connection is refused; Drop: internalTrafficPolicy Local without an endpoint
on the client's node), service, port, frontend and endpoints [{endpoint, pod,
node, result}]. Live, tierctl reads Services, EndpointSlices, Nodes and the
source pod through the kubeconfig and asks the controller about each
endpoint.

Output (json, yaml): verdict (Allow|Deny), srcIP, dstIP, and for egress and
ingress: tier, policy {kind, namespace, name} or null, rule {index, name} or
null, action (Allow|Deny), reason, passedThrough (policies whose Pass rule was
taken), isolatedBy (NetworkPolicies isolating the pod, when it is isolated).
When no rule decides:
  isolation drop:   tier NetworkPolicy, policy null, action Deny,  reason Isolation
  default allow:    tier Baseline,      policy null, action Allow, reason DefaultAllow
                    (also after a Baseline Pass, listed in passedThrough)
  end is not a pod: tier None,          policy null, action Allow, reason NotAPod
  pod to itself:    tier None,          policy null, action Allow, reason Loopback
                    (the packet never leaves the pod: no policy sees it)
--matrix prints every ordered pair of distinct pods on every --port, each
object with src, dst (NS/POD) and port (PROTO/PORT) added; its table form is a
grid per port, rows sources, columns destinations.

Exit status 0 with a decision, 1 with a one-line reason on bad input.`

type explainOptions struct {
	live   *liveOptions
	files  []string
	src    string
	dst    string
	ports  []string
	matrix bool
	output string
}

func newExplainCommand(live *liveOptions) *cobra.Command {
	o := &explainOptions{live: live}
	cmd := &cobra.Command{
		Use:   "explain [-f FILE | --controller HOST:PORT] --src NS/POD|IP --dst NS/POD|IP --port PROTO/PORT | [-f FILE] --matrix --port PROTO/PORT...",
		Short: "Explain which policy rule decides a connection",
		Long:  explainLong,
		Example: `  tierctl explain -f cluster.yaml --src prod/web --dst prod/db --port TCP/5432
  tierctl explain -f pods.yaml -f policies.yaml --src prod/web --dst 8.8.8.8 --port udp/53 -o table
  tierctl explain -f cluster.yaml --matrix --port TCP/80 --port UDP/53 -o table
  tierctl explain --controller 127.0.0.1:10352 --controller-ca-file ca.crt --src prod/web --dst prod/db --port TCP/5432`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "manifest file (multi-document YAML or a List); repeatable; - for stdin")
	f.StringVar(&o.src, "src", "", "source: NS/POD or an IP address")
	f.StringVar(&o.dst, "dst", "", "destination: NS/POD, an IP address, or service/NS/NAME")
	f.StringArrayVar(&o.ports, "port", nil, "destination PROTO/PORT, PROTO one of TCP, UDP, SCTP (any case); repeatable with --matrix")
	f.BoolVar(&o.matrix, "matrix", false, "explain every ordered pair of distinct pods")
	f.StringVarP(&o.output, "output", "o", "json", "output format: json, yaml or table")
	return cmd
}

func (o *explainOptions) validate() error {
	if len(o.files) == 0 && (o.live == nil || o.live.controller == "") {
		return errors.New("explain: -f FILE (offline) or --controller HOST:PORT (live) is required")
	}
	switch o.output {
	case "json", "yaml", "table":
	default:
		return fmt.Errorf("explain: unknown output format %q (want json, yaml or table)", o.output)
	}
	if len(o.ports) == 0 {
		return errors.New("explain: --port PROTO/PORT is required")
	}
	if o.matrix {
		if o.src != "" || o.dst != "" {
			return errors.New("explain: --matrix takes no --src or --dst")
		}
		return nil
	}
	if o.src == "" || o.dst == "" {
		return errors.New("explain: --src and --dst are required (or --matrix)")
	}
	if len(o.ports) > 1 {
		return errors.New("explain: one --port per connection (several only with --matrix)")
	}
	return nil
}

func (o *explainOptions) run(stdout, stderr io.Writer) (runErr error) {
	if err := o.validate(); err != nil {
		return err
	}
	var ports []explain.PortSpec
	for _, s := range o.ports {
		p, err := explain.ParsePortSpec(s)
		if err != nil {
			return err
		}
		ports = append(ports, p)
	}
	if len(o.files) == 0 {
		return o.runLive(stdout, stderr, ports)
	}
	var src, dst explain.Endpoint
	if !o.matrix {
		var err error
		if src, err = explain.ParseEndpoint(o.src); err != nil {
			return fmt.Errorf("--src: %w", err)
		}
		if dst, err = explain.ParseEndpoint(o.dst); err != nil {
			return fmt.Errorf("--dst: %w", err)
		}
	}

	objs, err := load.Files(o.files...)
	if err != nil {
		return err
	}
	built, err := load.Build(objs)
	if err != nil {
		return err
	}
	// Warnings go out only with a decision, so that a failure is one line.
	defer func() {
		if runErr == nil {
			warn(stderr, objs, built)
		}
	}()
	ev, err := explain.NewEvaluator(built.Snapshot, built.Inventory)
	if err != nil {
		return err
	}

	if o.matrix {
		cells, skipped, err := ev.Matrix(ports)
		if err != nil {
			return err
		}
		if len(skipped) > 0 {
			fmt.Fprintf(stderr, "warning: left out of the matrix: %s\n", summarize(skipped))
		}
		if cells == nil {
			cells = []explain.Cell{}
		}
		if o.output == "table" {
			return writeMatrixTable(stdout, ports, cells)
		}
		return write(stdout, o.output, cells)
	}
	for _, ep := range []explain.Endpoint{src, dst} {
		if ep.Pod != nil && built.Excluded[*ep.Pod] != "" {
			return fmt.Errorf("pod %s takes no part in network policy: %s", ep.Pod, built.Excluded[*ep.Pod])
		}
	}
	q := explain.Query{Src: src, Dst: dst, Protocol: ports[0].Protocol, Port: ports[0].Port}
	if t, ok, err := serviceTarget(o.dst, ports[0], built.ServicePorts, built.NodeAddrs); err != nil {
		return err
	} else if ok {
		sres, err := ev.ExplainService(q, t)
		if err != nil {
			return err
		}
		if o.output == "table" {
			return writeServiceTable(stdout, sres, src.String(), ports[0])
		}
		return write(stdout, o.output, sres)
	}
	res, err := ev.Explain(q)
	if err != nil {
		return err
	}
	if o.output == "table" {
		return writeTable(stdout, res, ports[0])
	}
	return write(stdout, o.output, res)
}

// warn reports, on stderr, what the manifests hold that explain does not
// evaluate as written.
func warn(stderr io.Writer, objs *load.Objects, built *load.Built) {
	if n := len(objs.Ignored); n > 0 {
		fmt.Fprintf(stderr, "warning: ignored %d object(s) of kinds explain does not read: %s\n", n, summarize(objs.Ignored))
	}
	for _, w := range built.ServiceWarnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for _, c := range built.Conditions {
		fmt.Fprintf(stderr, "warning: %s\n", c)
	}
}

func summarize(xs []string) string {
	if len(xs) > 5 {
		return strings.Join(xs[:5], ", ") + fmt.Sprintf(", and %d more", len(xs)-5)
	}
	return strings.Join(xs, ", ")
}

func write(w io.Writer, format string, v any) error {
	var out []byte
	var err error
	if format == "yaml" {
		out, err = yaml.Marshal(v)
	} else {
		out, err = json.MarshalIndent(v, "", "  ")
		out = append(out, '\n')
	}
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

func writeTable(w io.Writer, r *explain.Result, port explain.PortSpec) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "VERDICT: %s\t(%s -> %s %s)\n\n", r.Verdict, r.SrcIP, r.DstIP, port)
	fmt.Fprintln(tw, "DIRECTION\tTIER\tPOLICY\tRULE\tACTION\tREASON\tPASSED THROUGH\tISOLATED BY")
	for _, d := range []struct {
		name string
		d    explain.Decision
	}{{"egress", r.Egress}, {"ingress", r.Ingress}} {
		policy, rule := "-", "-"
		if d.d.Policy != nil {
			policy = d.d.Policy.String()
		}
		if d.d.Rule != nil {
			rule = fmt.Sprint(d.d.Rule.Index)
			if d.d.Rule.Name != "" {
				rule += " (" + d.d.Rule.Name + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.name, d.d.Tier, policy, rule, d.d.Action, d.d.Reason,
			ids(d.d.PassedThrough), ids(d.d.IsolatedBy))
	}
	return tw.Flush()
}

func ids(xs []explain.PolicyID) string {
	if len(xs) == 0 {
		return "-"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// writeMatrixTable prints one grid per port: a row per source, a column per
// destination, "allow" or "DENY" in each cell and "-" where source and
// destination are the same pod.
func writeMatrixTable(w io.Writer, ports []explain.PortSpec, cells []explain.Cell) error {
	verdict := map[[3]string]explain.Verdict{}
	names := map[string]bool{}
	for _, c := range cells {
		verdict[[3]string{c.Port, c.Src, c.Dst}] = c.Verdict
		names[c.Src] = true
	}
	pods := make([]string, 0, len(names))
	for n := range names {
		pods = append(pods, n)
	}
	sort.Strings(pods)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, port := range ports {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "%s\t%s\n", port, strings.Join(pods, "\t"))
		for _, s := range pods {
			row := []string{s}
			for _, d := range pods {
				v, ok := verdict[[3]string{port.String(), s, d}]
				switch {
				case !ok:
					row = append(row, "-")
				case v == explain.VerdictAllow:
					row = append(row, "allow")
				default:
					row = append(row, "DENY")
				}
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	return tw.Flush()
}

// runLive asks the controller, which runs the same evaluation over its own
// snapshot and pods.
func (o *explainOptions) runLive(stdout, stderr io.Writer, ports []explain.PortSpec) error {
	c, err := o.live.controllerClient()
	if err != nil {
		return err
	}
	ctx, cancel := o.live.ctx()
	defer cancel()
	if o.matrix {
		var ps []string
		for _, p := range ports {
			ps = append(ps, p.String())
		}
		m, err := c.Matrix(ctx, ps)
		if err != nil {
			return err
		}
		if len(m.Skipped) > 0 {
			fmt.Fprintf(stderr, "warning: left out of the matrix: %s\n", summarize(m.Skipped))
		}
		if o.output == "table" {
			return writeMatrixTable(stdout, ports, m.Cells)
		}
		return write(stdout, o.output, m.Cells)
	}
	src, dst := o.live.endpoint(o.src), o.live.endpoint(o.dst)
	for flag, ep := range map[string]string{"--src": src, "--dst": dst} {
		if _, err := explain.ParseEndpoint(ep); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	if maybeService(dst) {
		// Services are resolved here, from the API server, as the agents'
		// proxy reads them; the controller explains each endpoint.
		cs, err := o.live.readServices(ctx)
		switch {
		case err != nil && strings.HasPrefix(dst, "service/"):
			return err
		case err != nil:
			fmt.Fprintf(stderr, "warning: cannot read Services (%v): %s is explained as an address\n", err, dst)
		default:
			t, ok, err := serviceTarget(dst, ports[0], cs.ports, cs.nodeAddrs)
			if err != nil {
				return err
			}
			if ok {
				node, v6, err := cs.client(ctx, src)
				if err != nil {
					return err
				}
				sres, err := explain.ServiceDecisions(t, node, v6, func(ep services.Endpoint) (*explain.Result, error) {
					return c.ExplainEndpoint(ctx, src, ep.IP.String(), fmt.Sprintf("%s/%d", ports[0].Protocol, ep.Port))
				})
				if err != nil {
					return err
				}
				if o.output == "table" {
					return writeServiceTable(stdout, sres, src, ports[0])
				}
				return write(stdout, o.output, sres)
			}
		}
	}
	res, err := c.Explain(ctx, src, dst, ports[0].String())
	if err != nil {
		return err
	}
	if o.output == "table" {
		return writeTable(stdout, res, ports[0])
	}
	return write(stdout, o.output, res)
}
