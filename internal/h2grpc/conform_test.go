package h2grpc

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fieldsWith is callHeaders for path, with the fields named in drop left
// out and extra added at the end.
func fieldsWith(path string, drop []string, extra ...[2]string) [][2]string {
	var fs [][2]string
next:
	for _, f := range callHeaders(path) {
		for _, d := range drop {
			if f[0] == d {
				continue next
			}
		}
		fs = append(fs, f)
	}
	return append(fs, extra...)
}

// headersOf sends fields as stream id's header block, with prio when it
// is not the zero value.
func (r *rawConn) headersOf(id uint32, fields [][2]string, end bool, prio http2.PriorityParam) {
	r.t.Helper()
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.Bytes(), EndHeaders: true, EndStream: end, Priority: prio}); err != nil {
		r.t.Fatal(err)
	}
}

// unaryRequest is an empty unary request message.
var unaryRequest = []byte{0, 0, 0, 0, 0}

// answered and silent stand for what resetOrAnswer saw when a stream
// was not reset: its trailers, or nothing.
const (
	answered = http2.ErrCode(1<<32 - 1)
	silent   = http2.ErrCode(1<<32 - 2)
)

// resetOrAnswer reads frames until stream id is reset (its code) or
// answered with trailers (answered), or nothing comes (silent).
func (r *rawConn) resetOrAnswer(id uint32) http2.ErrCode {
	f := r.until(func(f http2.Frame) bool {
		if f.Header().StreamID != id {
			return false
		}
		_, rst := f.(*http2.RSTStreamFrame)
		return rst || f.Header().Type == http2.FrameHeaders && f.Header().Flags.Has(http2.FlagHeadersEndStream)
	})
	switch f := f.(type) {
	case *http2.RSTStreamFrame:
		return f.ErrCode
	case nil:
		return silent
	}
	return answered
}

// A request RFC 9113 calls malformed (section 8.1.1: a pseudo-header
// missing or empty, a connection-specific field, a TE other than
// "trailers", a content-length its DATA frames do not add up to) and a
// stream that depends on itself (section 5.3.1) are stream errors of
// type PROTOCOL_ERROR; the connection goes on.
func TestMalformedRequestsAreResetAsProtocolErrors(t *testing.T) {
	_, _, _, addr := serve(t, Options{})
	const path = "/test.Echo/Unary"
	for _, c := range []struct {
		name string
		send func(r *rawConn, id uint32)
		want http2.ErrCode
	}{
		{"no :method", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, []string{":method"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"no :scheme", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, []string{":scheme"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"no :path", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, []string{":path"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"an empty :path", func(r *rawConn, id uint32) { r.headersOf(id, fieldsWith("", nil), false, http2.PriorityParam{}) }, http2.ErrCodeProtocol},
		{"te: gzip", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, []string{"te"}, [2]string{"te", "gzip"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"transfer-encoding", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, nil, [2]string{"transfer-encoding", "chunked"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"keep-alive", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, nil, [2]string{"keep-alive", "timeout=5"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"content-length above the DATA", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, nil, [2]string{"content-length", "6"}), false, http2.PriorityParam{})
			r.fr.WriteData(id, true, unaryRequest)
		}, http2.ErrCodeProtocol},
		{"content-length below the DATA", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, nil, [2]string{"content-length", "4"}), false, http2.PriorityParam{})
			r.fr.WriteData(id, false, unaryRequest[:2])
			r.fr.WriteData(id, true, unaryRequest[2:])
		}, http2.ErrCodeProtocol},
		{"content-length not a number", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, nil, [2]string{"content-length", "five"}), false, http2.PriorityParam{})
		}, http2.ErrCodeProtocol},
		{"HEADERS depending on its own stream", func(r *rawConn, id uint32) {
			r.headersOf(id, callHeaders(path), false, http2.PriorityParam{StreamDep: id, Weight: 15})
		}, http2.ErrCodeProtocol},
		{"PRIORITY depending on its own stream", func(r *rawConn, id uint32) {
			r.headers(id, path, false)
			r.fr.WritePriority(id, http2.PriorityParam{StreamDep: id, Weight: 15})
		}, http2.ErrCodeProtocol},
		// What a well-formed request may carry is still served.
		{"te: trailers and a content-length that adds up", func(r *rawConn, id uint32) {
			r.headersOf(id, fieldsWith(path, nil, [2]string{"content-length", "5"}), false, http2.PriorityParam{})
			r.fr.WriteData(id, false, unaryRequest[:3])
			r.fr.WriteData(id, true, unaryRequest[3:])
		}, answered},
		{"PRIORITY depending on another stream", func(r *rawConn, id uint32) {
			r.fr.WritePriority(id+2, http2.PriorityParam{StreamDep: 1, Weight: 15})
			r.headers(id, path, false)
			r.fr.WritePriority(id, http2.PriorityParam{StreamDep: id + 2, Weight: 15})
			r.fr.WriteData(id, true, unaryRequest)
		}, answered},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			c.send(r, 3)
			if got := r.resetOrAnswer(3); got != c.want {
				t.Fatalf("stream 3: got %v, want %v ", got, c.want)
			}
			// The connection goes on: the next call is answered.
			r.headers(7, path, false)
			r.fr.WriteData(7, true, unaryRequest)
			if got := r.resetOrAnswer(7); got != answered {
				t.Fatalf("the next call on the connection: got %v, want it answered", got)
			}
		})
	}
}

// RST_STREAM and WINDOW_UPDATE on a stream the client never opened are
// connection errors of type PROTOCOL_ERROR (RFC 9113 section 5.1, "idle");
// on a stream that has ended they are not.
func TestFramesOnIdleStreamsEndTheConnection(t *testing.T) {
	_, _, _, addr := serve(t, Options{})
	for _, c := range []struct {
		name string
		send func(r *rawConn)
	}{
		{"RST_STREAM", func(r *rawConn) { r.fr.WriteRSTStream(5, http2.ErrCodeCancel) }},
		{"WINDOW_UPDATE", func(r *rawConn) { r.fr.WriteWindowUpdate(5, 100) }},
		{"RST_STREAM on an even stream", func(r *rawConn) { r.fr.WriteRSTStream(2, http2.ErrCodeCancel) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			c.send(r)
			if g := r.goAway(); g == nil || g.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("got %v, want GOAWAY PROTOCOL_ERROR", g)
			}
		})
	}
	t.Run("on a stream that ended", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.headers(1, "/test.Echo/Unary", false)
		r.fr.WriteData(1, true, unaryRequest)
		if got := r.resetOrAnswer(1); got != answered {
			t.Fatalf("stream 1: got %v, want it answered", got)
		}
		r.fr.WriteWindowUpdate(1, 100)
		r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		r.fr.WritePing(false, [8]byte{'s', 't', 'i', 'l', 'l'})
		f := r.until(func(f http2.Frame) bool {
			switch f.(type) {
			case *http2.PingFrame, *http2.GoAwayFrame:
				return true
			}
			return false
		})
		if p, ok := f.(*http2.PingFrame); !ok || !p.IsAck() {
			t.Fatalf("got %v, want the ping answered", f)
		}
	})
}
