package wire

import (
	"context"

	"google.golang.org/grpc"
)

const (
	// ServiceName is the gRPC service of the distribution stream.
	ServiceName = "tierflow.distribution.v1.Distribution"
	// SyncMethod is the full method name of the Sync stream.
	SyncMethod = "/" + ServiceName + "/Sync"
)

// SyncServer is what the controller implements: one call per connected
// agent, for as long as it stays connected.
type SyncServer interface {
	Sync(stream ServerStream) error
}

// ServerStream is the controller's end of a Sync stream.
type ServerStream interface {
	Context() context.Context
	Send(*ServerMessage) error
	Recv() (*ClientMessage, error)
}

type serverStream struct{ grpc.ServerStream }

func (s serverStream) Send(m *ServerMessage) error { return s.ServerStream.SendMsg(m) }

func (s serverStream) Recv() (*ClientMessage, error) {
	m := new(ClientMessage)
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

var syncStreamDesc = grpc.StreamDesc{
	StreamName:    "Sync",
	ServerStreams: true,
	ClientStreams: true,
	Handler: func(srv any, stream grpc.ServerStream) error {
		return srv.(SyncServer).Sync(serverStream{stream})
	},
}

// ServiceDesc describes the service for grpc.Server.RegisterService; it is
// written by hand because the messages are JSON, not protobuf.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*SyncServer)(nil),
	Streams:     []grpc.StreamDesc{syncStreamDesc},
	Metadata:    "tierflow distribution (JSON codec, no .proto)",
}

// ClientStream is the agent's end of a Sync stream.
type ClientStream interface {
	Send(*ClientMessage) error
	Recv() (*ServerMessage, error)
	CloseSend() error
}

type clientStream struct{ grpc.ClientStream }

func (s clientStream) Send(m *ClientMessage) error { return s.ClientStream.SendMsg(m) }

func (s clientStream) Recv() (*ServerMessage, error) {
	m := new(ServerMessage)
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// OpenSync opens a Sync stream on conn.
func OpenSync(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (ClientStream, error) {
	opts = append(CallOptions(), opts...)
	s, err := conn.NewStream(ctx, &syncStreamDesc, SyncMethod, opts...)
	if err != nil {
		return nil, err
	}
	return clientStream{s}, nil
}
