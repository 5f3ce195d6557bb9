package openflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"

	of13 "github.com/contiv/libOpenflow/openflow13"
	"github.com/contiv/libOpenflow/util"
)

// GroupAction sends the packet to an OpenFlow group (group:ID).
type GroupAction struct{ ID uint32 }

func (GroupAction) isAction() {}

// Group is an OpenFlow select group: each packet runs the actions of one
// bucket, chosen by a hash of its headers and the buckets' weights (OVS's
// default selection method). tierflow's Services are select groups whose
// buckets are their endpoints.
type Group struct {
	ID      uint32
	Buckets []Bucket
}

// Bucket is one choice of a select group.
type Bucket struct {
	Weight  uint16
	Actions []Action
}

// GroupCommand is what a GroupChange does.
type GroupCommand uint8

const (
	// GroupAddOrModify creates the group or replaces its buckets (OVS's
	// add-or-modify extension): idempotent, so a replay or a restarted
	// agent need not know what the switch holds.
	GroupAddOrModify GroupCommand = iota + 1
	// GroupDelete removes the group, and with it every flow that sends
	// packets to it.
	GroupDelete
)

// ofpgcAddOrMod is OVS's OFPGC11_ADD_OR_MOD group command.
const ofpgcAddOrMod = 0x8000

// GroupChange is one group change of a bundle.
type GroupChange struct {
	Command GroupCommand
	Group   Group
}

// maxGroupID is OFPG_MAX, the highest group number a group may have.
const maxGroupID = of13.OFPG_MAX

// Validate checks the group's ID and buckets.
func (g *Group) Validate() error {
	_, err := g.groupMod(GroupAddOrModify, 0)
	return err
}

// groupMod encodes the change. Buckets are checked like flow actions
// against an empty match; GotoTable is not allowed in a bucket.
func (g *Group) groupMod(cmd GroupCommand, xid uint32) (*of13.GroupMod, error) {
	if g.ID == 0 || g.ID > maxGroupID {
		return nil, fmt.Errorf("group ID %d out of range 1-%d", g.ID, uint32(maxGroupID))
	}
	gm := of13.NewGroupMod()
	gm.Xid = xid
	gm.GroupId = g.ID
	gm.Type = of13.OFPGT_SELECT
	switch cmd {
	case GroupDelete:
		gm.Command = of13.OFPGC_DELETE
		return gm, nil
	case GroupAddOrModify:
		gm.Command = ofpgcAddOrMod
	default:
		return nil, fmt.Errorf("unknown group command %d", cmd)
	}
	for i, bk := range g.Buckets {
		if bk.Weight == 0 {
			return nil, fmt.Errorf("group %d bucket %d: weight 0 (a select bucket needs a weight)", g.ID, i)
		}
		f := Flow{Table: 0, Actions: bk.Actions}
		for _, a := range bk.Actions {
			switch a.(type) {
			case GotoTable, Conjunction, CT, Learn, SetField, Move:
				// Without a match context OVS cannot check these, and
				// goto_table is not an action.
				return nil, fmt.Errorf("group %d bucket %d: %T is not allowed in a bucket", g.ID, i, a)
			}
		}
		acts, err := f.encodeActions()
		if err != nil {
			return nil, fmt.Errorf("group %d bucket %d: %w", g.ID, i, err)
		}
		b := of13.NewBucket()
		b.Weight = bk.Weight
		for _, a := range acts {
			b.AddAction(a)
		}
		gm.AddBucket(*b)
	}
	return gm, nil
}

// String renders the group as ovs-ofctl add-group reads it.
func (g Group) String() string {
	b := []byte("group_id=")
	b = strconv.AppendUint(b, uint64(g.ID), 10)
	b = append(b, ",type=select"...)
	for _, bk := range g.Buckets {
		b = append(b, ",bucket=weight:"...)
		b = strconv.AppendUint(b, uint64(bk.Weight), 10)
		b = append(b, ",actions="...)
		b = AppendActions(b, bk.Actions)
	}
	return string(b)
}

// GroupError is a group change the switch (or local validation) rejected.
type GroupError struct {
	Index   int
	Command GroupCommand
	Group   Group
	Err     error
}

func (e *GroupError) Error() string {
	return fmt.Sprintf("group change #%d (group %d): %v", e.Index, e.Group.ID, e.Err)
}

func (e *GroupError) Unwrap() error { return e.Err }

// Changes is one atomic change of a bridge's groups and flows.
type Changes struct {
	// Groups are applied in order; within the bundle every group that is
	// added or modified comes before the flow changes (so flows may send
	// to it) and every deleted group after them (a deleted group takes
	// the flows sending to it along).
	Groups []GroupChange
	Flows  []FlowChange
}

// ApplyChanges applies groups and flows atomically, in one bundle: group
// additions and modifications, then the flow changes, then group
// deletions.
func (c *Client) ApplyChanges(ctx context.Context, ch Changes) error {
	if len(ch.Groups) == 0 {
		return c.Apply(ctx, ch.Flows)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	// The bundle's order: group adds and modifies, the flows, group
	// deletes. item i is a group (index into ch.Groups) or a flow.
	type item struct {
		group bool
		index int
	}
	items := make([]item, 0, len(ch.Groups)+len(ch.Flows))
	for i, gc := range ch.Groups {
		if gc.Command != GroupDelete {
			items = append(items, item{true, i})
		}
	}
	for i := range ch.Flows {
		items = append(items, item{false, i})
	}
	for i, gc := range ch.Groups {
		if gc.Command == GroupDelete {
			items = append(items, item{true, i})
		}
	}
	cn, err := c.current(ctx)
	if err != nil {
		return err
	}
	return cn.bundle(ctx, len(items), func(i int, xid uint32) (util.Message, error) {
		it := items[i]
		if it.group {
			gc := ch.Groups[it.index]
			gm, err := gc.Group.groupMod(gc.Command, xid)
			if err != nil {
				return nil, err
			}
			return gm, nil
		}
		fm, err := changeMod(ch.Flows[it.index], xid)
		if err != nil {
			return nil, err
		}
		return fm, nil
	}, func(i int, err error) error {
		it := items[i]
		if it.group {
			gc := ch.Groups[it.index]
			return &GroupError{Index: it.index, Command: gc.Command, Group: gc.Group, Err: err}
		}
		fc := ch.Flows[it.index]
		return &FlowError{Index: it.index, Command: fc.Command, Flow: fc.Flow, Err: err}
	})
}

// GroupIDs lists the IDs of the bridge's groups (group description
// multipart), sorted.
func (c *Client) GroupIDs(ctx context.Context) ([]uint32, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	err = cn.multipart(ctx, of13.MultipartType_GroupDesc, nil, func(body []byte) error {
		for len(body) > 0 {
			// ofp_group_desc: length(2) type(1) pad(1) group_id(4) buckets
			if len(body) < 8 {
				return errors.New("group desc: truncated entry")
			}
			l := int(binary.BigEndian.Uint16(body[0:2]))
			if l < 8 || l > len(body) {
				return fmt.Errorf("group desc: bad entry length %d", l)
			}
			ids = append(ids, binary.BigEndian.Uint32(body[4:8]))
			body = body[l:]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("group description: %w", err)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}
