// Package h2grpc is a gRPC server written directly over HTTP/2 frames: the
// services grpc-go's generated code registers, served with a fraction of
// grpc-go's server's CPU per call.
//
// A rate limit call is a few hundred bytes each way, so a gRPC server's
// cost per call is almost all transport. grpc-go's server reads a call on
// one goroutine, runs it on a second and writes its answer from a third
// (its loopyWriter), allocating about fifty objects on the way; this one
// reads a call's frames on the connection's goroutine, runs the call on a
// worker that also writes the answer, and lets the answers of calls that
// finish together share one write system call; a method given a
// BatchHandler (HandleBatch) has the calls read together answered by one
// call of it. It serves any grpc-go service (RegisterService takes the
// generated descriptors), unary and streaming, with grpc-go's
// interceptors, codecs, metadata, peer, deadlines, status details and its
// grpc.SetHeader family, over h2c or TLS.
//
// A compressed request is read with the compressor grpc-go's encoding
// package has registered under its grpc-encoding, and answered compressed
// the same way, as grpc-go does. What it leaves out: grpc-go's channelz,
// stats handlers, tap handles and binary logs.
package h2grpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec
)

// Options configure a Server. Zero values take the defaults given.
type Options struct {
	// TLS, when set, serves TLS; "h2" is added to its NextProtos. Nil
	// serves h2c (HTTP/2 over plain TCP, prior knowledge).
	TLS *tls.Config
	// MaxConcurrentStreams caps the calls in flight on one connection
	// (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with
	// REFUSED_STREAM. Default (0): no cap.
	MaxConcurrentStreams uint32
	// MaxStreams bounds the calls open on the whole server, every
	// connection together. A call holds memory from its HEADERS until it
	// ends, even one whose request never comes: without it, the bound
	// would be MaxConcurrentStreams times however many connections are
	// open. Past MaxStreams, a connection may still open calls while it
	// holds less than an even share of them (MaxStreams over the open
	// connections), so that a few connections holding many calls cannot
	// shut the others out; past twice MaxStreams, none may. A call
	// refused is reset with REFUSED_STREAM. Default (0): no bound.
	MaxStreams int
	// MaxPendingBytes bounds, in the same way, the bytes of request
	// messages the server holds unfinished: a message is held until its
	// last byte comes. A call whose message is refused room answers
	// RESOURCE_EXHAUSTED. A message that comes whole in one DATA frame is
	// never held. Default (0): no bound.
	MaxPendingBytes int64
	// MaxRecvMsgSize is the largest request message accepted, in bytes;
	// larger ones answer RESOURCE_EXHAUSTED. Default 4 MiB, grpc-go's.
	MaxRecvMsgSize int
	// InitialWindowSize and InitialConnWindowSize are the receive windows
	// announced per stream and for the connection, in bytes. Defaults
	// 1 MiB and 16 MiB; at least 65,535.
	InitialWindowSize, InitialConnWindowSize uint32
	// MaxConnectionAge sends a connection a GOAWAY once it is this old
	// (±10%), and MaxConnectionAgeGrace then closes it, calls or not.
	// Zero: never.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// MaxConnectionIdle sends a GOAWAY to a connection without calls for
	// this long. Zero: never.
	MaxConnectionIdle time.Duration
	// KeepaliveTime is how long a connection may be silent before the
	// server pings it, and KeepaliveTimeout how long the ping then has to
	// be answered before the connection is closed. Defaults 2 h and 20 s,
	// grpc-go's.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest interval between a client's pings
	// the server tolerates: the third ping sooner than that since the
	// server last sent a header or data frame is answered with GOAWAY
	// ENHANCE_YOUR_CALM "too_many_pings". Default 5 minutes, grpc-go's;
	// pings are allowed without calls in flight.
	KeepaliveMinTime time.Duration
	// WriteTimeout closes a connection a write to which has not completed
	// in this long: a client that stops reading its answers cannot hold
	// the calls that answer it. Zero: no limit.
	WriteTimeout time.Duration
	// RequestTimeout bounds how long a unary call's request may take to
	// come whole, from its HEADERS to the client's END_STREAM: a call
	// still waiting for it then is reset (RST_STREAM CANCEL), so that
	// calls whose requests never come do not keep their places in the
	// caps above. Streaming calls are not bound. Zero: no bound.
	RequestTimeout time.Duration
	// HandshakeTimeout bounds the TLS handshake and the client's HTTP/2
	// preface. Default 120 s, grpc-go's ConnectionTimeout.
	HandshakeTimeout time.Duration
	// Codec encodes and decodes messages. Default grpc-go's "proto". A
	// request the codec fails to decode answers Internal, as in grpc-go,
	// unless the codec's error carries a gRPC status (status.Error): then
	// that status. It may also be a ReleasingCodec or an AppendingCodec.
	Codec encoding.CodecV2
	// Unary and Stream, when set, intercept every call, as grpc-go's
	// chained interceptors (the first given is the outermost).
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Workers is how many long-lived goroutines run calls; a call finding
	// none free gets a goroutine of its own. Default (0): one goroutine per
	// call.
	Workers int
	// Inline runs unary calls on their connection's reader goroutine, one
	// after another, and writes the answers to the calls read together in
	// one system call: for handlers that never block (a memory store), it
	// saves a goroutine hand-off per call. A blocking handler holds up its
	// connection's other calls, and must not wait on its context: while it
	// runs the connection reads nothing, so neither the client's
	// cancellation nor its hang-up reaches the context (a deadline does).
	// Streaming calls always run on goroutines of their own.
	Inline bool
	// Logger reports connections that break on protocol errors, at debug
	// level. Default: slog.Default().
	Logger *slog.Logger
}

