package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// stream is one call. The reader goroutine creates it and owns the fields
// marked "reader"; the call's goroutine owns header and trailer (wmu
// guards them against grpc.SetHeader from elsewhere); the fields marked
// "wmu" are protected by conn.wmu.
type stream struct {
	c       *conn
	id      uint32
	m       *method
	ctx     context.Context
	cancel  context.CancelFunc
	subtype string              // the content-type's subtype: "" or "proto", say
	comp    encoding.Compressor // the request's grpc-encoding; nil: identity
	inline  bool                // the call runs on the reader goroutine
	counted bool                // the call counts in conn.running until it finishes
	batched bool                // batch.run flushes the call's answer and forgets the stream

	// inflight is the bytes the client sent on the stream that the server
	// has not credited back yet: at most the stream's receive window.
	inflight atomic.Int64
	// owed is the bytes of inflight the call has consumed and the server
	// will credit back once they add up to a quarter of the window.
	owed atomic.Int64

	// reader
	hdr         [5]byte // the gRPC prefix of the message being received
	nhdr        int     // bytes of hdr received
	msg         []byte  // the message being received, grown as its bytes come
	want        int     // the message's length, from its prefix
	hdrBytes    int64   // the header list's names and values, in bytes
	pendingSeen int64   // the bytes counted in pending, as the reader last set it
	req         []byte  // unary: the request message, once complete
	reqZipped   bool
	nreq        int // unary: complete messages received
	// contentLength is the request's content-length header (-1: none),
	// which its DATA frames' payloads must add up to (received).
	contentLength, received int64

	// opened is when the stream was published; set before, then only read.
	opened time.Time

	// pending is the bytes that count in Server.pending while the client
	// has not ended its side: the header list's and those of the message
	// being received; conn.mu guards it.
	pending int64

	// clientDone is set by the reader when the client's END_STREAM
	// arrives; writers read it to know whether to reset the stream after
	// its trailers.
	clientDone atomic.Bool

	// streaming calls' received messages
	qmu   sync.Mutex // protects the fields below
	qcond *sync.Cond // on qmu: broadcast when a message, the end or an error arrives
	queue []queued
	qend  bool // the client's END_STREAM arrived
	// queued is the bytes of the messages in queue, and deferred the bytes
	// received while queued was a window or more, not yet credited.
	queued, deferred int64
	qerr             error // the stream failed: RecvMsg returns it

	// wmu
	sendWindow int64
	headerSent bool
	ended      bool // trailers or RST_STREAM went out, or the stream was aborted
	header     metadata.MD
	trailer    metadata.MD

	// done is what a unary call registered to be released once it is over
	// (OnDone, ReleasingCodec), in doneBuf unless more than two. Only the
	// goroutine that runs the call touches it.
	done    []Releaser
	doneBuf [2]Releaser
}

type queued struct {
	data   []byte
	zipped bool
}

