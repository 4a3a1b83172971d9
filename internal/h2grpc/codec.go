package h2grpc

import "google.golang.org/grpc/encoding"

// An AppendingCodec is a Codec that can write a message after bytes the
// server already has, the message's gRPC prefix, instead of into buffers
// of its own that the server then copies.
type AppendingCodec interface {
	encoding.CodecV2
	// AppendMarshal appends v's encoding to dst and returns the extended
	// slice. It must not keep dst.
	AppendMarshal(dst []byte, v any) ([]byte, error)
}
