package h2grpc

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
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
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, nc: nc, fr: fr}
}

// goAway reads frames until a GOAWAY, which it returns, or until the
// connection ends or 5 seconds pass (nil).
func (r *rawConn) goAway() *http2.GoAwayFrame {
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Logf("read: %v", err)
			return nil
		}
		r.t.Logf("frame: %v", f)
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g
		}
	}
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
