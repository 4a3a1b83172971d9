package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawConn is an HTTP/2 client connection written frame by frame.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	fr *http2.Framer
}

// dialRaw connects to addr and sends the preface and an empty SETTINGS.
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	fr.AllowIllegalWrites = true // the tests break the rules on purpose
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, nc: nc, fr: fr}
}

// goAway reads frames until a GOAWAY, which it returns, or until the
// connection ends or 5 seconds pass (nil).
func (r *rawConn) goAway() *http2.GoAwayFrame {
	g, _ := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	return g
}

func TestPingFloodIsSentAway(t *testing.T) {
	_, _, _, addr := serve(t, Options{KeepaliveMinTime: 150 * time.Millisecond})
	r := dialRaw(t, addr)
	for i := range 5 {
		if err := r.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	g := r.goAway()
	if g == nil || g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_pings" {
		t.Fatalf("got %v, want GOAWAY ENHANCE_YOUR_CALM too_many_pings", g)
	}
}

// callHeaders is the header list headers sends for path.
func callHeaders(path string) [][2]string {
	return [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "test"}, {"content-type", "application/grpc"}, {"te", "trailers"}}
}

// headerBytes is the length of callHeaders' names and values together,
// which a call's pending bytes count until the client ends its side.
func headerBytes(path string) int64 {
	var n int64
	for _, f := range callHeaders(path) {
		n += int64(len(f[0]) + len(f[1]))
	}
	return n
}

// headers sends a call's HEADERS for path on stream id.
func (r *rawConn) headers(id uint32, path string, end bool) {
	r.t.Helper()
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range callHeaders(path) {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
		r.t.Fatal(err)
	}
}

// until reads frames until one satisfies ok, which it returns, or until
// the connection ends or 5 seconds pass (nil).
func (r *rawConn) until(ok func(http2.Frame) bool) http2.Frame {
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Logf("read: %v", err)
			return nil
		}
		if ok(f) {
			return f
		}
	}
}

func TestProtocolErrorsEndTheConnection(t *testing.T) {
	s, _, _, addr := serve(t, Options{})
	cases := []struct {
		name string
		send func(r *rawConn)
		want http2.ErrCode
	}{
		{"an even stream id", func(r *rawConn) { r.headers(2, "/test.Echo/Unary", false) }, http2.ErrCodeProtocol},
		{"stream ids going down", func(r *rawConn) { r.headers(5, "/test.Echo/Unary", false); r.headers(3, "/test.Echo/Unary", false) }, http2.ErrCodeProtocol},
		{"a frame larger than 16 KiB", func(r *rawConn) {
			r.headers(1, "/test.Echo/Unary", false)
			r.fr.WriteData(1, false, make([]byte, 20000))
		}, http2.ErrCodeFrameSize},
		{"DATA on a stream never opened", func(r *rawConn) { r.fr.WriteData(7, false, []byte{0}) }, http2.ErrCodeProtocol},
		{"a WINDOW_UPDATE of 0", func(r *rawConn) { r.fr.WriteWindowUpdate(0, 0) }, http2.ErrCodeProtocol},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			c.send(r)
			g := r.goAway()
			if g == nil || g.ErrCode != c.want {
				t.Fatalf("got %v, want GOAWAY %v", g, c.want)
			}
			if _, err := r.fr.ReadFrame(); err == nil {
				t.Error("the connection stayed open after its GOAWAY")
			}
		})
	}
	if got := s.Stats().ConnectionErrors; got != int64(len(cases)) {
		t.Errorf("Stats().ConnectionErrors: %d, want %d", got, len(cases))
	}
	// Without the preface, the server says nothing and hangs up.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 100)); err != io.EOF {
		t.Errorf("an HTTP/1.1 request: read %d bytes, %v; want the connection closed", n, err)
	}
}