// onHeaders starts a call, or answers why it cannot start.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		// Trailers from the client: gRPC sends none, HTTP/2 allows them.
		if !f.StreamEnded() {
			return protocolError("stream %d: a second HEADERS without END_STREAM", id)
		}
		c.endOfStream(st)
		return nil
	}
	if id%2 != 1 || id <= c.maxID {
		c.mu.Unlock()
		return protocolError("a client opened stream %d after %d: ids must be odd and increase", id, c.maxID)
	}
	c.maxID = id
	// A call the client reset is forgotten at once but its handler runs
	// on: it keeps its place in the cap until it returns (running), so
	// that opening and resetting calls in a loop (the "rapid reset"
	// attack, CVE-2023-44487) cannot start handlers without bound.
	// Its header list, up to maxHeaderList decoded (HPACK lets a few bytes
	// on the wire name a long field already sent), is kept with the call
	// and counts in the pending bytes until the client ends its side.
	var hb int64
	for _, hf := range f.Fields {
		hb += int64(len(hf.Name) + len(hf.Value))
	}
	limit := c.s.opts.MaxConcurrentStreams
	refuse := Refusal(-1)
	switch {
	case id > c.lastID || c.closed:
		refuse = RefusedClosing
	case limit > 0 && (uint32(len(c.streams)) >= limit || uint32(c.running.Load()) >= limit):
		refuse = RefusedMaxConcurrentStreams
	case !c.s.admit(c.s.open.Load()+1, int64(len(c.streams))+1, int64(c.s.opts.MaxStreams)):
		refuse = RefusedMaxStreams
	case !c.s.admit(c.s.pending.Load()+hb, c.pending+hb, c.s.opts.MaxPendingBytes):
		refuse = RefusedMaxPendingBytes
	}
	c.mu.Unlock()
	if refuse >= 0 {
		c.s.refused[refuse].Add(1)
		c.writeReset(id, http2.ErrCodeRefusedStream)
		return nil
	}
	if f.Truncated {
		c.writeReset(id, http2.ErrCodeFrameSize)
		return nil
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.writeReset(id, http2.ErrCodeProtocol) // depends on itself (RFC 9113 section 5.3.1)
		return nil
	}

	st := &stream{c: c, id: id, contentLength: -1}
	var (
		httpMethod, path, contentType, zip string
		grpcType, hasTimeout               bool
		hasMethod, hasScheme, malformed    bool
		timeout                            time.Duration
		headerErr                          *status.Status
		md                                 = make(metadata.MD, len(f.Fields))
		// The metadata's values, one array for all: most names come once.
		values = make([]string, 0, len(f.Fields))
	)
	add := func(name, v string) {
		if vs, ok := md[name]; ok {
			md[name] = append(vs, v)
			return
		}
		values = append(values, v)
		md[name] = values[len(values)-1 : len(values) : len(values)]
	}
	for _, hf := range f.Fields {
		switch hf.Name {
		case ":method":
			httpMethod, hasMethod = hf.Value, true
		case ":scheme":
			hasScheme = true
		case ":path":
			path = hf.Value
		case "content-length":
			n, err := strconv.ParseUint(hf.Value, 10, 63)
			malformed = malformed || err != nil || st.contentLength >= 0 && int64(n) != st.contentLength
			st.contentLength = int64(n)
			add(hf.Name, hf.Value) // metadata, as grpc-go has it
		case ":authority":
			add(hf.Name, hf.Value)
		case "content-type":
			contentType = hf.Value
			if sub, ok := contentSubtype(hf.Value); ok {
				st.subtype, grpcType = sub, true
				add(hf.Name, hf.Value)
			}
		case "grpc-encoding":
			zip = hf.Value
		case "grpc-timeout":
			var err error
			hasTimeout = true
			if timeout, err = decodeTimeout(hf.Value); err != nil {
				headerErr = status.Newf(codes.Internal, "malformed grpc-timeout: %v", err)
			}
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			// Connection-specific fields make a request malformed (RFC
			// 9113 section 8.2.2; gRPC A41 for Connection).
			malformed = true
		case "te":
			malformed = malformed || hf.Value != "trailers"
		case "grpc-message-type", "grpc-message", "grpc-status":
		default:
			if hf.Name == "" || hf.Name[0] == ':' {
				continue
			}
			v := hf.Value
			if strings.HasSuffix(hf.Name, "-bin") {
				b, err := decodeBinHeader(v)
				if err != nil {
					headerErr = status.Newf(codes.Internal, "malformed binary metadata %q in header %q: %v", hf.Value, hf.Name, err)
					continue
				}
				v = string(b)
			}
			add(hf.Name, v)
		}
	}
	ended := f.StreamEnded()
	// A malformed request (RFC 9113 section 8.1.1) is a stream error of
	// type PROTOCOL_ERROR: a connection-specific field, a TE other than
	// "trailers", a content-length that is no length (or is not what
	// comes), a pseudo-header missing or empty (CONNECT, which has no
	// :scheme or :path, is answered 405 below).
	malformed = malformed || httpMethod != "CONNECT" && (!hasMethod || !hasScheme || path == "") ||
		ended && st.contentLength > 0
	if malformed {
		c.writeReset(id, http2.ErrCodeProtocol)
		return nil
	}
	if len(md[":authority"]) > 1 || len(md["host"]) > 1 {
		c.earlyAbort(id, st.subtype, status.New(codes.Internal, "a request must have at most one :authority and one host header"), 400, ended)
		return nil
	}
	if !grpcType {
		c.earlyAbort(id, "", status.Newf(codes.InvalidArgument, "invalid gRPC request content-type %q", contentType), 415, ended)
		return nil
	}
	if headerErr != nil {
		c.earlyAbort(id, st.subtype, headerErr, 400, ended)
		return nil
	}
	if len(md[":authority"]) == 0 {
		if h, ok := md["host"]; ok {
			md[":authority"] = h
		}
	}
	delete(md, "host")
	if len(md[":authority"]) == 0 {
		c.earlyAbort(id, st.subtype, status.New(codes.Internal, "no host or :authority header present"), 400, ended)
		return nil
	}
	if httpMethod != "POST" {
		c.earlyAbort(id, st.subtype, status.Newf(codes.Internal, "a gRPC request's :method must be POST, not %q", httpMethod), 405, ended)
		return nil
	}
	if hasTimeout && timeout <= 0 {
		c.earlyAbort(id, st.subtype, status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error()), 200, ended)
		return nil
	}
	m, stat := c.s.lookup(path)
	if stat != nil {
		c.earlyAbort(id, st.subtype, stat, 200, ended)
		return nil
	}
	st.m = m
	if zip != "" && zip != "identity" {
		if st.comp = encoding.GetCompressor(zip); st.comp == nil {
			c.earlyAbort(id, st.subtype, status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", zip), 200, ended)
			return nil
		}
	}

	ctx := c.ctx
	if hasTimeout {
		ctx, st.cancel = context.WithTimeout(ctx, timeout)
	} else {
		ctx, st.cancel = context.WithCancel(ctx)
	}
	ctx = metadata.NewIncomingContext(ctx, md)
	st.ctx = grpc.NewContextWithServerTransportStream(ctx, st)
	st.clientDone.Store(ended)
	if m.stream != nil {
		st.qcond = sync.NewCond(&st.qmu)
		st.qend = ended
		context.AfterFunc(st.ctx, st.wake)
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		st.cancel()
		return nil
	}
	// Before the stream is published; from then on wmu guards it.
	st.sendWindow = c.peerWindow
	if c.s.opts.RequestTimeout > 0 {
		st.opened = time.Now()
	}
	c.streams[id] = st
	c.s.open.Add(1)
	st.hdrBytes, st.pending, st.pendingSeen = hb, hb, hb
	c.pending += hb
	c.s.pending.Add(hb)
	c.opened++
	c.mu.Unlock()

	switch {
	case m.stream != nil:
		c.s.dispatch(st)
	case ended:
		st.fail(status.New(codes.Internal, "cardinality violation: received no request message from non-client-streaming RPC"))
	}
	return nil
}

