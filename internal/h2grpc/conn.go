package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

const (
	// maxStreamID is the largest stream id HTTP/2 allows.
	maxStreamID = 1<<31 - 1
	// maxHeaderList bounds a request's header block, decoded, in bytes
	// (SETTINGS_MAX_HEADER_LIST_SIZE); a larger one resets its stream.
	maxHeaderList = 1 << 20
	bufferSize    = 32 << 10
	// goAwayPing is the payload of the ping that follows the first of a
	// graceful shutdown's two GOAWAYs; its answer sends the second.
	goAwayPing = "goaway!!"
	// keepalivePing is the payload of the server's keepalive pings.
	keepalivePing = "alive?!!"
	// flushWait bounds how long an answer waits for the calls running
	// beside it to flush it with theirs.
	flushWait = 200 * time.Microsecond
	// goAwayPingWait is how long a graceful close waits for the answer to
	// its ping before sending the final GOAWAY regardless.
	goAwayPingWait = 5 * time.Second
	// lingerTime and lingerBytes bound how long, and how much, a
	// connection the server ends goes on reading, and dropping, of what
	// the client still sends after the server shut its side (see close):
	// enough for the frames a client had in flight, and no more for one
	// that streams on (at line rate, a second is gigabytes).
	lingerTime  = time.Second
	lingerBytes = 1 << 20
)

var (
	errServerStopped = errors.New("h2grpc: server stopped")
	errDrained       = errors.New("h2grpc: connection drained")
	errAgeGrace      = errors.New("h2grpc: connection older than its maximum age and grace")
	errKeepalive     = errors.New("h2grpc: keepalive ping not answered")
)

// connError is a connection error: the reader answers it with a GOAWAY
// carrying code and closes the connection.
type connError struct {
	code http2.ErrCode
	msg  string
}

func (e connError) Error() string {
	return fmt.Sprintf("h2grpc: connection error %v: %s", e.code, e.msg)
}

func protocolError(format string, args ...any) error {
	return connError{http2.ErrCodeProtocol, fmt.Sprintf(format, args...)}
}

// conn is one client connection. The reader goroutine (serve) owns the
// frame reader and the fields marked "reader"; calls write their answers
// themselves, under wmu.
type conn struct {
	s      *Server
	nc     net.Conn
	ctx    context.Context // the base of its calls' contexts; cancelled when it closes
	cancel context.CancelFunc
	br     *bufio.Reader
	fr     *http2.Framer // reads on the reader goroutine, writes under wmu
	done   chan struct{} // closed when the connection is closed

	// closing is set as close begins; writers treat it as werr.
	closing atomic.Bool

	// running counts the unary calls running on goroutines of their own
	// or workers, which finish their answers' writes themselves.
	running atomic.Int32
	// pending is the bytes of the connection's unfinished messages that
	// count in Server.pending (its streams' pending together); mu guards it.
	pending int64

	// active is set by the reader on every frame and cleared by the
	// keepalive loop: whether the client said anything since it last
	// looked.
	active atomic.Bool

	wmu        sync.Mutex // protects the fields below and writes through fr
	wcond      *sync.Cond // on wmu: broadcast when send windows grow, streams end or werr is set
	bw         *bufio.Writer
	dirty      bool  // bw holds frames not yet flushed
	werr       error // set when the connection closed or a write failed: write nothing more
	henc       *hpack.Encoder
	hbuf       bytes.Buffer // henc's output
	sendWindow int64        // the client's receive window for the connection
	peerWindow int64        // the client's SETTINGS_INITIAL_WINDOW_SIZE; written under mu too, so mu suffices to read it
	peerFrame  int          // the client's SETTINGS_MAX_FRAME_SIZE
	sentData   bool         // a header or data frame went out since the client's last ping
	flushTimer *time.Timer  // flushes what finish left unflushed; nil until first needed
	flushArmed bool         // flushTimer is set to fire

	mu       sync.Mutex // protects the fields below
	streams  map[uint32]*stream
	maxID    uint32 // the highest stream id the client opened
	lastID   uint32 // streams above it are refused: maxStreamID until the final GOAWAY
	draining bool   // a GOAWAY went out, or came in: close once no streams remain
	goAways  int    // GOAWAYs sent: 1 after the first of a graceful pair, 2 after the last
	opened   uint64 // streams opened, ever (the idle check compares it)
	closed   bool
	closeErr error
	// lingering: close shut the writing side only; the reader drops
	// what still comes, closes the socket and leaves the server's set.
	lingering bool

	// reader
	held        []*stream // unary calls ready for their batch (holdForBatch)
	recvUnacked uint32    // connection-level bytes received and not yet re-credited
	pingStrikes int
	lastPing    time.Time
}

