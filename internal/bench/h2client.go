package bench

// A minimal HTTP/2 client for unary gRPC calls with pre-encoded messages.
// `sluice bench` shares the machine with the server it measures, so the
// load generator must be cheap: on a 2-core machine grpc-go's client costs
// 16-20 µs of CPU per call, this one 4.4-5.7 µs (the cpu-ns/op of
// BenchmarkGRPCCall and BenchmarkH2Call). It speaks h2c with prior
// knowledge (no TLS), sends no compression, deadlines or metadata, and
// knows nothing about protobuf: callers hand it serialized messages.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// h2RecvWindow is the receive window dialH2 asks for, per stream and
	// for the connection: large enough that responses never wait for a
	// WINDOW_UPDATE.
	h2RecvWindow = 1 << 30
	// h2MaxMessage bounds the messages call sends and accepts, in bytes.
	h2MaxMessage = 16 << 20
	// h2MaxStreamID is the largest stream id HTTP/2 allows.
	h2MaxStreamID = 1<<31 - 1
	// h2DefaultWindow and h2DefaultFrame are the HTTP/2 defaults that hold
	// until the server's SETTINGS say otherwise.
	h2DefaultWindow = 65535
	h2DefaultFrame  = 16384
	h2BufferSize    = 32 << 10
	// h2TableSize is the HPACK dynamic table size for response headers,
	// the default since we do not announce one.
	h2TableSize = 4096
	// h2MaxHeaderString bounds a response header's name or value, in bytes.
	h2MaxHeaderString = 1 << 20
)

var (
	errH2Closed    = errors.New("h2: connection closed")
	errH2GoAway    = errors.New("h2: server sent GOAWAY")
	errH2StreamIDs = errors.New("h2: connection has used all its stream ids, dial a new one")
)

// h2Past is a deadline that has passed, to interrupt blocked I/O.
var h2Past = time.Unix(1, 0)

// h2Conn is one HTTP/2 connection carrying concurrent unary gRPC calls.
// Its methods are safe for simultaneous use by multiple goroutines; the
// zero value is not usable, get one from dialH2.
type h2Conn struct {
	nc         net.Conn
	authority  string
	recvWindow uint32 // our receive window, per stream and for the connection
	readerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error

	wmu   sync.Mutex    // protects the fields below and writes through fr
	bw    *bufio.Writer // buffers frames until a flush
	dirty bool          // bw holds frames to flush
	fr    *http2.Framer // writes under wmu; reads only on the reader goroutine
	// HPACK state of the requests' header blocks; see writeHeaders.
	hmethod   string // the method the blocks below are for
	hplain    []byte // literals without indexing: changes no state
	hprime    []byte // literals with incremental indexing into the table
	hsteady   []byte // six indexed fields, once the table holds hprime's
	hprimed   bool   // the server's table holds hprime's fields
	hreset    bool   // the next block starts with a table size update
	peerTable uint32 // the server's SETTINGS_HEADER_TABLE_SIZE

	mu         sync.Mutex // protects the fields below and h2Stream.sendWindow
	cond       *sync.Cond // on mu; broadcast when windows grow, slots free or err is set
	err        error      // why no new streams may start
	writeErr   error      // the first write error, which broke the connection
	closing    bool       // Close was called
	streams    map[uint32]*h2Stream
	nextID     uint32 // the id of the next stream, odd
	active     uint32 // streams counted against maxStreams, including reserved slots
	maxStreams uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	sendWindow int64  // the server's receive window for the connection
	peerWindow int64  // the server's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   int    // the server's SETTINGS_MAX_FRAME_SIZE

	// Owned by the reader goroutine.
	recvUnacked uint32         // connection-level bytes received and not yet re-credited
	hdec        *hpack.Decoder // emits into hfields
	hfields     h2Fields       // of the header block being read
	hstream     uint32         // the stream of that block
	hend        bool           // whether that block ends its stream
}