func TestStreamsPastTheCapAreRefused(t *testing.T) {
	s, e, _, addr := serve(t, Options{MaxConcurrentStreams: 2})
	r := dialRaw(t, addr)
	for _, id := range []uint32{1, 3, 5} {
		r.headers(id, "/test.Echo/Block", false)
		r.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})
	}
	f := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 5 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v, want stream 5 refused", f)
	}
	if got := s.Stats().Refused; got != [NumRefusals]int64{RefusedMaxConcurrentStreams: 1} {
		t.Errorf("Stats().Refused: %v, want 1 call refused for max_concurrent_streams", got)
	}
	for range 2 {
		<-e.started
	}
	close(e.release)
	// The two held calls are answered: trailers with grpc-status 0.
	ended := 0
	for ended < 2 {
		f := r.until(func(f http2.Frame) bool {
			return f.Header().Flags.Has(http2.FlagHeadersEndStream) && f.Header().Type == http2.FrameHeaders
		})
		if f == nil {
			t.Fatalf("%d of the 2 held calls answered", ended)
		}
		ended++
	}
}

// A client that resets its calls does not free their places while their
// handlers still run (the "rapid reset" attack, CVE-2023-44487): one
// connection opening and resetting calls as fast as it can would
// otherwise start handlers without bound while the store is slow.
func TestResetCallsHoldTheirPlaceUntilTheirHandlersReturn(t *testing.T) {
	_, e, _, addr := serve(t, Options{MaxConcurrentStreams: 2})
	r := dialRaw(t, addr)
	open := func(id uint32) {
		r.headers(id, "/test.Echo/Hold", false)
		r.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})
	}
	for _, id := range []uint32{1, 3} {
		open(id)
		r.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	for range 2 {
		<-e.started
	}
	open(5)
	f := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 5 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v, want stream 5 refused while the reset calls' handlers run", f)
	}
	close(e.release)
	// Once they return, a call is taken again.
	deadline := time.Now().Add(5 * time.Second)
	for id := uint32(7); ; id += 2 {
		open(id)
		select {
		case <-e.started:
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no call taken 5 s after the handlers returned")
		}
	}
}

// A message's length prefix does not make the server allocate ahead of
// the bytes: streams that declare 4 MiB and send nothing more cost the
// little they sent, where each cost 4 MiB of heap before (8 connections
// of 1,000 such streams took 33.5 GB of heap, from 80 KB sent).
func TestADeclaredLengthIsNotAllocatedAhead(t *testing.T) {
	_, _, _, addr := serve(t, Options{})
	r := dialRaw(t, addr)
	const streams = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range streams {
		id := uint32(2*i + 1)
		r.headers(id, "/test.Echo/Unary", false)
		r.fr.WriteData(id, false, []byte{0, 0, 0x3f, 0xff, 0xff}) // 4 MiB - 1 to come
	}
	// The server reads frames in order: the answer to a ping sent after
	// them means it has taken every prefix.
	r.fr.WritePing(false, [8]byte{7})
	if r.until(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }) == nil {
		t.Fatal("no answer to the ping")
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("%d streams declaring 4 MiB each: the heap grew by %d MiB, want far less than the %d MiB declared", streams, grew>>20, streams*4)
	}
}

func TestIdleAndOldConnectionsAreSentAway(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		_, _, _, addr := serve(t, Options{MaxConnectionIdle: 200 * time.Millisecond})
		r := dialRaw(t, addr)
		began := time.Now()
		g := r.goAway()
		if g == nil || g.ErrCode != http2.ErrCodeNo {
			t.Fatalf("got %v, want GOAWAY NO_ERROR", g)
		}
		if took := time.Since(began); took < 150*time.Millisecond {
			t.Errorf("GOAWAY after %s, before the idle time", took)
		}
	})
	t.Run("old, with a call that outlives the grace", func(t *testing.T) {
		_, e, _, addr := serve(t, Options{MaxConnectionAge: 200 * time.Millisecond, MaxConnectionAgeGrace: 300 * time.Millisecond})
		r := dialRaw(t, addr)
		r.headers(1, "/test.Echo/Block", false)
		r.fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
		<-e.started
		if g := r.goAway(); g == nil || g.ErrCode != http2.ErrCodeNo {
			t.Fatalf("got %v, want GOAWAY NO_ERROR", g)
		}
		if err := <-e.ended; err != context.Canceled {
			t.Errorf("the call past the grace: %v, want its context cancelled", err)
		}
	})
}

