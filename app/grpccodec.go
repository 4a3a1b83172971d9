package app

import (
	"context"
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/h2grpc"
	"github.com/sluice-rl/sluice/internal/rlswire"
)

// requestCodec is the gRPC server's codec: grpc-go's proto codec, but
// for the usual Envoy request, which rlswire decodes, and for a request
// that does not decode (invalid UTF-8 in a string field, a truncated
// message), which is the caller's fault, InvalidArgument, where grpc-go
// answers Internal. grpc-go turns any error a codec returns into Internal
// (rpc_util.go, recv), so Unmarshal reports success and notes the error
// against the message; the interceptors (interceptors) answer it before
// any handler sees the message. Only messages that failed to decode are
// noted, and each note is taken back when its call checks it. h2grpc
// answers a codec's status instead, and decodes unary requests with
// UnmarshalReleasing, which returns the error: its unary calls need no
// interceptor (its streams still have one).
type requestCodec struct {
	encoding.CodecV2
	failed sync.Map // message (a pointer) → its *status.Status error
}

var (
	_ h2grpc.ReleasingCodec = (*requestCodec)(nil)
	_ h2grpc.AppendingCodec = (*requestCodec)(nil)
)

func newRequestCodec() *requestCodec {
	return &requestCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	// The usual Envoy request in a few allocations, not five or so per
	// descriptor; anything else through protobuf.
	if req, ok := v.(*rlsv3.RateLimitRequest); ok && len(data) == 1 && rlswire.Unmarshal(data[0].ReadOnlyData(), req) {
		return nil
	}
	return c.protobuf(data, v)
}

// protobuf decodes v with protobuf, noting the error of a message that
// does not decode.
func (c *requestCodec) protobuf(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.failed.Store(v, invalidRequest(err))
	}
	return nil
}

// UnmarshalReleasing is Unmarshal for h2grpc's unary calls: the usual
// Envoy request's descriptors and entries go into rlswire's pooled
// arrays, which h2grpc releases once the call is over.
//
// h2grpc answers the status of an error a codec returns, so a request
// that does not decode is InvalidArgument here without the interceptors
// (h2grpc's unary calls go without them).
func (c *requestCodec) UnmarshalReleasing(data []byte, v any) (h2grpc.Releaser, error) {
	if req, ok := v.(*rlsv3.RateLimitRequest); ok {
		a := rlswire.Get()
		if a.Unmarshal(data, req) {
			return a, nil
		}
		a.Release()
	}
	if err := c.CodecV2.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, v); err != nil {
		return nil, invalidRequest(err)
	}
	return nil, nil
}

// invalidRequest is the InvalidArgument error of a request that does not
// decode.
func invalidRequest(err error) error {
	return status.Errorf(codes.InvalidArgument, "invalid request: %v", err)
}

// AppendMarshal appends v's encoding to dst, as Marshal encodes it: h2grpc
// writes an answer after its gRPC prefix this way, without the proto
// codec's buffers and their copy.
func (c *requestCodec) AppendMarshal(dst []byte, v any) ([]byte, error) {
	if m, ok := v.(proto.Message); ok {
		return proto.MarshalOptions{}.MarshalAppend(dst, m)
	}
	data, err := c.Marshal(v)
	if err != nil {
		return dst, err
	}
	dst = append(dst, data.Materialize()...)
	data.Free()
	return dst, nil
}

// check returns the InvalidArgument error of a message that did not
// decode, nil for one that did.
func (c *requestCodec) check(v any) error {
	if err, ok := c.failed.LoadAndDelete(v); ok {
		return err.(error)
	}
	return nil
}

// interceptors answer a call whose request did not decode with the
// codec's InvalidArgument.
func (c *requestCodec) interceptors() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(c), grpc.ChainUnaryInterceptor(c.unary), grpc.ChainStreamInterceptor(c.stream)}
}

func (c *requestCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := c.check(req); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (c *requestCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	return next(srv, checkedStream{ServerStream: ss, c: c})
}

// checkedStream is a server stream whose received messages are checked.
type checkedStream struct {
	grpc.ServerStream
	c *requestCodec
}

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.c.check(m)
}