// serveConn runs one accepted connection to its end.
func (s *Server) serveConn(nc net.Conn) {
	deadline := time.Now().Add(s.opts.HandshakeTimeout)
	nc.SetDeadline(deadline)
	var authInfo credentials.AuthInfo
	if s.opts.TLS != nil {
		tc := tls.Server(nc, s.opts.TLS)
		if err := tc.Handshake(); err != nil {
			s.opts.Logger.Debug("gRPC TLS handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
			nc.Close()
			return
		}
		authInfo = credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
		nc = tc
	}
	c := &conn{
		s:          s,
		nc:         nc,
		br:         bufio.NewReaderSize(nc, bufferSize),
		bw:         bufio.NewWriterSize(&deadlineWriter{nc: nc, timeout: s.opts.WriteTimeout}, bufferSize),
		done:       make(chan struct{}),
		streams:    make(map[uint32]*stream),
		lastID:     maxStreamID,
		sendWindow: minWindow,
		peerWindow: minWindow,
		peerFrame:  16384,
	}
	c.wcond = sync.NewCond(&c.wmu)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = maxHeaderList
	// The frame size HTTP/2 allows until a SETTINGS raises it, which the
	// server's never does.
	c.fr.SetMaxReadFrameSize(16384)
	c.fr.SetReuseFrames()
	p := &peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr(), AuthInfo: authInfo}
	c.ctx, c.cancel = context.WithCancel(peer.NewContext(context.Background(), p))

	// The preface, then the client's SETTINGS, within the handshake
	// timeout.
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		s.opts.Logger.Debug("gRPC connection without the HTTP/2 preface", "remote", nc.RemoteAddr().String(), "err", err)
		c.cancel()
		nc.Close()
		return
	}
	f, err := c.fr.ReadFrame()
	sf, ok := f.(*http2.SettingsFrame)
	if err != nil || !ok || sf.IsAck() {
		c.cancel()
		if err == nil {
			c.wmu.Lock()
			c.fr.WriteGoAway(0, http2.ErrCodeProtocol, []byte("the first frame must be SETTINGS"))
			c.bw.Flush()
			c.wmu.Unlock()
		}
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	if !s.track(c) {
		c.cancel()
		nc.Close()
		return
	}

	c.wmu.Lock()
	settings := []http2.Setting{
		{ID: http2.SettingInitialWindowSize, Val: s.opts.InitialWindowSize},
		{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderList},
	}
	if s.opts.MaxConcurrentStreams > 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.opts.MaxConcurrentStreams})
	}
	c.fr.WriteSettings(settings...)
	if d := s.opts.InitialConnWindowSize - minWindow; d > 0 {
		c.fr.WriteWindowUpdate(0, d)
	}
	c.dirty = true
	c.wmu.Unlock()
	if err := c.onSettings(sf); err != nil {
		c.fail(err)
		return
	}
	go c.keepalive()
	c.fail(c.serve())
	c.finish()
}

// finish, run by the reader once the connection is closed, ends what
// close left: when close only shut the writing side, it reads and drops
// what the client still sends until the client closes too, for at most
// lingerTime and lingerBytes, then closes the socket and leaves the
// server's set.
func (c *conn) finish() {
	<-c.done // close may still be running on another goroutine
	c.mu.Lock()
	lingering := c.lingering
	c.mu.Unlock()
	if !lingering {
		return
	}
	io.CopyN(io.Discard, c.br, lingerBytes)
	c.nc.Close()
	c.s.untrack(c)
}