// h2Stream is the state of one call. The caller owns it until it is put
// in h2Conn.streams; from then on the fields marked "reader" belong to
// the reader goroutine until it signals done, and sendWindow is protected
// by h2Conn.mu. A stream whose caller gave up is never reused, so the
// reader may keep writing to it after it left the map.
type h2Stream struct {
	id    uint32
	out   []byte        // the 5-byte gRPC prefix and the request message
	taken int           // bytes of out that got flow control quota
	done  chan struct{} // capacity 1; receives once when the reader is done

	sendWindow int64 // protected by h2Conn.mu

	// reader
	gotHeaders  bool
	hdr         [5]byte // the response message's gRPC prefix
	nhdr        int     // bytes of hdr received
	msg         []byte  // the response message, allocated to its full capacity
	recvUnacked uint32  // stream-level bytes received and not yet re-credited
	resp        []byte  // the result, valid after done
	err         error
}

// h2Streams recycles the state of finished calls; measured, it saves four
// allocations and a sixth of the client's CPU time per call.
var h2Streams = sync.Pool{New: func() any { return &h2Stream{done: make(chan struct{}, 1)} }}

// dialH2 connects (plain TCP, h2c prior knowledge, no TLS) to addr and
// does the HTTP/2 preface and SETTINGS exchange.
func dialH2(ctx context.Context, addr string) (*h2Conn, error) {
	return dialH2Window(ctx, addr, h2RecvWindow)
}

// dialH2Window is dialH2 with a receive window of window bytes, in
// [65535, 2^31-1]; tests use small windows to exercise re-crediting.
func dialH2Window(ctx context.Context, addr string, window uint32) (*h2Conn, error) {
	if window < h2DefaultWindow || window > h2MaxStreamID {
		return nil, fmt.Errorf("h2: invalid receive window %d, must be in [65535, 2^31-1]", window)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h2Conn{
		nc:         nc,
		authority:  addr,
		recvWindow: window,
		readerDone: make(chan struct{}),
		bw:         bufio.NewWriterSize(nc, h2BufferSize),
		streams:    make(map[uint32]*h2Stream),
		nextID:     1,
		maxStreams: ^uint32(0),
		sendWindow: h2DefaultWindow,
		peerWindow: h2DefaultWindow,
		maxFrame:   h2DefaultFrame,
		peerTable:  h2TableSize,
	}
	c.cond = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, h2BufferSize))
	c.fr.SetReuseFrames()
	c.hdec = hpack.NewDecoder(h2TableSize, c.hfields.emit)
	c.hdec.SetMaxStringLength(h2MaxHeaderString)

	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(h2Past) })
	err = c.handshake()
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("h2: handshake with %s: %w", addr, err)
	}
	go c.readLoop()
	return c, nil
}

// handshake sends the client preface and our SETTINGS and reads the
// server's SETTINGS, which must come first.
func (c *h2Conn) handshake() error {
	c.bw.WriteString(http2.ClientPreface)
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.recvWindow},
	)
	if c.recvWindow > h2DefaultWindow {
		c.fr.WriteWindowUpdate(0, c.recvWindow-h2DefaultWindow)
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("got %v first, want SETTINGS", f.Header())
	}
	if err := c.handleSettings(sf); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeErr
}

// Close closes the connection; pending and later calls fail. It waits for
// the reader goroutine to exit.
func (c *h2Conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.closeErr = c.nc.Close()
	})
	<-c.readerDone
	return c.closeErr
}