// lookup finds the method of path, or the status that answers a call to a
// path without one.
func (s *Server) lookup(path string) (*method, *status.Status) {
	if m, ok := s.methods[path]; ok {
		return m, nil
	}
	name, ok := strings.CutPrefix(path, "/")
	i := strings.LastIndexByte(name, '/')
	if !ok || i < 0 {
		return nil, status.Newf(codes.Unimplemented, "malformed method name: %q", path)
	}
	service, meth := name[:i], name[i+1:]
	for _, m := range s.methods {
		if m.service == service {
			return nil, status.Newf(codes.Unimplemented, "unknown method %v for service %v", meth, service)
		}
	}
	return nil, status.Newf(codes.Unimplemented, "unknown service %v", service)
}

// earlyAbort answers a call that does not start with stat in a
// trailers-only response, and resets the stream when the client has more
// to send.
func (c *conn) earlyAbort(id uint32, subtype string, stat *status.Status, httpStatus int, ended bool) {
	c.wmu.Lock()
	if c.werr == nil {
		c.hbuf.Reset()
		c.field(":status", strconv.Itoa(httpStatus))
		c.field("content-type", contentType(subtype))
		c.statusFields(stat)
		c.writeBlock(id, c.hbuf.Bytes(), true)
		if !ended {
			c.fr.WriteRSTStream(id, http2.ErrCodeNo)
		}
		c.dirty = true
	}
	c.wmu.Unlock()
}

