package h2grpc

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serverStream is a streaming call's grpc.ServerStream.
type serverStream struct {
	st    *stream
	nrecv int
}

func (ss *serverStream) SetHeader(md metadata.MD) error  { return ss.st.SetHeader(md) }
func (ss *serverStream) SendHeader(md metadata.MD) error { return ss.st.SendHeader(md) }
func (ss *serverStream) SetTrailer(md metadata.MD)       { ss.st.SetTrailer(md) }
func (ss *serverStream) Context() context.Context        { return ss.st.ctx }

func (ss *serverStream) SendMsg(m any) error {
	st := ss.st
	msg, err := st.encode(m)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	defer putBuffer(msg)
	c := st.c
	c.wmu.Lock()
	if st.ended || c.broken() {
		c.wmu.Unlock()
		if err := st.ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		return status.Error(codes.Canceled, "the stream ended")
	}
	err = st.writeMsgLocked(msg)
	c.unlockWrite()
	return err
}

func (ss *serverStream) RecvMsg(m any) error {
	st := ss.st
	st.qmu.Lock()
	for len(st.queue) == 0 && !st.qend && st.qerr == nil {
		st.qcond.Wait()
	}
	if st.qerr != nil {
		err := st.qerr
		st.qmu.Unlock()
		return err
	}
	if len(st.queue) == 0 {
		st.qmu.Unlock()
		if !st.m.stream.ClientStreams && ss.nrecv == 0 {
			return status.Error(codes.Internal, "cardinality violation: received no request message from non-client-streaming RPC")
		}
		return io.EOF
	}
	q := st.queue[0]
	st.queue[0] = queued{}
	st.queue = st.queue[1:]
	st.queued -= int64(len(q.data)) + 5
	var owed int64
	if st.queued < int64(st.c.s.opts.InitialWindowSize) {
		owed, st.deferred = st.deferred, 0
	}
	done := st.qend
	st.qmu.Unlock()
	if !done {
		st.credit(owed)
	}
	ss.nrecv++
	return st.unmarshal(q, m)
}

var _ grpc.ServerStream = (*serverStream)(nil)

// queueRoom reports whether a streaming call's unread messages take less
// than a window, so that received bytes may be credited at once.
func (st *stream) queueRoom() bool {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	return st.queued < int64(st.c.s.opts.InitialWindowSize)
}