// call sends one unary gRPC call to method (e.g.
// "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit") with msg,
// a serialized protobuf message without the gRPC prefix, and returns the
// response message without its prefix. The returned slice is freshly
// allocated and belongs to the caller; call does not keep msg.
//
// It returns a gRPC status error (status.Code works on it) when the
// server answers with a grpc-status other than 0, ctx.Err() when ctx is
// done first, and an error when the stream is reset or the connection
// fails.
func (c *h2Conn) call(ctx context.Context, method string, msg []byte) ([]byte, error) {
	if len(msg) > h2MaxMessage {
		return nil, fmt.Errorf("h2: request message of %d bytes is larger than %d", len(msg), h2MaxMessage)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := h2Waiter{ctx: ctx}
	defer w.release()
	if err := c.reserveSlot(&w); err != nil {
		return nil, err
	}
	st := h2Streams.Get().(*h2Stream)
	st.reset(msg)
	if err := c.send(st, method, &w); err != nil {
		// The stream never got an id; st is still ours.
		h2Streams.Put(st)
		return nil, err
	}
	select {
	case <-st.done:
	case <-ctx.Done():
		if c.abandon(st) {
			return nil, ctx.Err()
		}
		<-st.done // the reader finished it first
	}
	resp, err := st.resp, st.err
	st.resp, st.err = nil, nil
	if cap(st.out) > h2BufferSize {
		st.out = nil
	}
	h2Streams.Put(st)
	return resp, err
}

// reset readies a pooled stream for a call with msg.
func (st *h2Stream) reset(msg []byte) {
	st.id = 0
	st.taken = 0
	st.out = append(st.out[:0], 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(st.out[1:], uint32(len(msg)))
	st.out = append(st.out, msg...)
	st.gotHeaders = false
	st.nhdr = 0
	st.msg = nil
	st.recvUnacked = 0
}

// h2Waiter lets a call that waits on h2Conn.cond give up when its context
// is done. It registers with the context only when it first has to wait.
type h2Waiter struct {
	ctx  context.Context
	stop func() bool
}

func (w *h2Waiter) release() {
	if w.stop != nil {
		w.stop()
	}
}

// wait waits for a broadcast on c.cond or the end of w's context and
// returns the context's error if it ended; requires c.mu held.
func (c *h2Conn) wait(w *h2Waiter) error {
	if w.stop == nil && w.ctx.Done() != nil {
		w.stop = context.AfterFunc(w.ctx, func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	c.cond.Wait()
	return w.ctx.Err()
}

// reserveSlot waits until the server's MAX_CONCURRENT_STREAMS allows one
// more stream and counts it as active.
func (c *h2Conn) reserveSlot(w *h2Waiter) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && c.active >= c.maxStreams {
		if err := c.wait(w); err != nil {
			return err
		}
	}
	if c.err != nil {
		return c.err
	}
	c.active++
	return nil
}

// releaseSlot gives back a stream's slot; requires c.mu held.
func (c *h2Conn) releaseSlot() {
	c.active--
	c.cond.Broadcast()
}

// send opens st's stream and writes its HEADERS and DATA, waiting for the
// server's flow control windows where needed. An error means the stream
// was never opened; once it is, the outcome, including write errors and
// a done context, is left for the caller to collect from st.done.
func (c *h2Conn) send(st *h2Stream, method string, w *h2Waiter) error {
	c.lockWrite()
	c.mu.Lock()
	if c.err == nil && c.nextID > h2MaxStreamID {
		c.err = errH2StreamIDs
	}
	if c.err != nil {
		err := c.err
		c.releaseSlot()
		c.mu.Unlock()
		c.unlockWrite()
		return err
	}
	st.id = c.nextID
	c.nextID += 2
	st.sendWindow = c.peerWindow
	c.streams[st.id] = st
	n, maxFrame := c.takeQuotaLocked(st)
	c.mu.Unlock()

	c.writeHeaders(st.id, method, maxFrame)
	data := st.out
	c.writeData(st.id, data[:n], n == len(data), maxFrame)
	c.unlockWrite()
	data = data[n:]

	// Only a message larger than the server's windows gets here.
	for len(data) > 0 {
		c.mu.Lock()
		for {
			if c.streams[st.id] != st {
				// The reader finished the stream early; tell the server we
				// will send no more.
				c.mu.Unlock()
				c.resetStream(st.id)
				return nil
			}
			if n, maxFrame = c.takeQuotaLocked(st); n > 0 {
				break
			}
			if c.wait(w) != nil {
				c.mu.Unlock()
				return nil // the caller sees the done context
			}
		}
		c.mu.Unlock()
		c.lockWrite()
		c.writeData(st.id, data[:n], n == len(data), maxFrame)
		c.unlockWrite()
		data = data[n:]
	}
	return nil
}

// takeQuotaLocked takes as much of the server's send windows as the rest
// of st.out needs, returns it with the frame size to use, and counts it in
// st.taken; requires c.mu held and st in c.streams.
func (c *h2Conn) takeQuotaLocked(st *h2Stream) (n, maxFrame int) {
	n = int(min(int64(len(st.out)-st.taken), c.sendWindow, st.sendWindow))
	if n <= 0 {
		return 0, c.maxFrame
	}
	c.sendWindow -= int64(n)
	st.sendWindow -= int64(n)
	st.taken += n
	return n, c.maxFrame
}

// abandon removes st after its caller gave up and resets its stream. It
// returns false when the reader had finished st already; the result is
// then in st.done.
func (c *h2Conn) abandon(st *h2Stream) bool {
	c.mu.Lock()
	if c.streams[st.id] != st {
		c.mu.Unlock()
		return false
	}
	delete(c.streams, st.id)
	c.releaseSlot()
	c.mu.Unlock()
	c.resetStream(st.id)
	return true
}

// resetStream sends RST_STREAM(CANCEL) for id.
func (c *h2Conn) resetStream(id uint32) {
	c.lockWrite()
	c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	c.unlockWrite()
}

// lockWrite acquires wmu.
func (c *h2Conn) lockWrite() { c.wmu.Lock() }

// unlockWrite releases wmu and sees the frames written under it flushed.
// It yields before flushing so that other goroutines ready to write (the
// callers the reader just woke) add their frames to the same write
// system call; whoever locks first after that flushes for all. Measured
// with 16 callers, this saves a sixth of the client's CPU time per call
// over flushing every time. A write error breaks the connection: the
// reader then fails every stream. Requires wmu held.
func (c *h2Conn) unlockWrite() {
	c.dirty = true
	c.wmu.Unlock()
	runtime.Gosched()
	c.wmu.Lock()
	var err error
	if c.dirty {
		err = c.bw.Flush()
		c.dirty = false
	}
	c.wmu.Unlock()
	if err != nil {
		c.breakConn(err)
	}
}

// breakConn closes the network connection after a write error, which
// makes the reader fail all streams with it.
func (c *h2Conn) breakConn(err error) {
	c.mu.Lock()
	if c.writeErr == nil {
		c.writeErr = err
	}
	c.mu.Unlock()
	c.nc.Close()
}

// writeHeaders writes the request's header block for stream id; requires
// wmu held. Write errors stick in bw and surface at the flush.
//
// The first block for a method empties our HPACK dynamic table (a size
// update to 0, then to the size used) and adds the method's :path,
// :authority, content-type and te to it; every later block is then six
// one-byte indexed fields, as real gRPC clients send them, which costs the
// server little to decode. When the server's table is too small for them
// the blocks are literals without indexing, which change no state.
func (c *h2Conn) writeHeaders(id uint32, method string, maxFrame int) {
	block := c.headerBlock(method)
	first := block[:min(len(block), maxFrame)]
	block = block[len(first):]
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(block) == 0})
	for len(block) > 0 {
		frag := block[:min(len(block), maxFrame)]
		block = block[len(frag):]
		c.fr.WriteContinuation(id, len(block) == 0, frag)
	}
}

// headerBlock is the next request's header block for method (see
// writeHeaders); requires wmu held.
func (c *h2Conn) headerBlock(method string) []byte {
	if method != c.hmethod || c.hplain == nil {
		c.hmethod = method
		c.hplain = h2AppendHeaderBlock(c.hplain[:0], method, c.authority, false)
		c.hprime = h2AppendHeaderBlock(c.hprime[:0], method, c.authority, true)
		c.hsteady = h2AppendIndexedBlock(c.hsteady[:0])
		c.hprimed, c.hreset = false, true
	}
	block := c.hplain
	switch {
	case c.hreset:
		size := min(c.peerTable, h2TableSize)
		need := uint32(len(method)+len(c.authority)) + h2IndexedOverhead
		pre := h2AppendInt([]byte{0x20}, 0x20, 5, uint64(size)) // RFC 7541 6.3
		if size >= need {
			block = append(pre, c.hprime...)
			c.hprimed = true
		} else {
			block = append([]byte{0x20}, c.hplain...)
			c.hprimed = false
		}
		c.hreset = false
	case c.hprimed:
		block = c.hsteady
	}
	return block
}

// h2IndexedOverhead is the table space hprime's four entries take beside
// the method and authority: each entry's name and value plus 32 (RFC 7541
// 4.1): ":path", ":authority", "content-type: application/grpc", "te:
// trailers".
const h2IndexedOverhead = (5 + 32) + (10 + 32) + (12 + 16 + 32) + (2 + 8 + 32)

// Static table indices, RFC 7541 appendix A.
const (
	h2StaticAuthority   = 1
	h2StaticMethodPost  = 3
	h2StaticPath        = 4
	h2StaticSchemeHTTP  = 6
	h2StaticContentType = 31
)

// h2AppendHeaderBlock appends the HPACK encoding of a gRPC request's
// headers for method to b: literals with incremental indexing when index
// is true (RFC 7541 6.2.1; entries go in as :path, :authority,
// content-type, te), else literals without indexing (6.2.2), which change
// no HPACK state on either side and so are the same for every stream.
func h2AppendHeaderBlock(b []byte, method, authority string, index bool) []byte {
	b = h2AppendInt(b, 0x80, 7, h2StaticMethodPost) // indexed field
	b = h2AppendInt(b, 0x80, 7, h2StaticSchemeHTTP)
	b = h2AppendLiteral(b, h2StaticPath, "", method, index)
	b = h2AppendLiteral(b, h2StaticAuthority, "", authority, index)
	b = h2AppendLiteral(b, h2StaticContentType, "", "application/grpc", index)
	return h2AppendLiteral(b, 0, "te", "trailers", index)
}

// h2AppendIndexedBlock appends the block that names the entries
// h2AppendHeaderBlock(…, true) added: the newest entry is index 62.
func h2AppendIndexedBlock(b []byte) []byte {
	b = h2AppendInt(b, 0x80, 7, h2StaticMethodPost)
	b = h2AppendInt(b, 0x80, 7, h2StaticSchemeHTTP)
	b = h2AppendInt(b, 0x80, 7, 65)    // :path
	b = h2AppendInt(b, 0x80, 7, 64)    // :authority
	b = h2AppendInt(b, 0x80, 7, 63)    // content-type
	return h2AppendInt(b, 0x80, 7, 62) // te
}

// h2AppendLiteral appends a literal header field (RFC 7541 6.2.1 with
// incremental indexing when index is true, else 6.2.2 without indexing)
// whose name is the static table entry nameIndex, or name when nameIndex
// is 0.
func h2AppendLiteral(b []byte, nameIndex uint64, name, value string, index bool) []byte {
	if index {
		b = h2AppendInt(b, 0x40, 6, nameIndex)
	} else {
		b = h2AppendInt(b, 0, 4, nameIndex)
	}
	if nameIndex == 0 {
		b = h2AppendInt(b, 0, 7, uint64(len(name))) // no Huffman coding
		b = append(b, name...)
	}
	b = h2AppendInt(b, 0, 7, uint64(len(value)))
	return append(b, value...)
}

// h2AppendInt appends v as an HPACK integer with an n-bit prefix (RFC 7541
// 5.1) after the bits in first.
func h2AppendInt(b []byte, first byte, n uint, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(limit))
	for v -= limit; v >= 0x80; v >>= 7 {
		b = append(b, byte(v)|0x80)
	}
	return append(b, byte(v))
}