// onData takes a DATA frame's messages.
func (c *conn) onData(f *http2.DataFrame) error {
	n := f.Length
	c.recvUnacked += n
	if c.recvUnacked > c.s.opts.InitialConnWindowSize {
		return connError{http2.ErrCodeFlowControl, "the client sent more than the connection's window"}
	}
	if c.recvUnacked >= c.s.opts.InitialConnWindowSize/4 {
		c.writeWindowUpdate(0, c.recvUnacked)
		c.recvUnacked = 0
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	maxID := c.maxID
	c.mu.Unlock()
	if st == nil {
		if f.StreamID > maxID || f.StreamID%2 == 0 {
			return protocolError("DATA on stream %d, which the client never opened", f.StreamID)
		}
		return nil // a stream that ended; its bytes were credited above
	}
	if st.clientDone.Load() {
		c.resetAndForget(st, http2.ErrCodeStreamClosed)
		return nil
	}
	if st.received += int64(len(f.Data())); st.contentLength >= 0 && st.received > st.contentLength {
		c.resetAndForget(st, http2.ErrCodeProtocol) // more than its content-length
		return nil
	}
	if st.inflight.Add(int64(n)) > int64(c.s.opts.InitialWindowSize) {
		c.resetAndForget(st, http2.ErrCodeFlowControl)
		return nil
	}
	data := f.Data()
	if pad := int64(n) - int64(len(data)); pad > 0 {
		st.credit(pad)
	}
	if st.m.stream == nil || st.queueRoom() {
		// A unary request is held whole until its end, its size capped by
		// MaxRecvMsgSize, and so is a streamed message until complete: credit
		// their bytes as they come, unless the call has a window's worth
		// of messages it has not read yet (then RecvMsg credits them).
		st.credit(int64(len(data)))
	} else {
		st.qmu.Lock()
		st.deferred += int64(len(data))
		st.qmu.Unlock()
	}
	if err := st.take(data); err != nil {
		st.fail(err)
		return nil
	}
	if held := st.hdrBytes + int64(len(st.msg)); held != st.pendingSeen && !f.StreamEnded() {
		if err := c.hold(st, held); err != nil {
			st.fail(err)
			return nil
		}
	}
	if f.StreamEnded() {
		c.endOfStream(st)
	}
	return nil
}

// hold counts n bytes for st in the server's pending bytes (its header
// list's and its unfinished message's; 0 once its request is whole), or
// answers why it cannot: the server would hold more than MaxPendingBytes
// and st's connection more than its share.
func (c *conn) hold(st *stream, n int64) *status.Status {
	st.pendingSeen = n
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[st.id] != st {
		return nil // ended meanwhile: forget released what it held
	}
	d := n - st.pending
	if d > 0 && !c.s.admit(c.s.pending.Load()+d, c.pending+d, c.s.opts.MaxPendingBytes) {
		c.s.refused[RefusedMaxPendingBytes].Add(1)
		return status.Newf(codes.ResourceExhausted, "grpc: the server holds as many bytes of unfinished requests as it takes (%d); try again", c.s.opts.MaxPendingBytes)
	}
	st.pending = n
	c.pending += d
	c.s.pending.Add(d)
	return nil
}

// release takes st, which leaves c.streams, out of the server's open
// calls and pending bytes; it requires c.mu held.
func (c *conn) release(st *stream) {
	c.s.open.Add(-1)
	c.s.pending.Add(-st.pending)
	c.pending -= st.pending
	st.pending = 0
}

// minMsgRoom is the least room a message being received starts with.
const minMsgRoom = 512

// take splits data into the stream's messages; it returns the status that
// fails the call when a message is too large.
func (st *stream) take(data []byte) *status.Status {
	for len(data) > 0 {
		if st.nhdr < len(st.hdr) {
			k := copy(st.hdr[st.nhdr:], data)
			st.nhdr += k
			data = data[k:]
			if st.nhdr < len(st.hdr) {
				return nil
			}
			size := binary.BigEndian.Uint32(st.hdr[1:])
			if limit := st.c.s.opts.MaxRecvMsgSize; int64(size) > int64(limit) {
				return status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, limit)
			}
			// Room for the bytes that came, not for the length the prefix
			// declares: five bytes declaring 4 MiB, on every stream of
			// many connections, would otherwise hold gigabytes of heap
			// the client never sent (and grpc-go does not allocate ahead
			// either).
			st.want = int(size)
			st.msg = make([]byte, 0, min(st.want, max(len(data), minMsgRoom)))
		} else {
			k := min(len(data), st.want-len(st.msg))
			if len(st.msg)+k > cap(st.msg) {
				grown := make([]byte, len(st.msg), min(st.want, max(2*cap(st.msg), len(st.msg)+k)))
				copy(grown, st.msg)
				st.msg = grown
			}
			st.msg = append(st.msg, data[:k]...)
			data = data[k:]
		}
		if len(st.msg) == st.want {
			if err := st.deliver(queued{data: st.msg, zipped: st.hdr[0]&1 == 1}); err != nil {
				return err
			}
			st.msg, st.nhdr = nil, 0
		}
	}
	return nil
}

