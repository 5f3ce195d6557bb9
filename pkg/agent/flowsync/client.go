package flowsync

import (
	"context"

	"github.com/tierflow/tierflow/pkg/ovs/openflow"
)

// Client installs flows through the agent's OpenFlow connection
// (pkg/ovs/openflow): a bundle becomes one atomic OpenFlow bundle.
type Client struct{ C *openflow.Client }

// Apply implements Installer.
func (c Client) Apply(ctx context.Context, b Bundle) error {
	if b.Empty() {
		return nil
	}
	changes := make([]openflow.FlowChange, 0, len(b.Add)+len(b.Modify)+len(b.Delete)+len(b.DeleteCookies))
	for _, f := range b.Add {
		changes = append(changes, openflow.FlowChange{Command: openflow.Add, Flow: f})
	}
	for _, f := range b.Modify {
		changes = append(changes, openflow.FlowChange{Command: openflow.ModifyStrict, Flow: f})
	}
	for _, f := range b.Delete {
		changes = append(changes, openflow.FlowChange{Command: openflow.DeleteStrict, Flow: f})
	}
	for _, cm := range b.DeleteCookies {
		changes = append(changes, openflow.FlowChange{Command: openflow.Delete, Flow: openflow.Flow{Cookie: cm.Value}, CookieMask: cm.Mask, AllTables: true})
	}
	return c.C.ApplyChanges(ctx, openflow.Changes{Groups: b.Groups, Flows: changes})
}

// GroupIDs implements GroupLister.
func (c Client) GroupIDs(ctx context.Context) ([]uint32, error) { return c.C.GroupIDs(ctx) }

// Stats implements Installer.
func (c Client) Stats(ctx context.Context) ([]FlowStat, error) {
	st, err := c.C.FlowStats(ctx, openflow.FlowStatsFilter{})
	if err != nil {
		return nil, err
	}
	out := make([]FlowStat, len(st))
	for i, s := range st {
		out[i] = FlowStat{Table: s.Table, Priority: s.Priority, Cookie: s.Cookie, Packets: s.Packets, Bytes: s.Bytes}
	}
	return out, nil
}