// writeData writes data for stream id in frames of at most maxFrame bytes,
// the last with END_STREAM if end; requires wmu held.
func (c *h2Conn) writeData(id uint32, data []byte, end bool, maxFrame int) {
	for len(data) > 0 {
		k := min(len(data), maxFrame)
		c.fr.WriteData(id, end && k == len(data), data[:k])
		data = data[k:]
	}
}

// readLoop reads frames until the connection fails or is closed, then
// fails every stream still open.
func (c *h2Conn) readLoop() {
	defer close(c.readerDone)
	for {
		// Every error is fatal, even the Framer's stream errors: one of
		// them drops a HEADERS frame, whose loss would leave our HPACK
		// state out of step with the server's.
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.handle(f)
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// fail closes the connection after err and fails all its streams.
func (c *h2Conn) fail(err error) {
	c.nc.Close()
	c.mu.Lock()
	switch {
	case c.closing:
		err = errH2Closed
	case c.writeErr != nil:
		err = fmt.Errorf("h2: connection to %s broke: %w", c.authority, c.writeErr)
	default:
		err = fmt.Errorf("h2: connection to %s broke: %w", c.authority, err)
	}
	if c.err == nil || c.closing {
		c.err = err
	}
	failed := make([]*h2Stream, 0, len(c.streams))
	for id, st := range c.streams {
		delete(c.streams, id)
		c.active--
		failed = append(failed, st)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, st := range failed {
		st.resp, st.err = nil, err
		st.done <- struct{}{}
	}
}

// stream returns the open stream id, or nil.
func (c *h2Conn) stream(id uint32) *h2Stream {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	return st
}

// finish ends st with resp or err and hands it back to its caller, unless
// the caller gave up on it already. Only the reader calls it.
func (c *h2Conn) finish(st *h2Stream, resp []byte, err error) {
	c.mu.Lock()
	if c.streams[st.id] != st {
		c.mu.Unlock()
		return
	}
	delete(c.streams, st.id)
	c.active--
	c.cond.Broadcast()
	c.mu.Unlock()
	st.resp, st.err = resp, err
	st.done <- struct{}{}
}

// handle acts on one frame; an error is fatal for the connection.
func (c *h2Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		c.handleData(f)
	case *http2.HeadersFrame:
		c.hfields = h2Fields{}
		c.hstream, c.hend = f.StreamID, f.StreamEnded()
		return c.readHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		// The Framer checked that it follows the HEADERS of its stream.
		return c.readHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.WindowUpdateFrame:
		return c.handleWindowUpdate(f)
	case *http2.SettingsFrame:
		if !f.IsAck() {
			return c.handleSettings(f)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			c.lockWrite()
			c.fr.WritePing(true, f.Data)
			c.unlockWrite()
		}
	case *http2.RSTStreamFrame:
		if st := c.stream(f.StreamID); st != nil {
			c.finish(st, nil, fmt.Errorf("h2: stream %d reset by the server with %v", f.StreamID, f.ErrCode))
		}
	case *http2.GoAwayFrame:
		c.handleGoAway(f)
	case *http2.PushPromiseFrame:
		return errors.New("h2: server sent PUSH_PROMISE though we disabled push")
	}
	return nil
}

// handleSettings applies the server's settings and acknowledges them.
func (c *h2Conn) handleSettings(f *http2.SettingsFrame) error {
	var table uint32
	tableSet := false
	c.mu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		case http2.SettingInitialWindowSize:
			// The change applies to the windows of open streams too.
			delta := int64(s.Val) - c.peerWindow
			for _, st := range c.streams {
				st.sendWindow += delta
			}
			c.peerWindow = int64(s.Val)
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			table, tableSet = s.Val, true
		}
		return nil
	})
	c.cond.Broadcast()
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("h2: bad SETTINGS from the server: %w", err)
	}
	c.lockWrite()
	if tableSet && table != c.peerTable {
		// Start the table again at the next block, within the new size.
		c.peerTable, c.hreset = table, true
	}
	c.fr.WriteSettingsAck()
	c.unlockWrite()
	return nil
}