// A client that stops reading its answers is cut off after WriteTimeout,
// so the calls writing to it end.
func TestAClientThatStopsReadingIsCutOff(t *testing.T) {
	s, _, _, addr := serve(t, Options{WriteTimeout: 300 * time.Millisecond, MaxRecvMsgSize: 16 << 20})
	r := dialRaw(t, addr)
	// Windows wide open, so that only TCP stops the server's answers.
	r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxStreamID})
	r.fr.WriteWindowUpdate(0, maxStreamID-65535)
	msg := make([]byte, 8<<20) // a BytesValue of 8 MiB - 5
	n := len(msg) - 5
	msg[0] = 0x0a
	binary.PutUvarint(msg[1:], uint64(n-5)) // 4 bytes of varint for this size
	grpcMsg := append([]byte{0, 0, 0, 0, 0}, msg[:n]...)
	binary.BigEndian.PutUint32(grpcMsg[1:], uint32(n))
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range callHeaders("/test.Echo/Unary") {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	wrote := make(chan struct{})
	go func() {
		// No t.Fatal here: the writes fail once the server hangs up, and
		// the test waits for this goroutine before it ends.
		defer close(wrote)
		for _, id := range []uint32{1, 3, 5, 7} {
			if r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}) != nil {
				return // the server hung up
			}
			for b := grpcMsg; len(b) > 0; {
				k := min(len(b), 16384)
				if r.fr.WriteData(id, k == len(b), b[:k]) != nil {
					return
				}
				b = b[k:]
			}
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		open := len(s.conns)
		s.mu.Unlock()
		if open == 0 {
			r.nc.Close()
			<-wrote
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection of a client that reads nothing is still open")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A WINDOW_UPDATE that overflows a stream's window resets that stream,
// and the stream stops counting against the connection's cap.
func TestAnOverflowingStreamWindowResetsTheStream(t *testing.T) {
	s, _, _, addr := serve(t, Options{})
	r := dialRaw(t, addr)
	r.headers(1, "/test.Echo/Unary", false)
	r.fr.WriteWindowUpdate(1, maxStreamID)
	f := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("got %v, want stream 1 reset with FLOW_CONTROL_ERROR", f)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.mu.Lock()
		n := len(c.streams)
		c.mu.Unlock()
		if n != 0 {
			t.Errorf("%d streams still open after the reset", n)
		}
	}
}

// status reads frames until stream id's trailers and returns their
// grpc-status ("" when none come); r must read meta headers.
func (r *rawConn) status(id uint32) string {
	r.t.Helper()
	f := r.until(func(f http2.Frame) bool {
		m, ok := f.(*http2.MetaHeadersFrame)
		return ok && m.StreamID == id && m.StreamEnded()
	})
	if f == nil {
		return ""
	}
	for _, hf := range f.(*http2.MetaHeadersFrame).Fields {
		if hf.Name == "grpc-status" {
			return hf.Value
		}
	}
	return ""
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// MaxStreams bounds the calls open on the whole server, whatever the
// connections: each holds memory from its HEADERS on, its request come or
// not (64 connections of 1,000 such calls took 110 MB of heap).
func TestStreamsPastTheServersCapAreRefused(t *testing.T) {
	s, e, _, addr := serve(t, Options{MaxStreams: 3})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, id := range []uint32{1, 3} {
		a.headers(id, "/test.Echo/Block", false)
		a.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})
	}
	for range 2 {
		<-e.started
	}
	b.headers(1, "/test.Echo/Block", false) // the third: its request never comes
	b.headers(3, "/test.Echo/Block", false)
	f := b.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 3 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v, want the fourth call on the server refused", f)
	}
	if st := s.Stats(); st.Refused != [NumRefusals]int64{RefusedMaxStreams: 1} || st.Calls != 3 || st.Connections != 2 {
		t.Errorf("Stats: %+v, want 1 call refused for max_streams, 3 calls on 2 connections", st)
	}
	close(e.release)
	b.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	waitFor(t, "the calls ended, the server still counts some open", func() bool { return s.open.Load() == 0 })
	b.headers(5, "/test.Echo/Block", false)
	b.fr.WriteData(5, true, []byte{0, 0, 0, 0, 0})
	if got := b.until(func(f http2.Frame) bool { return f.Header().StreamID == 5 }); got == nil || got.Header().Type != http2.FrameHeaders {
		t.Fatalf("after the others ended: got %v, want the call answered", got)
	}
}