// deliver hands a complete message to the call.
func (st *stream) deliver(q queued) *status.Status {
	if q.zipped && st.comp == nil {
		return status.New(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
	}
	if st.m.stream != nil {
		st.qmu.Lock()
		st.queue = append(st.queue, q)
		st.queued += int64(len(q.data)) + 5
		st.qcond.Broadcast()
		st.qmu.Unlock()
		return nil
	}
	st.nreq++
	if st.nreq > 1 {
		return status.New(codes.Internal, "cardinality violation: received multiple request messages for non-client-streaming RPC")
	}
	st.req, st.reqZipped = q.data, q.zipped
	return nil
}

// endOfStream handles the client's END_STREAM: a unary call runs, a
// streaming one reads io.EOF after its messages.
func (c *conn) endOfStream(st *stream) {
	if st.clientDone.Swap(true) {
		return
	}
	if st.contentLength >= 0 && st.received != st.contentLength {
		c.resetAndForget(st, http2.ErrCodeProtocol) // less than its content-length
		return
	}
	if st.pendingSeen != 0 {
		c.hold(st, 0) // the request is whole: nothing of it is pending
	}
	if st.nhdr > 0 {
		st.fail(status.New(codes.Internal, io.ErrUnexpectedEOF.Error()))
		return
	}
	if st.m.stream != nil {
		st.qmu.Lock()
		st.qend = true
		st.qcond.Broadcast()
		st.qmu.Unlock()
		return
	}
	if st.nreq == 0 {
		st.fail(status.New(codes.Internal, "cardinality violation: received no request message from non-client-streaming RPC"))
		return
	}
	if c.s.opts.Inline {
		st.inline = true
		st.run()
		return
	}
	if st.m.batch != nil {
		c.holdForBatch(st)
		return
	}
	st.counted = true
	c.running.Add(1)
	c.s.dispatch(st)
}

// credit gives n received bytes of the stream's window back to the client
// once a quarter of the window is owed.
func (st *stream) credit(n int64) {
	if n <= 0 {
		return
	}
	owed := st.owed.Add(n)
	if w := int64(st.c.s.opts.InitialWindowSize); owed >= w/4 && st.owed.CompareAndSwap(owed, 0) {
		st.inflight.Add(-owed)
		st.c.writeWindowUpdate(st.id, uint32(owed))
	}
}

// run runs the call and answers it.
func (st *stream) run() {
	m := st.m
	if m.stream != nil {
		st.runStream()
		return
	}
	st.done = st.doneBuf[:0]
	reply, err := m.unary(m.srv, st.ctx, st.decode, st.c.s.unary)
	if err != nil {
		st.release()
		st.finish(statusOf(err), nil)
		return
	}
	msg, err := st.encode(reply)
	st.release()
	if err != nil {
		st.finish(status.Newf(codes.Internal, "grpc: error while marshaling: %v", err), nil)
		return
	}
	st.finish(nil, msg)
}

func (st *stream) runStream() {
	d := st.m.stream
	ss := &serverStream{st: st}
	var err error
	if i := st.c.s.stream; i != nil {
		err = i(st.m.srv, ss, &grpc.StreamServerInfo{FullMethod: st.m.name, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams}, d.Handler)
	} else {
		err = d.Handler(st.m.srv, ss)
	}
	st.finish(statusOf(err), nil)
}

// decode reads the unary request into v.
func (st *stream) decode(v any) error {
	return st.unmarshal(queued{data: st.req, zipped: st.reqZipped}, v)
}

func (st *stream) unmarshal(q queued, v any) error {
	data := q.data
	if q.zipped {
		r, err := st.comp.Decompress(bytes.NewReader(data))
		if err != nil {
			return status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
		}
		limit := int64(st.c.s.opts.MaxRecvMsgSize)
		if data, err = io.ReadAll(io.LimitReader(r, limit+1)); err != nil {
			return status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
		}
		if int64(len(data)) > limit {
			return status.Errorf(codes.ResourceExhausted, "grpc: received message after decompression larger than max %d", limit)
		}
	}
	var err error
	if rc := st.c.s.releasing; rc != nil && st.m.stream == nil {
		var r Releaser
		if r, err = rc.UnmarshalReleasing(data, v); r != nil {
			st.done = append(st.done, r)
		}
	} else {
		err = st.c.s.opts.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, v)
	}
	if err != nil {
		if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
			return err // the codec's own status
		}
		return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
	}
	return nil
}