// handleWindowUpdate grows a send window and wakes the calls waiting for
// one.
func (c *h2Conn) handleWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		overflow := c.sendWindow > h2MaxStreamID
		c.cond.Broadcast()
		c.mu.Unlock()
		if overflow {
			return errors.New("h2: server overflowed the connection's send window")
		}
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		c.mu.Unlock()
		return nil
	}
	st.sendWindow += int64(f.Increment)
	overflow := st.sendWindow > h2MaxStreamID
	c.cond.Broadcast()
	c.mu.Unlock()
	if overflow {
		c.finish(st, nil, fmt.Errorf("h2: server overflowed the send window of stream %d", f.StreamID))
		c.resetStream(f.StreamID)
	}
	return nil
}

// handleGoAway fails the streams the server will not process and stops
// new ones; the others run to completion.
func (c *h2Conn) handleGoAway(f *http2.GoAwayFrame) {
	err := fmt.Errorf("%w (%v, last stream %d)", errH2GoAway, f.ErrCode, f.LastStreamID)
	if d := f.DebugData(); len(d) > 0 {
		err = fmt.Errorf("%w: %q", err, d)
	}
	var failed []*h2Stream
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	for id, st := range c.streams {
		if id > f.LastStreamID {
			failed = append(failed, st)
		}
	}
	c.mu.Unlock()
	for _, st := range failed {
		c.finish(st, nil, err)
	}
}

