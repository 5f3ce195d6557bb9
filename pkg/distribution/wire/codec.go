package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// CodecName is the gRPC content subtype the distribution stream uses
// (content-type application/grpc+tierflow-json).
const CodecName = "tierflow-json"

func init() { encoding.RegisterCodec(jsonCodec{}) }

// jsonCodec encodes messages with encoding/json. It is registered under
// CodecName only, so protobuf services in the same process are unaffected.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error) {
	if m, ok := v.(*ServerMessage); ok && m.encoded != nil {
		return m.encoded, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return b, nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	// An update as EncodedUpdate wraps it: its large address groups are
	// read by DecodeUpdate's fast path (anything else in the message, or
	// an error, and the whole message goes to encoding/json).
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