// encode returns v's message with its gRPC prefix, in a buffer from
// getBuffer.
func (st *stream) encode(v any) ([]byte, error) {
	var out []byte
	if ac := st.c.s.appending; ac != nil {
		// The message written after its prefix: no copy.
		var err error
		buf := getBuffer(5)
		if out, err = ac.AppendMarshal(buf, v); err != nil {
			putBuffer(buf)
			return nil, err
		}
	} else {
		data, err := st.c.s.opts.Codec.Marshal(v)
		if err != nil {
			return nil, err
		}
		out = getBuffer(5 + data.Len())
		data.CopyTo(out[5:])
		data.Free()
	}
	if n := len(out) - 5; uint64(n) > math.MaxUint32-5 {
		putBuffer(out)
		return nil, fmt.Errorf("a message of %d bytes", n)
	}
	out[0] = 0 // not compressed
	if st.comp != nil {
		var b bytes.Buffer
		b.Write(make([]byte, 5))
		w, err := st.comp.Compress(&b)
		if err == nil {
			_, err = w.Write(out[5:])
		}
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			putBuffer(out)
			return nil, fmt.Errorf("compress: %w", err)
		}
		putBuffer(out)
		out = b.Bytes()
		out[0] = 1
	}
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-5))
	return out, nil
}

