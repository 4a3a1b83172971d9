package h2grpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// A Releaser is memory a unary call used — its request's or its answer's
// — that can be reused once the call is over.
type Releaser interface {
	// Release is called once, on the goroutine that ran the call, after
	// its handler has returned and its answer has been encoded: nothing
	// reads the request or the answer's message after that.
	Release()
}

// A ReleasingCodec is a Codec that may decode a unary call's request into
// memory it reuses: the server releases what UnmarshalReleasing returns
// once the call is over. Streaming calls' messages go through Unmarshal.
type ReleasingCodec interface {
	encoding.CodecV2
	// UnmarshalReleasing is Unmarshal of the message's bytes, which it
	// must not keep, and returns what to release once the call is over,
	// or nil.
	UnmarshalReleasing(data []byte, v any) (Releaser, error)
}

// OnDone has r released once the unary call of ctx is over: when its
// handler has returned and its answer has been encoded. It reports false,
// and does nothing, when ctx is not a unary call of an h2grpc Server (a
// call of grpc-go's server, or no call at all): r is then the garbage
// collector's. It must be called on the goroutine that runs the call's
// handler (a batch handler's, for the calls of its batch) before the
// handler returns, and a handler that releases its answer must not keep
// it: interceptors neither.
func OnDone(ctx context.Context, r Releaser) bool {
	st, ok := grpc.ServerTransportStreamFromContext(ctx).(*stream)
	if !ok || st.m.stream != nil {
		return false
	}
	st.done = append(st.done, r)
	return true
}

// release releases what the call registered, in order, and forgets it.
func (st *stream) release() {
	for i, r := range st.done {
		r.Release()
		st.done[i] = nil
	}
	st.done = st.done[:0]
}