// MaxPendingBytes bounds the bytes of unfinished messages held, every
// call together: a call whose message would pass it fails, and what a call
// held is given back when it ends, however it ends.
func TestUnfinishedMessagesPastTheServersCapFail(t *testing.T) {
	const limit = 1 << 20
	s, _, _, addr := serve(t, Options{MaxPendingBytes: limit})
	r := dialRaw(t, addr)
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	chunk := make([]byte, 16<<10)
	// send opens stream id declaring 4 MiB and sends n bytes of it.
	send := func(id uint32, n int) {
		r.headers(id, "/test.Echo/Unary", false)
		r.fr.WriteData(id, false, []byte{0, 0, 0x40, 0, 0})
		for ; n > 0; n -= len(chunk) {
			r.fr.WriteData(id, false, chunk[:min(n, len(chunk))])
		}
	}
	send(1, 600<<10)
	send(3, 600<<10)
	if got := r.status(3); got != "8" {
		t.Fatalf("the call past %d bytes: got grpc-status %q, want 8 (RESOURCE_EXHAUSTED)", limit, got)
	}
	if got := s.Stats().Refused; got != [NumRefusals]int64{RefusedMaxPendingBytes: 1} {
		t.Errorf("Stats().Refused: %v, want 1 call refused for max_pending_bytes", got)
	}
	hb := headerBytes("/test.Echo/Unary")
	waitFor(t, "pending bytes as stream 1 holds them", func() bool { return s.pending.Load() == 600<<10+hb })
	r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	waitFor(t, "stream 1 reset, its bytes still pending", func() bool { return s.pending.Load() == 0 })
	send(5, 900<<10)
	waitFor(t, "stream 5's bytes held", func() bool { return s.pending.Load() == 900<<10+hb })
	r.nc.Close()
	waitFor(t, "the connection closed, bytes or calls still counted", func() bool { return s.pending.Load() == 0 && s.open.Load() == 0 })
}

// Past MaxStreams a connection holding more than its share is refused,
// but one holding less still opens calls: a few connections that hold
// many calls cannot shut the others out.
func TestAGreedyConnectionDoesNotShutOutTheOthers(t *testing.T) {
	s, _, _, addr := serve(t, Options{MaxStreams: 4})
	a := dialRaw(t, addr)
	for _, id := range []uint32{1, 3, 5, 7, 9} {
		a.headers(id, "/test.Echo/Block", false) // requests that never come
	}
	f := a.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 9 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("the one connection's fifth call: got %v, want it refused", f)
	}
	b := dialRaw(t, addr)
	for _, id := range []uint32{1, 3, 5} {
		b.headers(id, "/test.Echo/Block", false)
	}
	f = b.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 5 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("a second connection's calls past its share (2 of 4): got %v, want its third refused", f)
	}
	if got := s.open.Load(); got != 6 {
		t.Errorf("got %d calls open, want the first connection's 4 and the second's 2", got)
	}
}

func TestAdmitTakesAnEvenShareUpToTwiceTheBound(t *testing.T) {
	for _, tt := range []struct {
		total, mine, bound, conns int64
		want                      bool
	}{
		{total: 10, mine: 10, bound: 0, conns: 1, want: true}, // no bound
		{total: 4, mine: 4, bound: 4, conns: 1, want: true},   // within it
		{total: 5, mine: 5, bound: 4, conns: 1, want: false},  // past it, the only connection
		{total: 5, mine: 1, bound: 4, conns: 2, want: true},   // past it, within a share of 2
		{total: 6, mine: 3, bound: 4, conns: 2, want: false},  // past its share
		{total: 8, mine: 1, bound: 4, conns: 4, want: true},   // at twice the bound
		{total: 9, mine: 1, bound: 4, conns: 4, want: false},  // past twice the bound
		{total: 5, mine: 1, bound: 4, conns: 8, want: false},  // a share of 0
	} {
		s := &Server{}
		s.nconns.Store(tt.conns)
		if got := s.admit(tt.total, tt.mine, tt.bound); got != tt.want {
			t.Errorf("admit(total %d, mine %d, bound %d) with %d connections: got %v, want %v", tt.total, tt.mine, tt.bound, tt.conns, got, tt.want)
		}
	}
}

