package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/wire"
)

// maxConcurrentQueries bounds the forwarded queries an agent serves at
// once (each may run ovs-ofctl or ovs-appctl); more are answered 503.
const maxConcurrentQueries = 4

// maxAnswerBody bounds an answer (the controller receives at most 64 MiB).
const maxAnswerBody = 48 << 20

// serveQuery starts serving q with the Query handler; the answer goes to
// answers. slots limits the queries served at once. It never blocks the
// stream's loop.
func (c *Client) serveQuery(ctx context.Context, q *wire.AgentQuery, slots chan struct{}, answers chan<- *wire.AgentAnswer) {
	answer := func(a *wire.AgentAnswer) {
		// answers has a slot per running query, and the overload answer
		// below is sent only when a slot is free.
		select {
		case answers <- a:
		case <-ctx.Done():
		}
	}
	select {
	case slots <- struct{}{}:
	default:
		go answer(errorAnswer(q.ID, http.StatusServiceUnavailable, "agent busy: too many forwarded queries at once; retry"))
		return
	}
	go func() {
		defer func() { <-slots }()
		answer(c.runQuery(ctx, q))
	}()
}

func (c *Client) runQuery(ctx context.Context, q *wire.AgentQuery) *wire.AgentAnswer {
	if c.cfg.Query == nil {
		return errorAnswer(q.ID, http.StatusNotImplemented, "this agent serves no forwarded queries")
	}
	if !strings.HasPrefix(q.Path, "/") {
		return errorAnswer(q.ID, http.StatusBadRequest, fmt.Sprintf("query path %q: not absolute", q.Path))
	}
	timeout := time.Duration(q.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > 5*time.Minute {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := &url.URL{Scheme: "http", Host: "agent", Path: q.Path, RawQuery: q.RawQuery}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return errorAnswer(q.ID, http.StatusBadRequest, "query: "+err.Error())
	}
	w := &answerWriter{header: http.Header{}}
	c.cfg.Query.ServeHTTP(w, req)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len() > maxAnswerBody {
		return errorAnswer(q.ID, http.StatusInsufficientStorage, fmt.Sprintf("answer of %d bytes is larger than the %d the stream carries: narrow the query", w.body.Len(), maxAnswerBody))
	}
	return &wire.AgentAnswer{ID: q.ID, Status: w.status, Body: w.body.Bytes()}
}

func errorAnswer(id uint64, status int, msg string) *wire.AgentAnswer {
	body, _ := jsonError(msg)
	return &wire.AgentAnswer{ID: id, Status: status, Body: body}
}

// answerWriter collects a handler's answer in memory.
type answerWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *answerWriter) Header() http.Header { return w.header }

func (w *answerWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *answerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// jsonError is the agent query API's error body ({"error": msg}).
func jsonError(msg string) ([]byte, error) {
	return json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
}
