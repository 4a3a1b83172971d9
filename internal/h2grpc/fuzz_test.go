package h2grpc

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzFrames feeds a connection whatever bytes follow the preface and
// SETTINGS: the server must neither panic nor hang, and the connection
// must end when the client hangs up.
func FuzzFrames(f *testing.F) {
	call := func(path string, msg []byte, extra func(fr *http2.Framer)) []byte {
		var b, hb bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		fr.AllowIllegalWrites = true
		enc := hpack.NewEncoder(&hb)
		for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "x"}, {"content-type", "application/grpc"}, {"grpc-timeout", "1S"}} {
			enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(1, true, append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...))
		if extra != nil {
			extra(fr)
		}
		return b.Bytes()
	}
	f.Add(byte(0), call("/test.Echo/Unary", []byte{0x0a, 0x01, 'x'}, nil))
	f.Add(byte(1), call("/test.Echo/Block", nil, func(fr *http2.Framer) { fr.WriteRSTStream(1, http2.ErrCodeCancel) }))
	f.Add(byte(2), call("/test.Echo/Bidi", []byte{0x0a, 0x00}, func(fr *http2.Framer) {
		fr.WritePing(false, [8]byte{})
		fr.WriteWindowUpdate(0, 1)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		fr.WriteGoAway(1, http2.ErrCodeNo, nil)
	}))
	f.Add(byte(3), []byte("\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add(byte(8), call("/test.Echo/Unary", []byte{0x0a, 0x01, 'x'}, nil))
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		// Small server-wide bounds, so that frames reach them; whatever
		// the frames, the counts must return to zero once the connection
		// is gone.
		s := NewServer(Options{Inline: mode&1 == 1, Workers: int(mode>>1) & 3, MaxConcurrentStreams: 8, MaxRecvMsgSize: 1 << 16,
			MaxStreams: 4, MaxPendingBytes: 512, RequestTimeout: 20 * time.Millisecond})
		e := newEcho()
		if mode&1 == 1 {
			// Inline calls run on the connection's reader, which reads
			// nothing (neither a cancellation nor the hang-up) until the
			// call returns: Options.Inline is for handlers that never wait
			// on their context, so Block returns at once here.
			close(e.release)
		}
		s.RegisterService(&echoDesc, e)
		if mode&8 != 0 {
			s.HandleBatch("/test.Echo/Unary", func(calls []Call) {
				for i := range calls {
					in := new(wrapperspb.BytesValue)
					if calls[i].Err = calls[i].Decode(in); calls[i].Err == nil {
						calls[i].Reply = in
					}
				}
			})
		}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { s.serveConn(server); close(done) }()
		go io.Copy(io.Discard, client)
		client.Write([]byte(http2.ClientPreface))
		http2.NewFramer(client, nil).WriteSettings()
		client.Write(data)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after the client hung up")
		}
		s.Stop()
		if open, pending := s.open.Load(), s.pending.Load(); open != 0 || pending != 0 {
			t.Fatalf("after the connection: %d calls open and %d bytes pending, want 0 and 0", open, pending)
		}
	})
}