// serve reads and handles frames until the connection fails or closes,
// and returns why.
func (c *conn) serve() error {
	defer func() {
		if len(c.held) > 0 {
			c.dispatchBatches()
		}
	}()
	for {
		if len(c.held) > 0 && !c.frameBuffered() {
			// All the client has sent is read: the calls it completed
			// go to their batches before the reader waits for more.
			c.dispatchBatches()
		}
		if c.br.Buffered() == 0 {
			// About to wait for the client: send what the frames read so
			// far made us write (acknowledgements, window updates).
			c.wmu.Lock()
			err := c.flushLocked()
			c.wmu.Unlock()
			if err != nil {
				return err
			}
		}
		f, err := c.fr.ReadFrame()
		if c.closing.Load() {
			// Closed meanwhile (a graceful close's end, say): what the
			// client sends now is dropped (finish).
			return net.ErrClosed
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A malformed header block (an uppercase or unknown pseudo
				// header, say): the framer kept HPACK's state; only this
				// stream fails.
				c.mu.Lock()
				if se.StreamID%2 == 1 && se.StreamID > c.maxID {
					c.maxID = se.StreamID
				}
				c.mu.Unlock()
				c.writeReset(se.StreamID, se.Code)
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				return connError{http2.ErrCode(ce), err.Error()}
			}
			if errors.Is(err, http2.ErrFrameTooLarge) {
				return connError{http2.ErrCodeFrameSize, err.Error()}
			}
			return err
		}
		c.active.Store(true)
		if err := c.handle(f); err != nil {
			return err
		}
	}
}

// frameBuffered reports whether the reader holds a whole frame, which it
// can read without waiting for the client.
func (c *conn) frameBuffered() bool {
	n := c.br.Buffered()
	if n < frameHeaderLen {
		return false
	}
	h, err := c.br.Peek(frameHeaderLen)
	if err != nil {
		return false
	}
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	return n >= frameHeaderLen+length
}

// frameHeaderLen is the length of an HTTP/2 frame's header.
const frameHeaderLen = 9

func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			// A stream that depends on itself: a stream error (RFC 9113
			// section 5.3.1).
			c.mu.Lock()
			st := c.streams[f.StreamID]
			c.mu.Unlock()
			if st != nil {
				c.resetAndForget(st, http2.ErrCodeProtocol)
			} else {
				c.writeReset(f.StreamID, http2.ErrCodeProtocol)
			}
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.draining = true
		idle := len(c.streams) == 0
		c.mu.Unlock()
		if idle {
			return errDrained
		}
	case *http2.PushPromiseFrame:
		return protocolError("a client sent PUSH_PROMISE")
	}
	// PRIORITY and unknown frame types are ignored, as RFC 9113 says.
	return nil
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			// Every open stream's window moves by the difference.
			c.mu.Lock()
			d := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += d
			}
			c.mu.Unlock()
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return connError{http2.ErrCode(ce), err.Error()}
		}
		return protocolError("%v", err)
	}
	c.fr.WriteSettingsAck()
	c.dirty = true
	c.wcond.Broadcast()
	return nil
}

func (c *conn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		if string(f.Data[:]) == goAwayPing {
			c.finalGoAway()
		}
		return nil
	}
	// Keepalive enforcement, as grpc-go's: a ping sooner than
	// KeepaliveMinTime after the last is a strike, unless the server sent
	// headers or data since; the third strike ends the connection.
	now := time.Now()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.sentData {
		c.pingStrikes = 0
	} else if !c.lastPing.IsZero() && now.Sub(c.lastPing) < c.s.opts.KeepaliveMinTime {
		c.pingStrikes++
		if c.pingStrikes > 2 {
			return connError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
		}
	}
	c.sentData = false
	c.lastPing = now
	c.fr.WritePing(true, f.Data)
	c.dirty = true
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	c.wmu.Lock()
	if f.StreamID == 0 {
		defer c.wmu.Unlock()
		if inc == 0 {
			return protocolError("WINDOW_UPDATE of 0 for the connection")
		}
		c.sendWindow += inc
		if c.sendWindow > maxStreamID {
			return connError{http2.ErrCodeFlowControl, "the connection's send window overflowed"}
		}
		c.wcond.Broadcast()
		return nil
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	idle := c.idle(f.StreamID)
	c.mu.Unlock()
	switch {
	case idle:
		c.wmu.Unlock()
		return protocolError("WINDOW_UPDATE on stream %d, which the client never opened", f.StreamID)
	case st == nil: // a stream that ended
	case inc == 0 || st.sendWindow+inc > maxStreamID:
		st.resetLocked(http2.ErrCodeFlowControl)
		c.wmu.Unlock()
		c.forget(st)
		return nil
	default:
		st.sendWindow += inc
		c.wcond.Broadcast()
	}
	c.wmu.Unlock()
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	st := c.streams[f.StreamID]
	idle := c.idle(f.StreamID)
	c.mu.Unlock()
	if idle {
		return protocolError("RST_STREAM on stream %d, which the client never opened", f.StreamID)
	}
	if st == nil {
		return nil
	}
	c.wmu.Lock()
	st.abortLocked()
	c.wmu.Unlock()
	c.forget(st)
	return nil
}

