package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/queryapi"
)

const getLong = `List what the controller computed: policies (tier, priority, rules, span,
realization as "realized on N of M span nodes"), AppliedToGroups and
AddressGroups.

Without -n every namespace is listed; with -n only NetworkPolicies of that
namespace (cluster-scoped policies have none) and groups with a member pod
in it. --node keeps the objects whose span holds the node (and, for
AppliedToGroups, that node's members).`

type getOptions struct {
	live   *liveOptions
	node   string
	output string
}

func newGetCommand(live *liveOptions) *cobra.Command {
	o := &getOptions{live: live}
	cmd := &cobra.Command{
		Use:       "get policies|appliedtogroups|addressgroups [-n NS] [--node NODE] [-o table|json|yaml]",
		Short:     "List the controller's internal policy objects",
		Long:      getLong,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"policies", "appliedtogroups", "addressgroups"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	cmd.Flags().StringVar(&o.node, "node", "", "only objects whose span holds NODE")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func (o *getOptions) run(cmd *cobra.Command, what string) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	nsSet := cmd.Flags().Changed("namespace") || cmd.InheritedFlags().Changed("namespace")
	ns := o.live.namespace
	c, err := o.live.controllerClient()
	if err != nil {
		return err
	}
	ctx, cancel := o.live.ctx()
	defer cancel()
	w := cmd.OutOrStdout()
	switch what {
	case "policies", "policy", "pol":
		ps, err := c.Policies(ctx)
		if err != nil {
			return err
		}
		out := []queryapi.PolicyStatus{}
		for _, p := range ps.Policies {
			if nsSet && p.Source.Namespace != ns {
				continue
			}
			if o.node != "" && !slices.Contains(p.Span, o.node) {
				continue
			}
			out = append(out, p)
		}
		if o.output == "table" {
			return writePolicies(w, out)
		}
		return write(w, o.output, out)
	case "appliedtogroups", "appliedtogroup", "atg":
		snap, err := c.Snapshot(ctx)
		if err != nil {
			return err
		}
		out := []*model.AppliedToGroup{}
		for _, g := range snap.AppliedToGroups {
			if o.node != "" {
				if !slices.Contains(g.Span, o.node) {
					continue
				}
				cp := *g
				cp.MembersByNode = model.MembersByNode{{Node: o.node, Members: g.MembersByNode.Get(o.node)}}
				g = &cp
			}
			var members []model.GroupMember
			for _, e := range g.MembersByNode {
				members = append(members, e.Members...)
			}
			if nsSet && !hasNamespace(members, ns) {
				continue
			}
			out = append(out, g)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		if o.output == "table" {
			return writeGroups(w, len(out), func(i int) (model.Meta, string, []model.GroupMember) {
				var members []model.GroupMember
				for _, e := range out[i].MembersByNode { // sorted by node
					members = append(members, e.Members...)
				}
				return out[i].Meta, out[i].Selector, members
			})
		}
		return write(w, o.output, out)
	case "addressgroups", "addressgroup", "ag":
		snap, err := c.Snapshot(ctx)
		if err != nil {
			return err
		}
		out := []*model.AddressGroup{}
		for _, g := range snap.AddressGroups {
			if o.node != "" && !slices.Contains(g.Span, o.node) {
				continue
			}
			if nsSet && !hasNamespace(g.Members, ns) {
				continue
			}
			out = append(out, g)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		if o.output == "table" {
			return writeGroups(w, len(out), func(i int) (model.Meta, string, []model.GroupMember) {
				return out[i].Meta, out[i].Selector, out[i].Members
			})
		}
		return write(w, o.output, out)
	}
	return fmt.Errorf("get: unknown object type %q (want policies, appliedtogroups or addressgroups)", what)
}

func checkOutput(f string) error {
	switch f {
	case "json", "yaml", "table":
		return nil
	}
	return fmt.Errorf("unknown output format %q (want table, json or yaml)", f)
}

func hasNamespace(members []model.GroupMember, ns string) bool {
	for _, m := range members {
		if m.Pod != nil && m.Pod.Namespace == ns {
			return true
		}
	}
	return false
}

func spanText(span []string) string {
	if len(span) == 0 {
		return "<none>"
	}
	return strings.Join(span, ",")
}

func writePolicies(w io.Writer, ps []queryapi.PolicyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tTIER\tPRIORITY\tRULES\tSPAN\tREALIZED\tCONDITIONS")
	for _, p := range ps {
		var in, out int
		for _, r := range p.Rules {
			if r.Direction == model.DirectionIn {
				in++
			} else {
				out++
			}
		}
		real := fmt.Sprintf("%d/%d", p.Realization.Realized, p.Realization.SpanNodes)
		if n := len(p.Realization.Failed); n > 0 {
			real += fmt.Sprintf(" (%d failed)", n)
		}
		conds := "-"
		if len(p.Conditions) > 0 {
			var cs []string
			for _, c := range p.Conditions {
				cs = append(cs, c.Reason)
			}
			conds = strings.Join(cs, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\tin:%d out:%d\t%s\t%s\t%s\n", p.Source, p.Tier, p.Priority, in, out, spanText(p.Span), real, conds)
	}
	return tw.Flush()
}

func writeGroups(w io.Writer, n int, row func(int) (model.Meta, string, []model.GroupMember)) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSELECTOR\tSPAN\tMEMBERS")
	for i := 0; i < n; i++ {
		meta, sel, members := row(i)
		var names []string
		for _, m := range members {
			switch {
			case m.Pod != nil:
				names = append(names, m.Pod.String())
			default:
				names = append(names, "node:"+m.Node)
			}
		}
		sort.Strings(names)
		text := "<none>"
		if len(names) > 0 {
			text = summarize(names)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", meta.ID, sel, spanText(meta.Span), text)
	}
	return tw.Flush()
}