const (
	defaultMaxRecvMsgSize = 4 << 20
	defaultWindow         = 1 << 20
	defaultConnWindow     = 1 << 24
	minWindow             = 65535
)

// ErrServerStopped is what Serve returns once Stop or GracefulStop was
// called.
var ErrServerStopped = errors.New("h2grpc: the server has been stopped")

// Server serves registered gRPC services on any number of listeners. Its
// methods are safe for concurrent use; register services before serving.
// The zero value is not usable: get one from NewServer.
type Server struct {
	opts   Options
	unary  grpc.UnaryServerInterceptor  // the chain of opts.Unary, or nil
	stream grpc.StreamServerInterceptor // the chain of opts.Stream, or nil
	// opts.Codec as a ReleasingCodec and an AppendingCodec, or nil.
	releasing ReleasingCodec
	appending AppendingCodec
	work      chan job      // to the workers; nil without workers
	quit      chan struct{} // closed by Stop and GracefulStop: workers end

	methods map[string]*method // by path, "/package.Service/Method"; set before serving

	// open is the calls open on every connection (conn.streams
	// together), and pending the bytes of their unfinished messages
	// (stream.pending together); both change under the conn's mu.
	open    atomic.Int64
	pending atomic.Int64
	nconns  atomic.Int64 // len(conns)

	// What Stats reports besides those.
	refused    [NumRefusals]atomic.Int64
	late       atomic.Int64
	connErrors atomic.Int64

	mu        sync.Mutex // protects the fields below
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	stopping  bool       // Stop or GracefulStop was called
	connsGone *sync.Cond // on mu: broadcast when a connection leaves conns
}

// method is one registered method.
type method struct {
	srv     any
	service string // "package.Service"
	name    string // "/package.Service/Method"
	unary   grpc.MethodHandler
	stream  *grpc.StreamDesc // set for streaming methods
	batch   BatchHandler     // set by HandleBatch
}

