package server

import (
	"math"
	"net/netip"
	"slices"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// Node pods (model.NodePods): an agent admits a pod's port only when its
// node's pods list the pod with the port's UID and addresses. The list
// must therefore never reach an agent ahead of the group changes that
// make the pod a member with those addresses, on its own node (the
// applied-to groups: its policies as a subject) and everywhere (the
// address groups: its policies as a peer).
//
// A round reads the objects that changed before it started (takeDirty),
// but reads them later, when the engine may have moved on: a node's pods
// read then may list a pod whose memberships changed after the round
// started, in groups this round does not send. So each entry carries the
// engine generation at which it took its value, and a round keeps only
// the entries whose generation it has seen the changes of (roundClock:
// the highest generation of the changes taken); a newer entry waits for
// the round that takes its changes — its node's pods are among them, so
// that round sends them again. A round reading the whole snapshot keeps
// every entry: a snapshot is consistent.

// allSeen is the clock of a snapshot round.
const allSeen = math.MaxInt64

// nodePodsSeenAt is np without the entries newer than clock (np itself
// when none is; nil stays nil), in its wire form.
func nodePodsSeenAt(np *model.NodePods, clock int64) *model.NodePods {
	if np == nil {
		return nil
	}
	keep := np.Pods
	if slices.ContainsFunc(np.Pods, func(p model.NodePod) bool { return p.Generation > clock }) {
		keep = slices.DeleteFunc(slices.Clone(np.Pods), func(p model.NodePod) bool { return p.Generation > clock })
	}
	c := wire.NodePodsForNode(np)
	c.Pods = keep
	return c
}

// sameNodePods reports whether an agent holding a holds b.
func sameNodePods(a, b *model.NodePods) bool {
	var pa, pb []model.NodePod
	if a != nil {
		pa = a.Pods
	}
	if b != nil {
		pb = b.Pods
	}
	return slices.EqualFunc(pa, pb, func(x, y model.NodePod) bool {
		return x.Pod == y.Pod && x.UID == y.UID && x.Generation == y.Generation && slices.Equal(x.IPs, y.IPs)
	})
}

// readNodePods fills r.nodePods: every node's pods from the snapshot of
// an all-round (consistent with its groups: nothing to leave out), else
// those of the dirty nodes. Called without s.mu.
func (s *Server) readNodePods(r *round, dirty map[objKey]struct{}, snap *model.Snapshot, clock int64) {
	if snap != nil {
		for node, np := range snap.NodePods {
			r.nodePods[node] = nodePodsSeenAt(np, allSeen)
		}
		return
	}
	for k := range dirty {
		if k.kind == compute.KindNodePods {
			r.nodePods[k.id] = nodePodsSeenAt(get(s.src.NodePods, k.id), clock)
		}
	}
}

// applyNodePods makes the round's node pods the distributed ones; an
// all-round also forgets nodes the snapshot has no pods for. Called with
// s.mu held.
func (s *Server) applyNodePods(r *round, all bool) {
	if all {
		for node := range s.nodePods {
			if _, ok := r.nodePods[node]; !ok {
				r.nodePods[node] = nil
			}
		}
	}
	for node, np := range r.nodePods {
		if np == nil || len(np.Pods) == 0 {
			delete(s.nodePods, node)
		} else {
			s.nodePods[node] = np
		}
	}
}

// queueNodePods puts the session's node's pods in u when the round
// changed them. Called with s.mu held.
func (s *Server) queueNodePods(ss *session, r *round, u *wire.Update) {
	np, changed := r.nodePods[ss.node]
	if !changed || sameNodePods(ss.pods, np) {
		return
	}
	if np == nil {
		np = &model.NodePods{Meta: model.Meta{ID: ss.node}}
	}
	ss.pods = np
	u.NodePods = np
}

// fullNodePods is what a full update carries. Called with s.mu held.
func (s *Server) fullNodePods(ss *session) *model.NodePods {
	ss.pods = s.nodePods[ss.node]
	return ss.pods
}

// nodePodsReport hands what an agent reported attached to its bridge to
// the OnNodePods sink: only well-formed entries (a pod name and UID; the
// sink checks they are the node's pods).
func (s *Server) nodePodsReport(node string, rep *wire.PodsReport) {
	if s.opts.OnNodePods == nil {
		return
	}
	pods := make([]model.NodePod, 0, len(rep.Pods))
	for _, p := range rep.Pods {
		if p.Pod.Namespace == "" || p.Pod.Name == "" || p.UID == "" {
			continue
		}
		p.IPs = slices.DeleteFunc(slices.Clone(p.IPs), func(ip netip.Addr) bool { return !ip.IsValid() })
		p.Generation = 0
		pods = append(pods, p)
	}
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	s.opts.OnNodePods(node, pods)
}
