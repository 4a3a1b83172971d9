package h2grpc

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
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