// NewServer returns a server with opts; see Options for the defaults.
func NewServer(opts Options) *Server {
	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = defaultMaxRecvMsgSize
	}
	if opts.InitialWindowSize < minWindow {
		opts.InitialWindowSize = defaultWindow
	}
	if opts.InitialConnWindowSize < minWindow {
		opts.InitialConnWindowSize = defaultConnWindow
	}
	if opts.KeepaliveTime <= 0 {
		opts.KeepaliveTime = 2 * time.Hour
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = 20 * time.Second
	}
	if opts.KeepaliveMinTime <= 0 {
		opts.KeepaliveMinTime = 5 * time.Minute
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 120 * time.Second
	}
	if opts.Codec == nil {
		opts.Codec = encoding.GetCodecV2("proto")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TLS != nil {
		opts.TLS = opts.TLS.Clone()
		if !slices.Contains(opts.TLS.NextProtos, "h2") {
			opts.TLS.NextProtos = append([]string{"h2"}, opts.TLS.NextProtos...)
		}
	}
	s := &Server{
		opts:      opts,
		unary:     chainUnary(opts.Unary),
		stream:    chainStream(opts.Stream),
		quit:      make(chan struct{}),
		methods:   make(map[string]*method),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
	}
	s.releasing, _ = opts.Codec.(ReleasingCodec)
	s.appending, _ = opts.Codec.(AppendingCodec)
	s.connsGone = sync.NewCond(&s.mu)
	if opts.Workers > 0 {
		s.work = make(chan job)
		for range opts.Workers {
			go s.worker()
		}
	}
	return s
}

// RegisterService registers a service and its implementation, as the
// generated RegisterXServer functions do; it implements
// grpc.ServiceRegistrar. Call it before Serve. Registering a service
// twice, or an implementation of the wrong type, is a programmer's bug
// and panics, as in grpc-go.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	if impl != nil && sd.HandlerType != nil {
		ht := reflect.TypeOf(sd.HandlerType).Elem()
		if st := reflect.TypeOf(impl); !st.Implements(ht) {
			panic(fmt.Sprintf("h2grpc: RegisterService found the handler of type %v that does not satisfy %v", st, ht))
		}
	}
	for i := range sd.Methods {
		m := &sd.Methods[i]
		s.add(&method{srv: impl, service: sd.ServiceName, name: "/" + sd.ServiceName + "/" + m.MethodName, unary: m.Handler})
	}
	for i := range sd.Streams {
		d := &sd.Streams[i]
		s.add(&method{srv: impl, service: sd.ServiceName, name: "/" + sd.ServiceName + "/" + d.StreamName, stream: d})
	}
}

func (s *Server) add(m *method) {
	if _, dup := s.methods[m.name]; dup {
		panic("h2grpc: RegisterService found a duplicate method " + m.name)
	}
	s.methods[m.name] = m
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// Serve accepts connections on l until l fails or the server stops, and
// serves each on goroutines of its own. It returns ErrServerStopped after
// Stop or GracefulStop, else the listener's error; l is closed either way.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		l.Close()
		return ErrServerStopped
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	var delay time.Duration // after a temporary Accept error, as net/http
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return ErrServerStopped
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go s.serveConn(nc)
	}
}

// Stop closes the listeners and every connection at once; calls in
// flight see their contexts cancelled and their answers dropped.
func (s *Server) Stop() {
	s.shutdown(func(c *conn) { c.close(errServerStopped) })
}

// GracefulStop closes the listeners, sends every connection a GOAWAY,
// and returns when their calls have ended and the connections are
// closed. Stop during a GracefulStop cuts the wait short.
func (s *Server) GracefulStop() {
	s.shutdown((*conn).drain)
}

// shutdown stops the server, applies end to every connection, and waits
// for all of them to close.
func (s *Server) shutdown(end func(*conn)) {
	s.mu.Lock()
	s.stop()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		end(c)
	}
	s.mu.Lock()
	for len(s.conns) > 0 {
		s.connsGone.Wait()
	}
	s.mu.Unlock()
}

// stop closes the listeners and ends the workers, once; requires s.mu
// held.
func (s *Server) stop() {
	if s.stopping {
		return
	}
	s.stopping = true
	for l := range s.listeners {
		l.Close()
	}
	close(s.quit)
}

// track adds c to the server's connections, or reports false when the
// server is stopping.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.conns[c] = struct{}{}
	s.nconns.Store(int64(len(s.conns)))
	return true
}

// admit applies Admit with the server's connections.
func (s *Server) admit(total, mine, bound int64) bool {
	return Admit(total, mine, bound, s.nconns.Load())
}