// idle reports whether stream id is in the idle state: a stream the client
// has not opened (odd, above the highest it opened) or one the server
// could open, which it never does (even). RST_STREAM and WINDOW_UPDATE on
// an idle stream are connection errors (RFC 9113 section 5.1). Requires
// c.mu held.
func (c *conn) idle(id uint32) bool {
	return id%2 == 0 || id > c.maxID
}

// writeReset resets stream id.
func (c *conn) writeReset(id uint32, code http2.ErrCode) {
	c.wmu.Lock()
	if c.werr == nil {
		c.fr.WriteRSTStream(id, code)
		c.dirty = true
	}
	c.wmu.Unlock()
}

// writeWindowUpdate credits the client with n more bytes on stream id (0:
// the connection).
func (c *conn) writeWindowUpdate(id, n uint32) {
	c.wmu.Lock()
	if c.werr == nil {
		c.fr.WriteWindowUpdate(id, n)
		c.dirty = true
	}
	c.wmu.Unlock()
}

// broken reports whether nothing more may be written: the connection is
// closing or a write failed. Requires wmu held.
func (c *conn) broken() bool { return c.werr != nil || c.closing.Load() }

// flushLocked writes out what bw holds; requires wmu held.
func (c *conn) flushLocked() error {
	if c.werr != nil {
		return c.werr
	}
	if !c.dirty {
		return nil
	}
	c.dirty = false
	if err := c.bw.Flush(); err != nil {
		c.werr = err
		c.wcond.Broadcast()
		return err
	}
	return nil
}

// flushSoonLocked sees that what bw holds is flushed within flushWait,
// whether or not a later writer does it first; requires wmu held.
func (c *conn) flushSoonLocked() {
	if c.flushArmed {
		return
	}
	c.flushArmed = true
	if c.flushTimer == nil {
		c.flushTimer = time.AfterFunc(flushWait, func() {
			c.wmu.Lock()
			c.flushArmed = false
			err := c.flushLocked()
			c.wmu.Unlock()
			if err != nil {
				c.close(err)
			}
		})
		return
	}
	c.flushTimer.Reset(flushWait)
}

// unlockWrite releases wmu and sees the frames written under it flushed.
// It yields first, so that calls finishing at the same moment add their
// answers to the same write system call: whoever locks first after that
// flushes for all. Requires wmu held.
func (c *conn) unlockWrite() {
	c.dirty = true
	c.wmu.Unlock()
	runtime.Gosched()
	c.wmu.Lock()
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil {
		c.close(err)
	}
}

// resetLateRequests resets the unary calls whose requests have not come
// whole within RequestTimeout, and sends the resets: the reader, waiting
// for the client, sends nothing until it hears from it.
func (c *conn) resetLateRequests(now time.Time) error {
	var late []*stream
	c.mu.Lock()
	for _, st := range c.streams {
		if st.m.stream == nil && !st.clientDone.Load() && now.Sub(st.opened) >= c.s.opts.RequestTimeout {
			late = append(late, st)
		}
	}
	c.mu.Unlock()
	if len(late) == 0 || !c.wmu.TryLock() {
		return nil // none, or a write stuck on the client: next time
	}
	for _, st := range late {
		st.resetLocked(http2.ErrCodeCancel)
	}
	c.s.late.Add(int64(len(late)))
	err := c.flushLocked()
	c.wmu.Unlock()
	for _, st := range late {
		c.forget(st)
	}
	return err
}

