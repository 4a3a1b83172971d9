package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// heldStore is a memory store whose calls wait until the gate opens, and
// that counts the calls that reached it.
type heldStore struct {
	*memory.Store
	reached atomic.Int32
	gate    chan struct{}
}

func (h *heldStore) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	h.reached.Add(1)
	<-h.gate
	return h.Store.Do(ctx, now, b, out)
}

// startHeld starts the service with tweak applied and a store whose calls
// wait until open is called (at the latest when the test ends).
func startHeld(t *testing.T, tweak func(*app.Options)) (a *app.App, hs *heldStore, open func()) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "basic.yaml"), []byte(basicConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	o := app.Defaults()
	o.ConfigPath = dir
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.LogLevel = "error"
	tweak(&o)
	hs = &heldStore{Store: memory.New(memory.Options{}), gate: make(chan struct{})}
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr), Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Store: hs})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	open = func() { once.Do(func() { close(hs.gate) }) }
	t.Cleanup(func() {
		open()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a, hs, open
}

// dialRLS returns a rate-limit client on a connection of its own to a.
func dialRLS(t *testing.T, a *app.App) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

var heldReq = &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{desc("ip", "1.1.1.1")}}

// holdCalls makes one call through each client, in the background, and
// waits until all of them are held in the store; their errors come on the
// channel returned.
func holdCalls(t *testing.T, hs *heldStore, clients ...rlsv3.RateLimitServiceClient) <-chan error {
	t.Helper()
	done := make(chan error, len(clients))
	for _, client := range clients {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := client.ShouldRateLimit(ctx, heldReq)
			done <- err
		}()
	}
	eventually(t, "the calls held in the store", func() bool { return int(hs.reached.Load()) == len(clients) })
	return done
}

// release checks that only the held calls reached the store, lets them
// go, and checks that they are answered.
func release(t *testing.T, hs *heldStore, open func(), done <-chan error) {
	t.Helper()
	held := cap(done)
	if got := hs.reached.Load(); int(got) != held {
		t.Errorf("calls that reached the store: got %d, want the %d held", got, held)
	}
	open()
	for range held {
		if err := <-done; err != nil {
			t.Errorf("a held call once released: got %v, want an answer", err)
		}
	}
}

// Past --grpc-max-concurrent-streams a further call on the same
// connection waits at the client; it never reaches the store.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	a, hs, open := startHeld(t, func(o *app.Options) { o.GRPCMaxConcurrentStreams = 2 })
	client := dialRLS(t, a)
	done := holdCalls(t, hs, client, client)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := client.ShouldRateLimit(ctx, heldReq); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a third call past 2 streams: got %v, want DeadlineExceeded", err)
	}
	release(t, hs, open, done)
}

// Past --grpc-max-streams a further call is refused whatever its
// connection, before it reaches the store; once the calls end, calls are
// taken again.
// Both gRPC servers: grpc-go's has the bound through the app's tap
// (grpcgobounds.go).
func TestGRPCMaxStreamsBoundsEveryConnectionTogether(t *testing.T) {
	for _, server := range []string{"sluice", "grpc-go"} {
		t.Run(server, func(t *testing.T) {
			a, hs, open := startHeld(t, func(o *app.Options) { o.GRPCMaxStreams = 2; o.GRPCServer = server })
			done := holdCalls(t, hs, dialRLS(t, a), dialRLS(t, a))
			third := dialRLS(t, a)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := third.ShouldRateLimit(ctx, heldReq); err == nil {
				t.Error("a third call on a third connection: got an answer, want it refused")
			}
			// The metrics say so.
			if got := gaugeOrCounter(t, a.Registry(), "sluice_grpc_calls_open", nil); got != 2 {
				t.Errorf("sluice_grpc_calls_open: %v, want the 2 held", got)
			}
			if got := gaugeOrCounter(t, a.Registry(), "sluice_grpc_calls_refused_total", map[string]string{"reason": "max_streams"}); got < 1 {
				t.Errorf(`sluice_grpc_calls_refused_total{reason="max_streams"}: %v, want at least 1`, got)
			}
			if got := gaugeOrCounter(t, a.Registry(), "sluice_grpc_connections", nil); got != 3 {
				t.Errorf("sluice_grpc_connections: %v, want 3", got)
			}
			release(t, hs, open, done)
			if _, err := third.ShouldRateLimit(context.Background(), heldReq); err != nil {
				t.Errorf("a call once the others ended: got %v, want an answer", err)
			}
		})
	}
}