// finish sends msg (when not nil: a message with its prefix, and the
// status OK) or stat, with the headers when they have not gone out, and
// ends the stream. It takes msg, from getBuffer, and releases it.
func (st *stream) finish(stat *status.Status, msg []byte) {
	c := st.c
	handedOff := false
	if msg != nil {
		defer func() {
			if !handedOff {
				putBuffer(msg)
			}
		}()
	}
	// others: calls of this connection still running will write their
	// answers soon, and the last flushes them all.
	others := false
	if st.counted {
		st.counted = false
		others = c.running.Add(-1) > 0
	}
	c.wmu.Lock()
	if st.ended || c.broken() {
		c.wmu.Unlock()
		st.cancel()
		c.forget(st)
		return
	}
	if st.ctx.Err() == context.DeadlineExceeded {
		// As grpc-go: a call past its deadline is reset, not answered.
		st.resetLocked(http2.ErrCodeCancel)
		c.unlockWrite()
		c.forget(st)
		return
	}
	if st.inline && msg != nil && (int64(len(msg)) > st.sendWindow || int64(len(msg)) > c.sendWindow) {
		// Only the reader goroutine, this one, can see the windows open:
		// wait for them on another.
		st.inline = false
		handedOff = true
		c.wmu.Unlock()
		go st.finish(stat, msg)
		return
	}
	if msg != nil {
		if err := st.writeMsgLocked(msg); err != nil {
			c.wmu.Unlock()
			st.cancel()
			c.forget(st)
			return
		}
	}
	st.writeTrailersLocked(stat, st.trailer)
	st.ended = true
	c.sentData = true
	switch {
	case st.inline:
		// The reader flushes before it next waits for the client.
		c.dirty = true
		c.wmu.Unlock()
	case st.batched:
		// batch.run flushes the batch's answers together, and only then
		// forgets its streams: a draining connection closes when its last
		// stream is forgotten.
		c.dirty = true
		c.wmu.Unlock()
		st.cancel()
		return
	case others:
		// A timer flushes anyway if the others take long.
		c.dirty = true
		c.flushSoonLocked()
		c.wmu.Unlock()
	default:
		c.unlockWrite()
	}
	st.cancel()
	c.forget(st)
}

// fail answers the call with stat from the reader goroutine, when what
// the client sent fails it.
func (st *stream) fail(stat *status.Status) {
	st.wakeWith(stat.Err())
	c := st.c
	c.wmu.Lock()
	if st.ended || c.broken() {
		c.wmu.Unlock()
		c.forget(st)
		return
	}
	st.writeTrailersLocked(stat, nil)
	st.abortLocked()
	c.dirty = true
	c.wmu.Unlock()
	c.forget(st)
}

// writeTrailersLocked ends the stream with stat (nil: OK) and the
// metadata md in trailers, or in a trailers-only answer when the headers
// have not gone out, and resets it when the client has more to send;
// requires wmu held.
func (st *stream) writeTrailersLocked(stat *status.Status, md metadata.MD) {
	c := st.c
	c.hbuf.Reset()
	if !st.headerSent {
		st.headerSent = true
		c.field(":status", "200")
		c.field("content-type", contentType(st.subtype))
	}
	if stat == nil {
		c.field("grpc-status", "0")
	} else {
		c.statusFields(stat)
	}
	c.mdFields(md)
	c.writeBlock(st.id, c.hbuf.Bytes(), true)
	if !st.clientDone.Load() {
		c.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
	}
}

// writeHeaderLocked sends the response headers; requires wmu held.
func (st *stream) writeHeaderLocked() {
	c := st.c
	c.hbuf.Reset()
	c.field(":status", "200")
	c.field("content-type", contentType(st.subtype))
	if st.comp != nil {
		c.field("grpc-encoding", st.comp.Name())
	}
	c.mdFields(st.header)
	c.writeBlock(st.id, c.hbuf.Bytes(), false)
	st.headerSent = true
}

