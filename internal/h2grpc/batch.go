package h2grpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Call is one unary call of a batch given to a BatchHandler.
type Call struct {
	st *stream
	// Reply is the call's answer, which the handler sets; or
	Reply any
	// Err, which the handler sets instead, fails the call, as a unary
	// handler's error does (a status error names its code; any other
	// error answers Unknown, a context's error Canceled or
	// DeadlineExceeded).
	Err error
}

// Context is the call's own context: its deadline, metadata and peer;
// cancelled when the client cancels the call or the connection closes.
func (c *Call) Context() context.Context { return c.st.ctx }

// Decode reads the call's request message into v with the server's codec.
func (c *Call) Decode(v any) error { return c.st.decode(v) }

// BatchHandler answers several calls of one unary method at once: it sets
// each call's Reply or Err before it returns. It runs on a worker (or a
// goroutine of its own), without the server's unary interceptors, and must
// not keep the calls after it returns.
type BatchHandler func(calls []Call)

// maxBatch bounds the calls of one batch: a connection that sends more
// calls at once has them answered in several batches.
const maxBatch = 64

// HandleBatch has the calls of the unary method fullMethod
// ("/package.Service/Method", registered with RegisterService) that a
// connection's reader reads together — every call whose request is
// complete when the reader has read all the client has sent so far, up to
// 64 — answered by one call of h instead of one call each of the method's
// handler: for a handler that can serve several requests for little more
// than the cost of one (one round trip to a database for all of them, say),
// it saves, per call, a hand-off to a worker and the handler's own waits,
// and lets one write carry the batch's answers. A batch can hold a single
// call. Call it before Serve; naming a method not registered, or a
// streaming one, is a programmer's bug and panics. With Options.Inline, the
// method's calls still run inline, one by one.
func (s *Server) HandleBatch(fullMethod string, h BatchHandler) {
	m, ok := s.methods[fullMethod]
	if !ok || m.stream != nil || h == nil {
		panic(fmt.Sprintf("h2grpc: HandleBatch of %q: not a registered unary method, or a nil handler", fullMethod))
	}
	m.batch = h
}

// batch is the calls of one method read together, on their way to a
// worker.
type batch struct {
	m       *method
	streams []*stream
	calls   []Call
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// holdForBatch keeps the unary call st, whose request is complete, for the
// batch the reader hands over once it has read all the client has sent
// (dispatchBatches), or at once when maxBatch calls are waiting.
func (c *conn) holdForBatch(st *stream) {
	st.counted = true
	c.running.Add(1)
	c.held = append(c.held, st)
	if len(c.held) >= maxBatch {
		c.dispatchBatches()
	}
}

// dispatchBatches hands the calls held by holdForBatch to workers, one
// batch per method.
func (c *conn) dispatchBatches() {
	held := c.held
	for len(held) > 0 {
		b := batchPool.Get().(*batch)
		b.m = held[0].m
		n := 0
		for _, st := range held {
			if st.m == b.m {
				b.streams = append(b.streams, st)
			} else {
				held[n] = st
				n++
			}
		}
		held = held[:n]
		c.s.dispatchBatch(b)
	}
	clear(c.held[:cap(c.held)])
	c.held = c.held[:0]
}

// run answers the batch's calls with the method's batch handler, then
// flushes their answers together.
func (b *batch) run() {
	for _, st := range b.streams {
		st.done = st.doneBuf[:0]
		b.calls = append(b.calls, Call{st: st})
	}
	b.m.batch(b.calls)
	c := b.streams[0].c
	for i, st := range b.streams {
		st.batched = true
		call := &b.calls[i]
		if call.Err != nil || call.Reply == nil {
			err := call.Err
			if err == nil {
				err = status.Error(codes.Internal, "h2grpc: the batch handler set neither a reply nor an error")
			}
			st.release()
			st.finish(statusOf(err), nil)
			continue
		}
		msg, err := st.encode(call.Reply)
		st.release()
		if err != nil {
			st.finish(status.Newf(codes.Internal, "grpc: error while marshaling: %v", err), nil)
			continue
		}
		st.finish(nil, msg)
	}
	// The answers are written, not yet sent: one flush for all of them,
	// or, while other calls of the connection run, a timer's. Then the
	// streams are forgotten, which may close a draining connection.
	c.wmu.Lock()
	if c.running.Load() > 0 {
		c.flushSoonLocked()
		c.wmu.Unlock()
	} else {
		c.unlockWrite()
	}
	for _, st := range b.streams {
		c.forget(st)
	}
	clear(b.calls)
	clear(b.streams)
	b.calls, b.streams, b.m = b.calls[:0], b.streams[:0], nil
	batchPool.Put(b)
}
