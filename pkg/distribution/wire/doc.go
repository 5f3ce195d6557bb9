// Package wire holds what the controller and the agents exchange: the
// messages of the Sync stream, the gRPC service description that carries
// them, the JSON codec they travel in, and NodeState — the span-filtered
// slice of the computed model one node needs, with the rules for applying
// an Update to it.
//
// # Why JSON over gRPC, without protoc
//
// The messages carry pkg/model types directly. Generating protobuf types
// for them would mean a second copy of the model to keep in step (and a
// protoc toolchain in the build). gRPC is codec-agnostic: the codec
// registered here under the content subtype "tierflow-json" encodes messages
// with encoding/json, and the service description (ServiceDesc) is written
// by hand — one bidirectional stream, so there is little to write. gRPC
// still supplies HTTP/2 framing, flow control, TLS, deadlines, keepalives
// and per-RPC credentials. Both ends use the codec only through
// CallContentSubtype / the registered name, so other gRPC services in the
// same process keep protobuf. The encoding of a large address group is
// made once and reused for every node it goes to (AddressGroups,
// groupjson.go): a group every node needs is otherwise encoded once per
// node. On the agent's side, decoding such a group with encoding/json
// (which scans every byte twice, then decodes by reflection) was most of
// the agent's work on a large update; the codec and the Assembler read an
// update EncodeUpdate made with DecodeUpdate instead, which reads its
// address groups with model.ParseAddressGroupsJSON (several times faster,
// members' node and namespace names shared) and the rest, or any input
// not in that form, with encoding/json: the result is always what
// encoding/json makes of the input (FuzzDecodeUpdate).
//
// # The stream
//
// An agent opens Sync, sends a Hello naming the epoch (the controller
// instance) and version of the state it already holds, then Reports, and
// a PodsReport (the pod ports on its bridge) when the stream opens and
// whenever they change.
// The controller answers with Updates, each carrying the next version of
// that node's stream. The first Update is either Full (replace everything)
// or, when the controller can still replay the versions the agent missed,
// the next delta. Versions increase by one per Update within an epoch;
// a new controller process starts a new epoch, so every agent resyncs.
// Each Update carries a Trace: when the controller's engine reported its
// first change, when the distribution round queued it and when the
// stream started sending it; the agent keeps it with its own stages
// (agentquery's /v1/updates), so realization latency can be taken apart
// stage by stage.
//
// # What a node receives (ForNode)
//
//   - every Policy whose Span contains the node;
//   - every AppliedToGroup those policies reference, with only the node's
//     own members (MembersByNode has at most the node's key);
//   - every AddressGroup those policies' rules reference, whole;
//   - its pods (model.NodePods: namespace, name, UID, addresses and the
//     generation of each entry), never ahead of the group changes of an
//     entry's generation: the agent admits a pod's port only when they
//     list it (pkg/agent/pipeline/DESIGN.md, "Admission").
//
// Spans are stripped from what is sent, and so are the generations of
// groups: an agent needs neither, and leaving them out means that a
// change elsewhere (a pod on another node joining an applied-to group, a
// group's span growing) is not resent to nodes for which nothing changed.
// Policies keep their generation: realization is reported against it.
package wire