// handleData credits the flow control windows and adds the frame's
// payload to its stream's response message.
func (c *h2Conn) handleData(f *http2.DataFrame) {
	// Flow control counts the whole payload, padding included, and
	// frames for streams we abandoned.
	n := f.Header().Length
	c.recvUnacked += n
	var connCredit, streamCredit uint32
	if c.recvUnacked >= c.recvWindow/2 {
		connCredit, c.recvUnacked = c.recvUnacked, 0
	}
	st := c.stream(f.StreamID)
	if st != nil {
		err := st.consume(f.Data())
		switch {
		case err == nil && f.StreamEnded():
			err = status.Error(codes.Internal, "h2: stream ended without trailers")
		case err == nil:
			if st.recvUnacked += n; st.recvUnacked >= c.recvWindow/2 {
				streamCredit, st.recvUnacked = st.recvUnacked, 0
			}
		}
		if err != nil {
			c.finish(st, nil, fmt.Errorf("h2: stream %d: %w", f.StreamID, err))
			if !f.StreamEnded() {
				c.resetStream(f.StreamID)
			}
		}
	}
	if connCredit > 0 || streamCredit > 0 {
		c.lockWrite()
		if connCredit > 0 {
			c.fr.WriteWindowUpdate(0, connCredit)
		}
		if streamCredit > 0 {
			c.fr.WriteWindowUpdate(f.StreamID, streamCredit)
		}
		c.unlockWrite()
	}
}