// Past MaxPendingBytes, a connection holding less than its share of
// unfinished bytes may still hold more.
func TestUnfinishedBytesAreSharedBetweenConnections(t *testing.T) {
	const limit = 1 << 20
	s, _, _, addr := serve(t, Options{MaxPendingBytes: limit})
	chunk := make([]byte, 16<<10)
	send := func(r *rawConn, id uint32, n int) {
		r.headers(id, "/test.Echo/Unary", false)
		r.fr.WriteData(id, false, []byte{0, 0, 0x40, 0, 0})
		for ; n > 0; n -= len(chunk) {
			r.fr.WriteData(id, false, chunk[:min(n, len(chunk))])
		}
	}
	hb := headerBytes("/test.Echo/Unary")
	a := dialRaw(t, addr)
	send(a, 1, 500<<10)
	send(a, 3, 500<<10)
	waitFor(t, "the first connection holding 1000 KiB", func() bool { return s.pending.Load() == 1000<<10+2*hb })
	b := dialRaw(t, addr)
	b.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	send(b, 1, 256<<10) // within its share of 512 KiB, past the bound
	waitFor(t, "the second connection's 256 KiB held past the bound", func() bool { return s.pending.Load() == 1256<<10+3*hb })
	send(b, 3, 512<<10) // past its share
	if got := b.status(3); got != "8" {
		t.Fatalf("the second connection past its share: got grpc-status %q, want 8 (RESOURCE_EXHAUSTED)", got)
	}
}

// A call's header list counts in the pending bytes until the client ends
// its side: calls that send long headers and nothing more are refused
// past MaxPendingBytes, where each kept its header list for good before
// (4 connections of 1,000 calls, each sending 1 MiB of headers, held
// 4.2 GB of heap; HPACK's table lets a few wire bytes name a long field
// already sent).
func TestHeaderListsCountAsPendingBytes(t *testing.T) {
	const limit = 64 << 10
	s, _, _, addr := serve(t, Options{MaxPendingBytes: limit})
	r := dialRaw(t, addr)
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	long := strings.Repeat("v", 10<<10)
	for i := range 8 {
		b.Reset()
		for _, f := range callHeaders("/test.Echo/Unary") {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		enc.WriteField(hpack.HeaderField{Name: "x-long", Value: long, Sensitive: true}) // literal each time
		r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: b.Bytes(), EndHeaders: true})
	}
	f := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 13 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v, want the seventh call (past 64 KiB of 10 KiB header lists) refused", f)
	}
	// A whole call gives its header bytes back as its request ends.
	r.fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
	each := headerBytes("/test.Echo/Unary") + int64(len("x-long")+len(long))
	waitFor(t, "the first call's header bytes given back", func() bool { return s.pending.Load() == 5*each })
}

// A unary call whose request has not come whole within RequestTimeout is
// reset, giving its places in the caps back; a streaming call is not.
func TestLateRequestsAreReset(t *testing.T) {
	s, _, _, addr := serve(t, Options{RequestTimeout: 100 * time.Millisecond})
	r := dialRaw(t, addr)
	r.headers(1, "/test.Echo/Unary", false) // its request never comes
	r.headers(3, "/test.Echo/Bidi", false)
	start := time.Now()
	f := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("got %v, want stream 1 reset with CANCEL", f)
	}
	if d := time.Since(start); d < 75*time.Millisecond {
		t.Errorf("reset after %v, before the request timeout", d)
	}
	if got := s.Stats().LateRequests; got != 1 {
		t.Errorf("Stats().LateRequests: %d, want 1", got)
	}
	waitFor(t, "the late call still counted", func() bool { return s.open.Load() == 1 })
	time.Sleep(300 * time.Millisecond)
	if got := s.open.Load(); got != 1 {
		t.Errorf("got %d calls open, want the streaming call left alone", got)
	}
	// A call whose request comes in time is answered.
	r.headers(5, "/test.Echo/Unary", false)
	r.fr.WriteData(5, true, []byte{0, 0, 0, 0, 0})
	if got := r.until(func(f http2.Frame) bool { return f.Header().StreamID == 5 }); got == nil || got.Header().Type != http2.FrameHeaders {
		t.Fatalf("a call with its request: got %v, want it answered", got)
	}
}
