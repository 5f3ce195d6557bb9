package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// CodecName is the gRPC content subtype the distribution stream uses
// (content-type application/grpc+tierflow-json).
const CodecName = "tierflow-json"

func init() { encoding.RegisterCodecV2(jsonCodec{}) }

// jsonCodec encodes messages with encoding/json. It is registered under
// CodecName only, so protobuf services in the same process are unaffected.
type jsonCodec struct{}

// Marshal hands gRPC a message's encoding: the parts of an update encoded
// beforehand (EncodeUpdateMessages) as they are, without joining them.
func (jsonCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*ServerMessage); ok && m.encoded != nil {
		out := make(mem.BufferSlice, len(m.encoded))
		for i, p := range m.encoded {
			out[i] = mem.SliceBuffer(p) // not pooled: gRPC never reuses it
		}
		return out, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal decodes a message (the decoders copy what they keep, so one
// buffer is read in place).
func (jsonCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if len(data) == 1 {
		return unmarshal(data[0].ReadOnlyData(), v)
	}
	return unmarshal(data.Materialize(), v)
}

func unmarshal(data []byte, v any) error {
	// An update as EncodeUpdateMessages wraps it: its large address groups
	// are read by DecodeUpdate's fast path (anything else in the message,
	// or an error, and the whole message goes to encoding/json).
	if m, ok := v.(*ServerMessage); ok && m.Update == nil && m.Chunk == nil && m.Query == nil &&
		bytes.HasPrefix(data, []byte(updatePrefix)) && bytes.HasSuffix(data, []byte("}")) {
		u := new(Update)
		if DecodeUpdate(data[len(updatePrefix):len(data)-1], u) == nil {
			m.Update = u
			return nil
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %T: %w", v, err)
	}
	return nil
}

func (jsonCodec) Name() string { return CodecName }

// CallOptions are the call options a client needs for the Sync stream.
func CallOptions() []grpc.CallOption {
	return []grpc.CallOption{grpc.CallContentSubtype(CodecName)}
}