// Admit is Server's rule for a server-wide bound shared by conns
// connections, for other servers to apply (the app's bounds on grpc-go's
// server): a connection holding mine of a resource of which the server
// holds total against bound (both counted with what is asked for) may
// have more always within the bound; past it, while the connection holds
// less than an even share of the bound; past twice the bound, never.
func Admit(total, mine, bound, conns int64) bool {
	switch {
	case bound <= 0 || total <= bound:
		return true
	case total > 2*bound:
		return false
	}
	return mine <= bound/max(conns, 1)
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.nconns.Store(int64(len(s.conns)))
	s.connsGone.Broadcast()
	s.mu.Unlock()
}

// job is a worker's work: one call, or a batch of them.
type job struct {
	st *stream
	b  *batch
}

// dispatch runs st's call on a free worker, or a goroutine of its own;
// streaming calls, which may last, always on their own.
func (s *Server) dispatch(st *stream) {
	if s.work != nil && st.m.stream == nil {
		select {
		case s.work <- job{st: st}:
			return
		default:
		}
	}
	go st.run()
}

// dispatchBatch runs b on a free worker, or a goroutine of its own.
func (s *Server) dispatchBatch(b *batch) {
	if s.work != nil {
		select {
		case s.work <- job{b: b}:
			return
		default:
		}
	}
	go b.run()
}

// worker runs calls until the server stops. A long-lived goroutine keeps
// the stack a call grew, which a new goroutine would grow again.
func (s *Server) worker() {
	for {
		select {
		case j := <-s.work:
			if j.b != nil {
				j.b.run()
			} else {
				j.st.run()
			}
		case <-s.quit:
			return
		}
	}
}

func chainUnary(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return is[0](ctx, req, info, unaryNext(is, 0, info, h))
	}
}

func unaryNext(is []grpc.UnaryServerInterceptor, i int, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
	if i == len(is)-1 {
		return h
	}
	return func(ctx context.Context, req any) (any, error) {
		return is[i+1](ctx, req, info, unaryNext(is, i+1, info, h))
	}
}

func chainStream(is []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return is[0](srv, ss, info, streamNext(is, 0, info, h))
	}
}

func streamNext(is []grpc.StreamServerInterceptor, i int, info *grpc.StreamServerInfo, h grpc.StreamHandler) grpc.StreamHandler {
	if i == len(is)-1 {
		return h
	}
	return func(srv any, ss grpc.ServerStream) error {
		return is[i+1](srv, ss, info, streamNext(is, i+1, info, h))
	}
}

// Refusal is why a call was refused before it ran.
type Refusal int

const (
	// RefusedMaxConcurrentStreams: its connection had
	// Options.MaxConcurrentStreams calls open (or running).
	RefusedMaxConcurrentStreams Refusal = iota
	// RefusedMaxStreams: past Options.MaxStreams, and its connection held
	// its share.
	RefusedMaxStreams
	// RefusedMaxPendingBytes: its header list or message found no room
	// under Options.MaxPendingBytes.
	RefusedMaxPendingBytes
	// RefusedClosing: its connection was closing (after the final GOAWAY).
	RefusedClosing
	// NumRefusals is how many kinds of Refusal there are.
	NumRefusals
)

// String is the refusal's name in metrics: max_concurrent_streams,
// max_streams, max_pending_bytes, closing.
func (r Refusal) String() string {
	return [...]string{"max_concurrent_streams", "max_streams", "max_pending_bytes", "closing"}[r]
}

// Stats are the server's counts, for metrics.
type Stats struct {
	Connections  int64 // open
	Calls        int64 // open on every connection
	PendingBytes int64 // held for requests not whole yet
	// Refused counts the calls refused, by Refusal, since the server
	// started.
	Refused [NumRefusals]int64
	// LateRequests counts the unary calls reset because their requests
	// did not come whole within Options.RequestTimeout.
	LateRequests int64
	// ConnectionErrors counts the connections ended for a connection
	// error (GOAWAY with an error code: a protocol error, a flood, a
	// flow-control violation).
	ConnectionErrors int64
}

// Stats returns the server's counts now.
func (s *Server) Stats() Stats {
	st := Stats{
		Connections:      s.nconns.Load(),
		Calls:            s.open.Load(),
		PendingBytes:     s.pending.Load(),
		LateRequests:     s.late.Load(),
		ConnectionErrors: s.connErrors.Load(),
	}
	for i := range st.Refused {
		st.Refused[i] = s.refused[i].Load()
	}
	return st
}
