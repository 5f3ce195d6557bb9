package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tierflow/tierflow/pkg/agent/nodatapath"
	"github.com/tierflow/tierflow/pkg/distribution/client"
	"github.com/tierflow/tierflow/pkg/distribution/disttest"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/pkg/model"
)

// halfThenWhole is a controller that sends a chunked full update: on the
// first stream all pieces but the last, then the stream fails; on the
// next stream all of them.
type halfThenWhole struct {
	chunks  []*wire.Chunk
	streams atomic.Int32
}

func (h *halfThenWhole) Sync(stream wire.ServerStream) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	if m.Hello == nil || !m.Hello.Chunks {
		return errors.New("the agent did not say it takes chunks")
	}
	n := len(h.chunks)
	if h.streams.Add(1) == 1 {
		n--
	}
	for _, c := range h.chunks[:n] {
		if err := stream.Send(&wire.ServerMessage{Chunk: c}); err != nil {
			return err
		}
	}
	if n < len(h.chunks) {
		time.Sleep(200 * time.Millisecond) // let the agent take what it got
		return errors.New("connection lost")
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// TestPartialChunkedUpdateNeverApplied: an agent whose stream ends in the
// middle of a chunked update applies none of it; it applies the update
// when a later stream brings all of it.
func TestPartialChunkedUpdateNeverApplied(t *testing.T) {
	u := &wire.Update{Epoch: "e1", Version: 1, Full: true}
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		u.Policies = append(u.Policies, &model.Policy{Meta: model.Meta{ID: id, Generation: 1}, Tier: model.TierNetworkPolicy})
	}
	data, _, err := wire.EncodeUpdate(u, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := &halfThenWhole{chunks: wire.Chunks(1, data, 40)}
	if len(srv.chunks) < 4 {
		t.Fatalf("only %d chunks", len(srv.chunks))
	}
	serverTLS, clientTLS := disttest.TLS(t)
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)))
	g.RegisterService(&wire.ServiceDesc, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	a, err := nodatapath.Start(context.Background(), client.Config{
		Address: lis.Addr().String(), TLS: clientTLS, Node: "n1",
		Token:      func() (string, error) { return "t", nil },
		MinBackoff: 500 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	for srv.streams.Load() < 2 {
		if n := a.Applied(); n != 0 {
			t.Fatalf("the agent applied %d updates from a stream that ended mid-update", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.WaitFor(ctx, func(st *wire.NodeState) bool { return len(st.Policies) == 4 }); err != nil {
		t.Fatal(err)
	}
	if n := a.Applied(); n != 1 {
		t.Errorf("applied %d updates, want the one whole update", n)
	}
}
