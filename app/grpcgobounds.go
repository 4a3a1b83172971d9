package app

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluice-rl/sluice/internal/h2grpc"
)

// grpcGoBounds gives grpc-go's server (--grpc-server grpc-go) two bounds
// that Sluice's own server has and grpc-go's lacks, through grpc-go's
// public hooks:
//   - --grpc-max-streams, the calls open on the whole server, shared
//     between the connections holding calls by h2grpc.Admit's rule; a
//     call past it is answered UNAVAILABLE before it starts (grpc-go's tap
//     cannot refuse a stream with REFUSED_STREAM, as Sluice's server
//     does);
//   - the request timeout (--http-read-timeout): a call whose request has
//     not come whole in time ends CANCELLED, its context cancelled under
//     grpc-go's read of the request.
//
// A call counts from its headers (the tap) until its handler returns (the
// interceptors), or, when it never reaches them (a client that reset it,
// a request over 4 MiB), until its request timer fires: such a call keeps
// its place up to the timeout after it ended. No stats handler (which
// would see every stream's end and each connection's): with one, grpc-go
// spent 2.6 µs more server CPU per call on the memory store than without
// these bounds, against 1.4 µs without one (BENCHMARKS.md).
//
// grpc-go holds what a client sends of a message as it comes, up to its
// flow-control windows: --grpc-max-pending-bytes has no hook there.
type grpcGoBounds struct {
	maxStreams     int64
	requestTimeout time.Duration

	mu      sync.Mutex
	open    int64         // calls open on the server
	conns   map[any]int64 // calls open per connection holding any, by the connection's peer address
	refused int64         // calls refused past maxStreams
	late    int64         // calls cancelled for a late request
}

// stats returns the calls open (counted only with --grpc-max-streams),
// those refused, and those cancelled for a late request.
func (b *grpcGoBounds) stats() (open, refused, late int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open, b.refused, b.late
}

// call is one admitted call's place; its context carries it.
type call struct {
	b     *grpcGoBounds // nil: the call is not counted
	conn  any
	timer *time.Timer // cancels the call's context when its request is late; nil in noCall
	once  sync.Once
}

type callKey struct{}

// options returns the server options that install the bounds: the tap and
// the interceptors (to run before the others) that stop a call's request
// timer and give its place back when its handler returns.
func (b *grpcGoBounds) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(b.tap),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			c := callOf(ctx)
			c.arrived() // grpc-go decodes the request before the interceptors
			defer c.end()
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			c := callOf(ss.Context())
			c.arrived() // streaming calls are left alone, as in Sluice's server
			defer c.end()
			return handler(srv, ss)
		}),
	}
}

// callOf returns ctx's call; a call the tap did not see (none should
// reach the interceptors) gets noCall, which counts nothing.
func callOf(ctx context.Context) *call {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c
	}
	return noCall
}

var noCall = &call{}

// arrived stops the call's request timer: its request is whole.
func (c *call) arrived() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// tap admits a new call, or refuses it past --grpc-max-streams; grpc-go
// runs it as a stream's headers arrive, and the context it returns is the
// stream's, which grpc-go's read of the request waits on.
func (b *grpcGoBounds) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	var conn any = ctx // no peer: a connection of its own
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		conn = p.Addr // the same value for every call on a connection
	}
	c := &call{conn: conn}
	if b.maxStreams > 0 {
		b.mu.Lock()
		mine, holding := b.conns[conn]
		nconns := int64(len(b.conns))
		if !holding {
			nconns++
		}
		if !h2grpc.Admit(b.open+1, mine+1, b.maxStreams, nconns) {
			b.refused++
			b.mu.Unlock()
			return nil, status.Errorf(codes.Unavailable, "the server has as many calls open as it takes (--grpc-max-streams %d); try again", b.maxStreams)
		}
		b.open++
		b.conns[conn] = mine + 1
		b.mu.Unlock()
		c.b = b // counted: end gives the place back
	}
	ctx, cancel := context.WithCancel(ctx)
	c.timer = time.AfterFunc(b.requestTimeout, func() {
		b.mu.Lock()
		b.late++
		b.mu.Unlock()
		c.end()
		cancel() // last: who sees the context end sees the place given back
	})
	return context.WithValue(ctx, callKey{}, c), nil
}

// end gives the call's place back, once. (It leaves the timer alone: the
// timer's own function calls it, maybe before tap has set c.timer.)
func (c *call) end() {
	if c.b == nil {
		return // not counted (no --grpc-max-streams), or noCall
	}
	c.once.Do(func() {
		b := c.b
		b.mu.Lock()
		b.open--
		if n := b.conns[c.conn] - 1; n > 0 {
			b.conns[c.conn] = n
		} else {
			delete(b.conns, c.conn)
		}
		b.mu.Unlock()
	})
}