// A unary call whose request has not come whole within
// --http-read-timeout is reset, and its place given back.
func TestAGRPCRequestNotWholeInTheReadTimeoutIsReset(t *testing.T) {
	for _, server := range []string{"sluice", "grpc-go"} {
		t.Run(server, func(t *testing.T) { testLateRequest(t, server) })
	}
}

// testLateRequest opens a call on server and sends no request: Sluice's
// server resets it (RST_STREAM CANCEL), grpc-go's answers CANCELLED (the
// app's tap cancels the context grpc-go reads the request under).
func testLateRequest(t *testing.T, server string) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.HTTPReadTimeout = 200 * time.Millisecond; o.GRPCServer = server })
	nc, err := net.Dial("tcp", ta.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{":authority", "sluice"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}) // and no request
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	for ended := false; !ended; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the call neither reset nor answered within 5 s: %v", err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if server != "sluice" || f.StreamID != 1 || f.ErrCode != http2.ErrCodeCancel {
				t.Fatalf("got %v, want stream 1 reset with CANCEL", f)
			}
			ended = true
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				if server != "grpc-go" || f.StreamID != 1 || f.PseudoValue("status") != "200" || grpcStatus(f) != "1" {
					t.Fatalf("got %v, want stream 1 answered grpc-status 1 (CANCELLED)", f.Fields)
				}
				ended = true
			}
		}
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("reset after %v, before the read timeout", d)
	}
	if got := gaugeOrCounter(t, ta.Registry(), "sluice_grpc_late_requests_total", nil); got != 1 {
		t.Errorf("sluice_grpc_late_requests_total: %v, want 1", got)
	}
}

// The gRPC port ends a connection with its GOAWAY and the end of the
// stream, not a reset, when the client has sent bytes the server has not
// read: the listener's connections keep their CloseWrite, which the
// server's lingering close needs (x/net's netutil.LimitListener, which
// --max-connections used before, hid it).
func TestGRPCConnectionsEndWithoutAReset(t *testing.T) {
	for _, max := range []int{0, 8} {
		t.Run(fmt.Sprintf("max-connections %d", max), func(t *testing.T) {
			ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.MaxConnections = max })
			nc, err := net.Dial("tcp", ta.GRPCAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// The preface, SETTINGS, a GOAWAY, then 100 KB of frames the
			// server reads only after it has acted on the GOAWAY.
			var b bytes.Buffer
			b.WriteString(http2.ClientPreface)
			fr := http2.NewFramer(&b, nil)
			fr.WriteSettings()
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			for range 8000 {
				fr.WriteWindowUpdate(0, 1)
			}
			go nc.Write(b.Bytes())
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			rd := http2.NewFramer(nil, nc)
			for {
				if _, err = rd.ReadFrame(); err != nil {
					break
				}
			}
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the connection ended with %v, want its end of stream", err)
			}
		})
	}
}

// grpcStatus is the grpc-status field of f, "" when it has none.
func grpcStatus(f *http2.MetaHeadersFrame) string {
	for _, hf := range f.Fields {
		if hf.Name == "grpc-status" {
			return hf.Value
		}
	}
	return ""
}

// gaugeOrCounter returns the value of the gauge or counter name with the
// labels given (all of them, at least), and fails when reg has none.
func gaugeOrCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == k && lp.GetValue() == v
				}
				if !found {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v registered", name, labels)
	return 0
}