// forget removes a stream that ended, and closes a draining connection
// that has no streams left.
func (c *conn) forget(st *stream) {
	c.mu.Lock()
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
		c.release(st)
	}
	last := c.draining && len(c.streams) == 0 && c.goAways != 1
	c.mu.Unlock()
	if last {
		c.close(errDrained)
	}
}

// drain starts a graceful close: a GOAWAY that refuses no stream yet and
// a ping, whose answer sends the final GOAWAY naming the last stream the
// server will serve (a client may have streams in flight the first one
// could not know of). The connection closes when its streams are done.
func (c *conn) drain() {
	c.mu.Lock()
	if c.draining && c.goAways > 0 || c.closed {
		c.mu.Unlock()
		return
	}
	c.draining = true
	c.goAways = 1
	c.mu.Unlock()
	c.wmu.Lock()
	if c.werr == nil {
		c.fr.WriteGoAway(maxStreamID, http2.ErrCodeNo, nil)
		c.writePingLocked(goAwayPing)
	}
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil {
		c.close(err)
		return
	}
	// A client that never answers the ping gets the final GOAWAY anyway.
	time.AfterFunc(goAwayPingWait, c.finalGoAway)
}

// writePingLocked sends a ping carrying payload (8 bytes); requires wmu
// held.
func (c *conn) writePingLocked(payload string) {
	var data [8]byte
	copy(data[:], payload)
	c.fr.WritePing(false, data)
	c.dirty = true
}

// finalGoAway sends the second GOAWAY of a graceful close.
func (c *conn) finalGoAway() {
	c.mu.Lock()
	if c.goAways != 1 {
		c.mu.Unlock()
		return
	}
	c.goAways = 2
	c.lastID = c.maxID
	last := c.maxID
	idle := len(c.streams) == 0
	c.mu.Unlock()
	c.wmu.Lock()
	if c.werr == nil {
		c.fr.WriteGoAway(last, http2.ErrCodeNo, nil)
		c.dirty = true
	}
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil || idle {
		c.close(errDrained)
	}
}

// fail ends the connection for err: a connection error is answered with
// a GOAWAY first.
func (c *conn) fail(err error) {
	var ce connError
	if errors.As(err, &ce) {
		c.s.connErrors.Add(1)
		c.s.opts.Logger.Debug("gRPC connection error", "remote", c.nc.RemoteAddr().String(), "err", err)
		c.mu.Lock()
		last := c.maxID
		c.mu.Unlock()
		c.wmu.Lock()
		if c.werr == nil {
			c.fr.WriteGoAway(last, ce.code, []byte(ce.msg))
			c.dirty = true
		}
		c.flushLocked()
		c.wmu.Unlock()
	}
	c.close(err)
}

// close closes the connection, once: calls in flight see their contexts
// cancelled, and nothing more is written.
//
// Unless the server is stopping at once or writing failed, close shuts
// only the writing side of a socket that can (TCP, TLS), after flushing
// what is buffered, and leaves the rest to the reader (finish): closing a
// socket with bytes from the client still unread makes the kernel reset
// the connection instead of ending it, and a reset can throw away what
// the server wrote last, its GOAWAY and its last answers, before the
// client reads them.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if err == errServerStopped {
			// Stop cuts short a lingering close, or the flush of one
			// still under way (to a client that stopped reading, it would
			// wait for --http-write-timeout).
			c.nc.Close()
		}
		return
	}
	c.closed = true
	c.closeErr = err
	// Before the calls' contexts end: a call that sees its context
	// cancelled must find the connection broken, not answer "canceled".
	c.closing.Store(true)
	streams := make([]*stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
		c.release(st)
	}
	clear(c.streams)
	c.mu.Unlock()
	c.cancel()
	c.wmu.Lock()
	cw, linger := c.nc.(interface{ CloseWrite() error })
	linger = linger && c.werr == nil && err != errServerStopped
	if linger && c.flushLocked() != nil {
		linger = false
	}
	if c.werr == nil {
		c.werr = err
	}
	for _, st := range streams {
		st.abortLocked()
	}
	c.wcond.Broadcast()
	c.wmu.Unlock()
	linger = linger && cw.CloseWrite() == nil && c.nc.SetReadDeadline(time.Now().Add(lingerTime)) == nil
	if linger {
		c.mu.Lock()
		c.lingering = true
		c.mu.Unlock()
	} else {
		c.nc.Close()
	}
	close(c.done)
	if !linger {
		c.s.untrack(c)
	}
}

