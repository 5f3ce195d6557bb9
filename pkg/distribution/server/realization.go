package server

import (
	"maps"
	"slices"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// Summary is a policy's realization across its span: what a status writer
// turns into a condition such as "realized on 3/4 nodes".
type Summary struct {
	PolicyID string
	Source   model.PolicyRef
	// Generation is the policy's current model generation; only results
	// for it count. SourceGeneration is the API object's
	// metadata.generation it was computed from (for observedGeneration).
	Generation       int64
	SourceGeneration int64
	// SpanNodes is how many nodes need the policy; Realized how many of
	// them reported the current generation realized; Failed the span nodes
	// that reported an error for it. The rest are pending.
	SpanNodes int
	Realized  int
	Failed    map[string]string
	// Deleted: the policy is gone; this is its last summary.
	Deleted bool
}

// Pending is the number of span nodes that have reported neither success
// nor failure for the current generation.
func (s Summary) Pending() int { return s.SpanNodes - s.Realized - len(s.Failed) }

func (s Summary) equal(o Summary) bool {
	return s.PolicyID == o.PolicyID && s.Source == o.Source && s.Generation == o.Generation &&
		s.SourceGeneration == o.SourceGeneration && s.SpanNodes == o.SpanNodes &&
		s.Realized == o.Realized && s.Deleted == o.Deleted && maps.Equal(s.Failed, o.Failed)
}

// realization keeps the agents' latest results per policy and node.
// Guarded by Server.mu.
type realization struct {
	results map[string]map[string]wire.PolicyResult // policy → node → result
	last    map[string]Summary
}

func newRealization() *realization {
	return &realization{results: map[string]map[string]wire.PolicyResult{}, last: map[string]Summary{}}
}

func (r *realization) report(node string, rep *wire.Report, policies map[string]*model.Policy) []Summary {
	touched := map[string]bool{}
	listed := map[string]bool{}
	for _, res := range rep.Results {
		listed[res.PolicyID] = true
		touched[res.PolicyID] = true
		byNode := r.results[res.PolicyID]
		if byNode == nil {
			byNode = map[string]wire.PolicyResult{}
			r.results[res.PolicyID] = byNode
		}
		byNode[node] = res
	}
	if rep.Complete {
		for id, byNode := range r.results {
			if _, ok := byNode[node]; ok && !listed[id] {
				delete(byNode, node)
				touched[id] = true
			}
		}
	}
	var out []Summary
	for _, id := range sortedKeys(touched) {
		if p := policies[id]; p != nil {
			out = r.refresh(p, out)
		}
	}
	return out
}

// policiesChanged recomputes the summaries of changed policies (nil:
// deleted).
func (r *realization) policiesChanged(changed map[string]*model.Policy, policies map[string]*model.Policy) []Summary {
	var out []Summary
	for _, id := range sortedKeys(changed) {
		if changed[id] == nil {
			delete(r.results, id)
			if last, ok := r.last[id]; ok {
				delete(r.last, id)
				last.Deleted = true
				out = append(out, last)
			}
			continue
		}
		out = r.refresh(policies[id], out)
	}
	return out
}

func (r *realization) refresh(p *model.Policy, out []Summary) []Summary {
	s := r.summarize(p)
	if last, ok := r.last[p.ID]; ok && last.equal(s) {
		return out
	}
	r.last[p.ID] = s
	return append(out, s)
}

func (r *realization) summarize(p *model.Policy) Summary {
	s := Summary{
		PolicyID: p.ID, Source: p.Source, Generation: p.Generation,
		SourceGeneration: p.SourceGeneration, SpanNodes: len(p.Span),
	}
	for node, res := range r.results[p.ID] {
		// Span is sorted: a policy every node holds has thousands.
		if _, in := slices.BinarySearch(p.Span, node); res.Generation != p.Generation || !in {
			continue
		}
		if res.Error == "" {
			s.Realized++
		} else {
			if s.Failed == nil {
				s.Failed = map[string]string{}
			}
			s.Failed[node] = res.Error
		}
	}
	return s
}

// Summary returns a policy's current realization summary.
func (s *Server) Summary(policyID string) (Summary, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.policies[policyID]
	if p == nil {
		return Summary{}, false
	}
	return s.real.summarize(p), true
}

// SummaryByRef returns the realization summary of the policy computed
// from an API object (matched by kind, namespace and name; the UID is
// ignored).
func (s *Server) SummaryByRef(ref model.PolicyRef) (Summary, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.policies[s.byRef[refKey(ref)]]
	if p == nil {
		return Summary{}, false
	}
	return s.real.summarize(p), true
}

func (s *Server) emitReports(node string, results []wire.PolicyResult) {
	if s.opts.OnReport == nil || len(results) == 0 {
		return
	}
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	for _, r := range results {
		s.opts.OnReport(node, r.PolicyID, r.Generation, r.Error)
	}
}

func (s *Server) emitSummaries(sums []Summary) {
	if s.opts.OnSummary == nil || len(sums) == 0 {
		return
	}
	s.sinkMu.Lock()
	defer s.sinkMu.Unlock()
	for _, sum := range sums {
		s.opts.OnSummary(sum)
	}
}
