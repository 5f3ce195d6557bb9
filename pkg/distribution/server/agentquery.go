package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// ErrNodeUnreachable: the node's agent has no stream open to this
// controller (unknown node, agent down, or connected to another replica).
// AgentQuery's errors match it with errors.Is.
var ErrNodeUnreachable = errors.New("node unreachable")

type unreachableError struct{ msg string }

func (e unreachableError) Error() string        { return e.msg }
func (e unreachableError) Is(target error) bool { return target == ErrNodeUnreachable }

func unreachable(format string, args ...any) error {
	return unreachableError{fmt.Sprintf(format, args...)}
}

// DefaultAgentQueryTimeout bounds an agent query whose context has no
// deadline.
const DefaultAgentQueryTimeout = 30 * time.Second

// maxQueuedQueries bounds the queries waiting to be sent to one agent: a
// flood of tierctl calls must not grow the controller's memory.
const maxQueuedQueries = 64

// pendingQuery is a forwarded query waiting for its answer.
type pendingQuery struct {
	node   string
	answer chan *wire.AgentAnswer
	// gone is closed when the connection the query was sent on (or
	// waited for) ends.
	gone <-chan struct{}
}

// AgentQuery forwards a request of the agent query API (path such as
// /v1/flows, rawQuery its URL-encoded parameters) to node's agent over its
// distribution stream and returns the agent's HTTP status and body. It
// fails with ErrNodeUnreachable when the node has no open stream or the
// stream ends before the answer, and with context.DeadlineExceeded when
// the agent does not answer in time (ctx's deadline, or
// DefaultAgentQueryTimeout).
func (s *Server) AgentQuery(ctx context.Context, node, path, rawQuery string) (int, []byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultAgentQueryTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	s.mu.Lock()
	ss := s.sessions[node]
	if ss == nil || ss.conn == 0 {
		s.mu.Unlock()
		return 0, nil, unreachable("node %s unreachable: no agent of that node is connected to the controller", node)
	}
	s.querySeq++
	q := &wire.AgentQuery{ID: s.querySeq, Path: path, RawQuery: rawQuery,
		TimeoutMillis: max(1, time.Until(deadline).Milliseconds())}
	p := &pendingQuery{node: node, answer: make(chan *wire.AgentAnswer, 1), gone: ss.connGone}
	select {
	case ss.queries <- q:
	default:
		s.mu.Unlock()
		return 0, nil, fmt.Errorf("node %s: too many queries waiting for its agent; retry", node)
	}
	s.pendingQueries[q.ID] = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pendingQueries, q.ID)
		s.mu.Unlock()
	}()

	select {
	case a := <-p.answer:
		return a.Status, a.Body, nil
	case <-p.gone:
		return 0, nil, unreachable("node %s unreachable: its agent disconnected before answering", node)
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("node %s: its agent did not answer in time: %w", node, ctx.Err())
	}
}

// deliverAnswer hands an agent's answer to the query waiting for it. An
// answer from another node than the one asked, or for a query no longer
// waiting, is dropped: an agent can only answer its own queries.
func (s *Server) deliverAnswer(node string, a *wire.AgentAnswer) {
	s.mu.Lock()
	p := s.pendingQueries[a.ID]
	s.mu.Unlock()
	if p == nil || p.node != node {
		return
	}
	select {
	case p.answer <- a:
	default:
	}
}