// keepalive runs the connection's timers until it closes: the maximum
// age and its grace, the maximum idle time, and the keepalive ping.
func (c *conn) keepalive() {
	o := &c.s.opts
	now := time.Now()
	var ageAt, graceAt time.Time
	if o.MaxConnectionAge > 0 {
		// ±10%, so that connections opened together do not all go at once.
		jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(o.MaxConnectionAge))
		ageAt = now.Add(o.MaxConnectionAge + jitter)
	}
	idleEvery := o.MaxConnectionIdle / 4
	var idleCheck, idleSince time.Time
	var openedAt uint64
	if o.MaxConnectionIdle > 0 {
		idleCheck = now.Add(idleEvery)
		idleSince = now
	}
	pingAt := now.Add(o.KeepaliveTime)
	var pingDeadline time.Time // set while a keepalive ping waits for its answer
	var reqCheck time.Time
	if o.RequestTimeout > 0 {
		reqCheck = now.Add(o.RequestTimeout / 4)
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := pingAt
		for _, at := range []time.Time{ageAt, graceAt, idleCheck, pingDeadline, reqCheck} {
			if !at.IsZero() && at.Before(next) {
				next = at
			}
		}
		t.Reset(time.Until(next))
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		now = time.Now()
		if !graceAt.IsZero() && !now.Before(graceAt) {
			c.close(errAgeGrace)
			return
		}
		if !ageAt.IsZero() && !now.Before(ageAt) {
			ageAt = time.Time{}
			c.drain()
			if o.MaxConnectionAgeGrace > 0 {
				graceAt = now.Add(o.MaxConnectionAgeGrace)
			}
		}
		if !idleCheck.IsZero() && !now.Before(idleCheck) {
			c.mu.Lock()
			n, opened := len(c.streams), c.opened
			c.mu.Unlock()
			if n > 0 || opened != openedAt {
				idleSince, openedAt = now, opened
			} else if now.Sub(idleSince) >= o.MaxConnectionIdle {
				c.drain()
			}
			idleCheck = now.Add(idleEvery)
		}
		if !reqCheck.IsZero() && !now.Before(reqCheck) {
			if err := c.resetLateRequests(now); err != nil {
				c.close(err)
				return
			}
			reqCheck = now.Add(o.RequestTimeout / 4)
		}
		if c.active.Swap(false) {
			pingAt, pingDeadline = now.Add(o.KeepaliveTime), time.Time{}
			continue
		}
		if !pingDeadline.IsZero() && !now.Before(pingDeadline) {
			c.close(errKeepalive)
			return
		}
		if pingDeadline.IsZero() && !now.Before(pingAt) {
			// Silent for KeepaliveTime: ping, and close unless the client
			// says anything within KeepaliveTimeout. A write stuck on a
			// client that reads nothing holds wmu: then only the deadline
			// acts.
			if c.wmu.TryLock() {
				if c.werr == nil {
					c.writePingLocked(keepalivePing)
				}
				err := c.flushLocked()
				c.wmu.Unlock()
				if err != nil {
					c.close(err)
					return
				}
			}
			pingDeadline = now.Add(o.KeepaliveTimeout)
			pingAt = now.Add(o.KeepaliveTime)
		}
	}
}

// deadlineWriter writes to nc with a write deadline at least half of
// timeout away (0: none), so that a client that stops reading cannot hold
// the connection's writers for longer than timeout. It moves the deadline
// only when less than half of timeout is left, not on every write.
type deadlineWriter struct {
	nc       net.Conn
	timeout  time.Duration
	deadline time.Time
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		if now := time.Now(); w.deadline.Sub(now) < w.timeout/2 {
			w.deadline = now.Add(w.timeout)
			if err := w.nc.SetWriteDeadline(w.deadline); err != nil {
				return 0, err
			}
		}
	}
	return w.nc.Write(p)
}