// writeMsgLocked sends msg (with its prefix) within the flow-control
// windows, waiting for them to open; requires wmu held, which it may
// release while it waits.
func (st *stream) writeMsgLocked(msg []byte) error {
	c := st.c
	if !st.headerSent {
		st.writeHeaderLocked()
	}
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for len(msg) > 0 {
		for st.sendWindow <= 0 || c.sendWindow <= 0 {
			if st.ended || c.broken() {
				return status.Error(codes.Canceled, "the stream ended")
			}
			if err := st.ctx.Err(); err != nil {
				return status.FromContextError(err).Err()
			}
			if stop == nil {
				// The window may never open: wake up when the call ends.
				stop = context.AfterFunc(st.ctx, func() {
					c.wmu.Lock()
					c.wcond.Broadcast()
					c.wmu.Unlock()
				})
			}
			// Let the frames written so far go while waiting.
			if err := c.flushLocked(); err != nil {
				return err
			}
			c.wcond.Wait()
		}
		if st.ended || c.broken() {
			return status.Error(codes.Canceled, "the stream ended")
		}
		n := int(min(int64(len(msg)), st.sendWindow, c.sendWindow, int64(c.peerFrame)))
		c.fr.WriteData(st.id, false, msg[:n])
		c.dirty = true
		c.sentData = true // a client may ping as data arrives (grpc-go's BDP pings)
		st.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		msg = msg[n:]
	}
	return nil
}

// resetLocked resets the stream with code and aborts it; requires wmu
// held. The caller forgets it after releasing wmu.
func (st *stream) resetLocked(code http2.ErrCode) {
	if !st.ended && !st.c.broken() {
		st.c.fr.WriteRSTStream(st.id, code)
		st.c.dirty = true
	}
	st.abortLocked()
}

// resetAndForget resets the stream with code and forgets it.
func (c *conn) resetAndForget(st *stream, code http2.ErrCode) {
	c.wmu.Lock()
	st.resetLocked(code)
	c.wmu.Unlock()
	c.forget(st)
}

// abortLocked ends the stream without a word more: its context is
// cancelled and a RecvMsg or a wait for flow control returns. Requires
// wmu held.
func (st *stream) abortLocked() {
	st.ended = true
	if st.cancel != nil {
		st.cancel()
	}
	st.c.wcond.Broadcast()
	st.wakeWith(status.Error(codes.Canceled, "the stream was reset"))
}

// wake wakes a RecvMsg when the call's context ends.
func (st *stream) wake() {
	st.wakeWith(status.FromContextError(st.ctx.Err()).Err())
}

func (st *stream) wakeWith(err error) {
	if st.qcond == nil {
		return
	}
	st.qmu.Lock()
	if st.qerr == nil {
		st.qerr = err
	}
	st.qcond.Broadcast()
	st.qmu.Unlock()
}

// Method, SetHeader, SendHeader and SetTrailer make the stream a
// grpc.ServerTransportStream, for grpc.Method, grpc.SetHeader and the
// rest.
func (st *stream) Method() string { return st.m.name }

func (st *stream) SetHeader(md metadata.MD) error {
	st.c.wmu.Lock()
	defer st.c.wmu.Unlock()
	if st.headerSent {
		return status.Error(codes.Internal, "h2grpc: the headers were sent already")
	}
	st.header = metadata.Join(st.header, md)
	return nil
}

func (st *stream) SendHeader(md metadata.MD) error {
	c := st.c
	c.wmu.Lock()
	if st.headerSent || st.ended || c.broken() {
		c.wmu.Unlock()
		return status.Error(codes.Internal, "h2grpc: the headers were sent already, or the stream ended")
	}
	st.header = metadata.Join(st.header, md)
	st.writeHeaderLocked()
	c.sentData = true
	c.unlockWrite()
	return nil
}

func (st *stream) SetTrailer(md metadata.MD) error {
	st.c.wmu.Lock()
	defer st.c.wmu.Unlock()
	if st.ended {
		return status.Error(codes.Internal, "h2grpc: the stream ended")
	}
	st.trailer = metadata.Join(st.trailer, md)
	return nil
}

var _ grpc.ServerTransportStream = (*stream)(nil)