// consume adds DATA payload p to the response: a 5-byte gRPC prefix and
// exactly one message.
func (st *h2Stream) consume(p []byte) error {
	if !st.gotHeaders {
		return errors.New("DATA before HEADERS")
	}
	for len(p) > 0 {
		if st.nhdr < len(st.hdr) {
			k := copy(st.hdr[st.nhdr:], p)
			st.nhdr += k
			p = p[k:]
			if st.nhdr < len(st.hdr) {
				return nil
			}
			if st.hdr[0] != 0 {
				return fmt.Errorf("response message has flags %#x, want 0 (uncompressed)", st.hdr[0])
			}
			size := binary.BigEndian.Uint32(st.hdr[1:])
			if size > h2MaxMessage {
				return fmt.Errorf("response message of %d bytes is larger than %d", size, h2MaxMessage)
			}
			st.msg = make([]byte, 0, size)
			continue
		}
		if len(st.msg) == cap(st.msg) {
			return errors.New("more than one response message")
		}
		k := min(len(p), cap(st.msg)-len(st.msg))
		st.msg = append(st.msg, p[:k]...)
		p = p[k:]
	}
	return nil
}

// h2Fields are the response header fields a call looks at.
type h2Fields struct {
	status, contentType, grpcStatus, grpcMessage string
}

