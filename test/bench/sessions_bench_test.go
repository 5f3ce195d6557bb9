package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/tierflow/tierflow/pkg/compute"
	"github.com/tierflow/tierflow/pkg/distribution/server"
	"github.com/tierflow/tierflow/pkg/distribution/wire"
	"github.com/tierflow/tierflow/test/bench/measure"
	"github.com/tierflow/tierflow/test/bench/shapes"
)

// BenchmarkDistributionSessions measures what the distribution server
// holds for connected agents on top of the engine, at each shape: one
// stream per node (all of the shape's nodes, in process, without gRPC:
// wire.ServerStream fakes that take the server's messages), each until it
// has been sent its full update. It reports the heap the sessions add
// (after a full GC: each session's record of what its agent holds, and
// its queue) and the largest encoded full update of a node — what a
// full-sync slot holds while it is sent (server.Options
// MaxConcurrentFullSyncs). It is one of the figures the controller's
// memory limit in the manifest is sized from (manifests/README.md).
func BenchmarkDistributionSessions(b *testing.B) {
	eachShape(b, func(b *testing.B, s shapes.Shape) {
		c := s.Build(quickScale())
		e := compute.New()
		c.FeedTo(e)
		nodes := make([]string, len(c.Nodes))
		tokens := server.StaticTokens{}
		for i, n := range c.Nodes {
			nodes[i] = n.Name
			tokens["token-"+n.Name] = n.Name
		}
		c = nil
		for b.Loop() {
			srv := server.New(e, tokens, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			ctx, cancel := context.WithCancel(context.Background())
			go srv.Run(ctx)
			// The server has read the engine once it answers for a policy.
			for _, p := range e.Snapshot().Policies {
				for {
					if _, ok := srv.Summary(p.ID); ok {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				break
			}
			before := measure.HeapInUseBytes()
			sizes := make(chan int, len(nodes))
			for _, n := range nodes {
				st := &sessionStream{ctx: metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer token-"+n)), sizes: sizes}
				go func() { _ = srv.Sync(st) }()
			}
			largest := 0
			for range nodes {
				largest = max(largest, <-sizes)
			}
			after := measure.HeapInUseBytes()
			b.ReportMetric(float64(int64(after)-int64(before))/mib, "sessions-MiB")
			b.ReportMetric(float64(largest)/1024, "largest-full-update-KiB")
			b.ReportMetric(float64(len(nodes)), "agents")
			cancel()
		}
	})
}

// sessionStream is an agent's end of a Sync stream in process: a Hello
// asking for everything, then nothing until the context ends. It
// reports the encoded size of the full update it is sent.
type sessionStream struct {
	ctx   context.Context
	sizes chan<- int
	hello bool
}

func (s *sessionStream) Context() context.Context { return s.ctx }

func (s *sessionStream) Send(m *wire.ServerMessage) error {
	if m.Update != nil && m.Update.Full {
		data, err := json.Marshal(m.Update)
		if err != nil {
			return fmt.Errorf("encoding: %w", err)
		}
		s.sizes <- len(data)
	}
	return nil
}

func (s *sessionStream) Recv() (*wire.ClientMessage, error) {
	if !s.hello {
		s.hello = true
		return &wire.ClientMessage{Hello: &wire.Hello{}}, nil
	}
	<-s.ctx.Done()
	return nil, io.EOF
}
