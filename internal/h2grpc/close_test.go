package h2grpc

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// readToEnd reads frames until the connection ends and returns the last
// GOAWAY read and the error that ended the reading.
func (r *rawConn) readToEnd() (*http2.GoAwayFrame, error) {
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var last *http2.GoAwayFrame
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return last, err
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			last = g
		}
	}
}

// sendWithBacklog writes first and then 100 KB of frames that need no
// answer in one write, so that the server, which reads 32 KiB at a time,
// acts on first with the rest still unread in its socket.
func (r *rawConn) sendWithBacklog(first func(fr *http2.Framer)) {
	r.t.Helper()
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	fr.AllowIllegalWrites = true
	first(fr)
	for range 8000 {
		fr.WriteWindowUpdate(0, 1)
	}
	go r.nc.Write(b.Bytes())
}

// A connection the server ends ends with its GOAWAY and the end of the
// stream, not a reset, even when the client has sent frames the server
// has not read: closing a socket with unread data makes the kernel reset
// it, and a reset may throw away what the server wrote last (its GOAWAY,
// its last answers) before the client reads it. So the server shuts its
// side and reads on, for a while, until the client closes.
func TestConnectionsEndWithoutAReset(t *testing.T) {
	_, _, _, addr := serve(t, Options{})
	for _, c := range []struct {
		name  string
		first func(fr *http2.Framer)
		want  http2.ErrCode
	}{
		{"a client's GOAWAY", func(fr *http2.Framer) { fr.WriteGoAway(0, http2.ErrCodeNo, nil) }, http2.ErrCodeNo},
		{"a protocol error", func(fr *http2.Framer) { fr.WriteData(9, false, []byte{0}) }, http2.ErrCodeProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.sendWithBacklog(c.first)
			g, err := r.readToEnd()
			if c.want != http2.ErrCodeNo && (g == nil || g.ErrCode != c.want) {
				t.Errorf("the last GOAWAY read: %v, want %v", g, c.want)
			}
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the connection ended with %v, want its end of stream", err)
			}
		})
	}
}

// A client that streams on after the server ended its connection (here an
// endless header block, past the 1 MiB a header list may take) is read
// for at most lingerBytes more, then cut off: the lingering close does not
// let it keep the server reading at line rate for lingerTime.
func TestALingeringCloseReadsABoundedAmount(t *testing.T) {
	_, _, _, addr := serve(t, Options{})
	r := dialRaw(t, addr)
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range callHeaders("/test.Echo/Unary") {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b.Bytes()}) // no END_HEADERS
	var c bytes.Buffer
	junk := hpack.NewEncoder(&c)
	for c.Len() < 15000 {
		junk.WriteField(hpack.HeaderField{Name: "x-junk", Value: strings.Repeat("a", 1000), Sensitive: true})
	}
	const frames = 20000 // 300 MB
	sent := make(chan int, 1)
	go func() {
		n := 0
		for ; n < frames; n++ {
			if r.fr.WriteContinuation(1, false, c.Bytes()) != nil {
				break
			}
		}
		sent <- n
	}()
	if g := r.goAway(); g == nil || g.ErrCode == http2.ErrCodeNo {
		t.Fatalf("got %v, want a GOAWAY with an error code", g)
	}
	select {
	case n := <-sent:
		if mb := n * c.Len() >> 20; n == frames || mb > 64 {
			t.Fatalf("the server took %d MB of an endless header block, want it cut off after a few", mb)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client could still write after 10 s")
	}
}