// emit is the HPACK decoder's callback.
func (h *h2Fields) emit(f hpack.HeaderField) {
	switch f.Name {
	case ":status":
		h.status = f.Value
	case "content-type":
		h.contentType = f.Value
	case "grpc-status":
		h.grpcStatus = f.Value
	case "grpc-message":
		h.grpcMessage = f.Value
	}
}

// readHeaderBlock decodes a fragment of the header block of c.hstream and
// acts on the block at its end. Every block goes through the decoder,
// even for streams we forgot, to keep the HPACK state in step with the
// server's; an error is fatal for the connection.
func (c *h2Conn) readHeaderBlock(frag []byte, end bool) error {
	if _, err := c.hdec.Write(frag); err != nil {
		return fmt.Errorf("h2: decode the headers of stream %d: %w", c.hstream, err)
	}
	if !end {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		return fmt.Errorf("h2: decode the headers of stream %d: %w", c.hstream, err)
	}
	if st := c.stream(c.hstream); st != nil {
		c.handleHeaders(st, c.hend, &c.hfields)
	}
	return nil
}

// handleHeaders checks the response headers h of st and ends the call at
// the trailers, or at a trailers-only response; ended is whether the
// block had END_STREAM.
func (c *h2Conn) handleHeaders(st *h2Stream, ended bool, h *h2Fields) {
	if !st.gotHeaders {
		st.gotHeaders = true
		if h.status != "200" {
			c.finishEarly(st, ended, status.Errorf(codes.Unavailable, "h2: stream %d: HTTP status %q, want 200", st.id, h.status))
			return
		}
		if !strings.HasPrefix(h.contentType, "application/grpc") {
			c.finishEarly(st, ended, status.Errorf(codes.Internal, "h2: stream %d: content-type %q, want application/grpc", st.id, h.contentType))
			return
		}
		if !ended {
			return
		}
	} else if !ended {
		c.finishEarly(st, ended, status.Errorf(codes.Internal, "h2: stream %d: a second header block without END_STREAM", st.id))
		return
	}

	code, err := strconv.ParseUint(h.grpcStatus, 10, 32)
	switch {
	case err != nil:
		c.finish(st, nil, status.Errorf(codes.Internal, "h2: stream %d: grpc-status %q in trailers", st.id, h.grpcStatus))
	case code != 0:
		c.finish(st, nil, status.Error(codes.Code(code), h2DecodeMessage(h.grpcMessage)))
	case st.nhdr < len(st.hdr) || len(st.msg) < cap(st.msg):
		c.finish(st, nil, status.Errorf(codes.Internal, "h2: stream %d: grpc-status 0 without a complete response message", st.id))
	default:
		c.finish(st, st.msg, nil)
	}
}

// finishEarly ends st with err and resets its stream unless the server
// ended it.
func (c *h2Conn) finishEarly(st *h2Stream, ended bool, err error) {
	id := st.id // st belongs to its caller again after finish
	c.finish(st, nil, err)
	if !ended {
		c.resetStream(id)
	}
}

// h2DecodeMessage undoes the percent-encoding of grpc-message; malformed
// escapes stay as they are.
func h2DecodeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
