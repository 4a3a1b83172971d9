package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	h2TestMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	// h2FailMessage has bytes grpc-go percent-encodes in grpc-message.
	h2FailMessage = "no luck: 100% sure,\tünïcode"
)

// h2LongMessage is too long for one frame: the server sends its trailers
// in HEADERS and CONTINUATION frames.
var h2LongMessage = strings.Repeat("long ", 8000)

// h2TestServer is a real grpc-go rate limit service whose answers are a
// function of the request (h2Answer). Domains "fail" and "fail long" get
// errors; domain "slow" waits until the call is cancelled; domain "hold"
// signals arrived and waits for release.
type h2TestServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	arrived, release chan struct{}
}

func (s *h2TestServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	switch req.Domain {
	case "fail":
		return nil, status.Error(codes.ResourceExhausted, h2FailMessage)
	case "fail long":
		return nil, status.Error(codes.FailedPrecondition, h2LongMessage)
	case "slow":
		<-ctx.Done()
		return nil, ctx.Err()
	case "hold":
		s.arrived <- struct{}{}
		<-s.release
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return h2Answer(req, md), nil
}

// h2Answer echoes the request: the domain as the raw body, one status per
// descriptor naming its entries, the count of descriptors as the limit,
// a few request headers as response headers, and OVER_LIMIT for domains
// that start with "over".
func h2Answer(req *rlsv3.RateLimitRequest, md metadata.MD) *rlsv3.RateLimitResponse {
	code := rlsv3.RateLimitResponse_OK
	if strings.HasPrefix(req.Domain, "over") {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: code, RawBody: []byte(req.Domain)}
	for i, d := range req.Descriptors {
		var entries []string
		for _, e := range d.Entries {
			entries = append(entries, e.Key+"="+e.Value)
		}
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           code,
			LimitRemaining: uint32(i),
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
				Name:            strings.Join(entries, ","),
				RequestsPerUnit: uint32(len(req.Descriptors)),
				Unit:            rlsv3.RateLimitResponse_RateLimit_SECOND,
			},
		})
	}
	for _, k := range []string{":authority", "content-type", "user-agent"} {
		for _, v := range md.Get(k) {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
		}
	}
	return resp
}

// h2Request builds a request for domain with n descriptors whose values
// carry tag.
func h2Request(domain string, n int, tag string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for i := range n {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{
			{Key: "k" + strconv.Itoa(i), Value: tag},
		}})
	}
	return req
}

// h2Padded returns prefix followed by tag repeated to size bytes.
func h2Padded(prefix, tag string, size int) string {
	pad := strings.Repeat(tag+".", size/(len(tag)+1)+1)
	return (prefix + pad)[:size]
}

// startH2Server serves an h2TestServer on a free port until the test ends.
func startH2Server(t testing.TB, s *h2TestServer, opts ...grpc.ServerOption) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// dialH2Test dials addr with a receive window of window bytes and closes
// the connection when the test ends.
func dialH2Test(t testing.TB, addr string, window uint32) *h2Conn {
	t.Helper()
	c, err := dialH2Window(context.Background(), addr, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// h2Ask sends req over c and decodes the answer.
func h2Ask(ctx context.Context, c *h2Conn, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	msg, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	b, err := c.call(ctx, h2TestMethod, msg)
	if err != nil {
		return nil, err
	}
	resp := &rlsv3.RateLimitResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, fmt.Errorf("decode the response: %w", err)
	}
	return resp, nil
}

// h2Want is what the server computes for req sent by an h2Conn to addr.
func h2Want(req *rlsv3.RateLimitRequest, addr string) *rlsv3.RateLimitResponse {
	return h2Answer(req, metadata.Pairs(":authority", addr, "content-type", "application/grpc"))
}

// h2Diff describes how got differs from want without printing large
// bodies, or returns "".
func h2Diff(got, want *rlsv3.RateLimitResponse) string {
	if proto.Equal(got, want) {
		return ""
	}
	return fmt.Sprintf("got code %v, %d statuses, %d headers, %d body bytes; want %v, %d, %d, %d",
		got.OverallCode, len(got.Statuses), len(got.ResponseHeadersToAdd), len(got.RawBody),
		want.OverallCode, len(want.Statuses), len(want.ResponseHeadersToAdd), len(want.RawBody))
}

func TestH2CallReturnsWhatTheServerComputed(t *testing.T) {
	t.Parallel()
	addr, _ := startH2Server(t, &h2TestServer{})
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{name: "a plain request gets an OK", req: h2Request("bench", 1, "v1")},
		{name: "an over-limit domain gets OVER_LIMIT", req: h2Request("over", 3, "v2")},
		{name: "a request without descriptors gets no statuses", req: h2Request("bench", 0, "")},
		{name: "a 2 KB domain and 100 descriptors", req: h2Request(h2Padded("over", "pad", 2048), 100, "v3")},
		// Larger than the server's 16 KB frames and its 64 KB windows, and
		// than our smallest receive window.
		{name: "a 1 MB request and response", req: h2Request(h2Padded("bench", "big", 1<<20), 10, "v4")},
	}
	for _, window := range []uint32{h2RecvWindow, h2DefaultWindow} {
		c := dialH2Test(t, addr, window)
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s, receive window %d", tt.name, window), func(t *testing.T) {
				got, err := h2Ask(context.Background(), c, tt.req)
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				if d := h2Diff(got, h2Want(tt.req, addr)); d != "" {
					t.Fatal(d)
				}
			})
		}
	}
}

func TestH2CallReportsGRPCErrors(t *testing.T) {
	t.Parallel()
	addr, _ := startH2Server(t, &h2TestServer{})
	c := dialH2Test(t, addr, h2RecvWindow)
	longMethod := "/" + strings.Repeat("x", 20000) + "/Nope"
	tests := []struct {
		name     string
		domain   string
		method   string
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "a handler's error keeps its code and message", domain: "fail", method: h2TestMethod, wantCode: codes.ResourceExhausted, wantMsg: h2FailMessage},
		{name: "an error message longer than a frame arrives whole", domain: "fail long", method: h2TestMethod, wantCode: codes.FailedPrecondition, wantMsg: h2LongMessage},
		{name: "an unknown method is unimplemented", domain: "bench", method: "/envoy.service.ratelimit.v3.RateLimitService/Nope", wantCode: codes.Unimplemented, wantMsg: "unknown method Nope"},
		{name: "a method name longer than a frame arrives whole", domain: "bench", method: longMethod, wantCode: codes.Unimplemented, wantMsg: longMethod[1:20001]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := proto.Marshal(h2Request(tt.domain, 1, "v"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.call(context.Background(), tt.method, msg)
			if err == nil {
				t.Fatalf("got a %d byte response, want an error", len(resp))
			}
			if got := status.Code(err); got != tt.wantCode {
				t.Errorf("got code %v, want %v", got, tt.wantCode)
			}
			if got := status.Convert(err).Message(); !strings.Contains(got, tt.wantMsg) {
				t.Errorf("got message %.80q, want it to contain %.80q", got, tt.wantMsg)
			}
			if s := err.Error(); !strings.Contains(s, tt.wantCode.String()) || !strings.Contains(s, tt.wantMsg) {
				t.Errorf("got error text %.80q, want the code %v and %.80q", s, tt.wantCode, tt.wantMsg)
			}
		})
	}
	// The connection is still good after errors.
	req := h2Request("bench", 2, "after")
	got, err := h2Ask(context.Background(), c, req)
	if err != nil {
		t.Fatalf("a call after the errors: got %v, want no error", err)
	}
	if d := h2Diff(got, h2Want(req, addr)); d != "" {
		t.Fatal(d)
	}
}

func TestH2ManyConcurrentCallsOnOneConnection(t *testing.T) {
	t.Parallel()
	const goroutines = 64
	tests := []struct {
		name   string
		window uint32
		calls  int
	}{
		{name: "with the default receive window", window: h2RecvWindow, calls: 500},
		// Re-credits our windows every 32 KB.
		{name: "with the smallest receive window", window: h2DefaultWindow, calls: 150},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, _ := startH2Server(t, &h2TestServer{})
			c := dialH2Test(t, addr, tt.window)
			var sent atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range tt.calls {
						// Every answer differs, and each is over 2 KB either way.
						tag := fmt.Sprintf("g%d-%d", g, i)
						prefix := "bench"
						if i%3 == 0 {
							prefix = "over"
						}
						req := h2Request(h2Padded(prefix, tag, 2048+i%7), 1+i%8, tag)
						sent.Add(int64(proto.Size(req)))
						if !h2AskRight(t, c, addr, req, fmt.Sprintf("goroutine %d call %d", g, i)) {
							return
						}
					}
				})
			}
			wg.Wait()
			// Requests and responses alike must overrun the 64 KB windows many times.
			if got, want := sent.Load(), int64(100*h2DefaultWindow); got < want {
				t.Errorf("got %d request bytes, want at least %d", got, want)
			}
		})
	}
}

// h2AskRight makes the call req on c and reports, naming it what, an
// error or an answer other than the test server's for it.
func h2AskRight(t *testing.T, c *h2Conn, addr string, req *rlsv3.RateLimitRequest, what string) bool {
	t.Helper()
	got, err := h2Ask(context.Background(), c, req)
	if err != nil {
		t.Errorf("%s: got %v, want no error", what, err)
		return false
	}
	if d := h2Diff(got, h2Want(req, addr)); d != "" {
		t.Errorf("%s: %s", what, d)
		return false
	}
	return true
}

func TestH2CallWaitsForAFreeStreamSlot(t *testing.T) {
	t.Parallel()
	// grpc-go refuses streams over its limit, so any call that did not wait
	// would fail.
	addr, _ := startH2Server(t, &h2TestServer{}, grpc.MaxConcurrentStreams(2))
	c := dialH2Test(t, addr, h2RecvWindow)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				req := h2Request("bench", 2, fmt.Sprintf("g%d-%d", g, i))
				if !h2AskRight(t, c, addr, req, fmt.Sprintf("goroutine %d call %d", g, i)) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestH2CallReturnsTheContextError(t *testing.T) {
	t.Parallel()
	addr, _ := startH2Server(t, &h2TestServer{}, grpc.MaxConcurrentStreams(1))
	c := dialH2Test(t, addr, h2RecvWindow)
	slow, err := proto.Marshal(h2Request("slow", 1, "v"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a deadline while waiting for the answer", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := c.call(ctx, h2TestMethod, slow); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want %v", err, context.DeadlineExceeded)
		}
	})
	t.Run("a cancellation while waiting for the answer", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		if _, err := c.call(ctx, h2TestMethod, slow); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want %v", err, context.Canceled)
		}
	})
	t.Run("a context cancelled before the call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.call(ctx, h2TestMethod, slow); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want %v", err, context.Canceled)
		}
	})
	t.Run("a deadline while waiting for a stream slot", func(t *testing.T) {
		// The server allows one stream, which a slow call holds.
		holdCtx, release := context.WithCancel(context.Background())
		held := make(chan error, 1)
		go func() {
			_, err := c.call(holdCtx, h2TestMethod, slow)
			held <- err
		}()
		for !h2Active(c, 1) {
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.call(ctx, h2TestMethod, slow)
		release()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want %v", err, context.DeadlineExceeded)
		}
		if err := <-held; !errors.Is(err, context.Canceled) {
			t.Fatalf("the slow call: got %v, want %v", err, context.Canceled)
		}
	})

	// Abandoned streams gave back their slots: the single slot serves more
	// calls.
	for i := range 3 {
		req := h2Request("bench", 1, strconv.Itoa(i))
		got, err := h2Ask(context.Background(), c, req)
		if err != nil {
			t.Fatalf("call %d after the cancellations: got %v, want no error", i, err)
		}
		if d := h2Diff(got, h2Want(req, addr)); d != "" {
			t.Fatal(d)
		}
	}
	if !h2Active(c, 0) {
		t.Error("got streams still active, want none")
	}
}

// h2Active reports whether c counts n active streams.
func h2Active(c *h2Conn, n uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active == n && len(c.streams) == int(n)
}

// TestH2ServerStoppedMidRun is not parallel: it counts goroutines.
func TestH2ServerStoppedMidRun(t *testing.T) {
	baseline := runtime.NumGoroutine()
	func() {
		addr, srv := startH2Server(t, &h2TestServer{})
		c, err := dialH2(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var calls atomic.Int64
		errs := make(chan error, 64)
		for g := range 64 {
			go func() {
				domain := "bench"
				if g%8 == 0 {
					domain = "slow" // pending when the server stops
				}
				for i := 0; ; i++ {
					req := h2Request(h2Padded(domain, "x", 1024), 2, strconv.Itoa(i))
					if _, err := h2Ask(context.Background(), c, req); err != nil {
						errs <- err
						return
					}
					calls.Add(1)
				}
			}()
		}
		for calls.Load() < 1000 {
			runtime.Gosched()
		}
		srv.Stop()
		timeout := time.After(5 * time.Second)
		for g := range 64 {
			select {
			case err := <-errs:
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					t.Errorf("goroutine %d: got %v, want a connection error", g, err)
				}
			case <-timeout:
				t.Fatalf("%d of 64 callers still blocked 5s after the server stopped", 64-g)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := h2Ask(ctx, c, h2Request("bench", 1, "v")); err == nil || ctx.Err() != nil {
			t.Errorf("a call after the server stopped: got %v, want a prompt error", err)
		}
	}()
	for range 250 {
		if runtime.NumGoroutine() <= baseline {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("got %d goroutines, want at most %d as before:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
}

func TestH2GoAwayLetsOpenCallsFinishAndRefusesNewOnes(t *testing.T) {
	t.Parallel()
	s := &h2TestServer{arrived: make(chan struct{}), release: make(chan struct{})}
	addr, srv := startH2Server(t, s)
	c := dialH2Test(t, addr, h2RecvWindow)
	req := h2Request("hold", 1, "v")
	held := make(chan error, 1)
	go func() {
		got, err := h2Ask(context.Background(), c, req)
		if err == nil {
			if d := h2Diff(got, h2Want(req, addr)); d != "" {
				err = errors.New(d)
			}
		}
		held <- err
	}()
	<-s.arrived
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	for {
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		if err != nil {
			break
		}
		runtime.Gosched()
	}
	if _, err := h2Ask(context.Background(), c, h2Request("bench", 1, "v")); !errors.Is(err, errH2GoAway) {
		t.Errorf("a call after GOAWAY: got %v, want %v", err, errH2GoAway)
	}
	close(s.release)
	if err := <-held; err != nil {
		t.Errorf("the call open at GOAWAY: got %v, want no error", err)
	}
	<-stopped
}

func TestH2DialRespectsTheContext(t *testing.T) {
	t.Parallel()
	// A server that accepts and never speaks HTTP/2.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			nc, err := lis.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c, err := dialH2(ctx, lis.Addr().String())
	if !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("got %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestH2StreamIDsRunOutWithoutWrapping(t *testing.T) {
	t.Parallel()
	addr, _ := startH2Server(t, &h2TestServer{})
	c := dialH2Test(t, addr, h2RecvWindow)
	c.mu.Lock()
	c.nextID = h2MaxStreamID // the last id a client may use
	c.mu.Unlock()
	req := h2Request("bench", 1, "last")
	got, err := h2Ask(context.Background(), c, req)
	if err != nil {
		t.Fatalf("the call on the last stream id: got %v, want no error", err)
	}
	if d := h2Diff(got, h2Want(req, addr)); d != "" {
		t.Fatal(d)
	}
	if _, err := h2Ask(context.Background(), c, req); !errors.Is(err, errH2StreamIDs) {
		t.Fatalf("the call after it: got %v, want %v", err, errH2StreamIDs)
	}
}

func TestH2CloseFailsLaterCalls(t *testing.T) {
	t.Parallel()
	addr, _ := startH2Server(t, &h2TestServer{})
	c, err := dialH2(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h2Ask(context.Background(), c, h2Request("bench", 1, "v")); err != nil {
		t.Fatalf("got %v, want no error", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: got %v, want nil", err)
	}
	if _, err := h2Ask(context.Background(), c, h2Request("bench", 1, "v")); !errors.Is(err, errH2Closed) {
		t.Fatalf("a call after Close: got %v, want %v", err, errH2Closed)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("a second Close: got %v, want nil", err)
	}
}

// The header blocks of a connection's requests decode, in order, to the
// request's headers: indexed once the server's table holds them, literals
// when it is too small, and again after the server changes its table size
// or the method changes.
func TestH2HeaderBlockDecodes(t *testing.T) {
	t.Parallel()
	long := "/" + strings.Repeat("m", 4000) // too big for a 4096-byte table
	c := &h2Conn{authority: "127.0.0.1:8081", peerTable: h2TableSize}
	var got []hpack.HeaderField
	d := hpack.NewDecoder(h2TableSize, func(f hpack.HeaderField) { got = append(got, f) })
	steps := []struct {
		name      string
		method    string
		table     uint32 // the server's HEADER_TABLE_SIZE before the block, 0: unchanged
		wantBytes int    // the block's length, 0: not checked
	}{
		{name: "first block", method: h2TestMethod},
		{name: "second block, indexed", method: h2TestMethod, wantBytes: 6},
		{name: "third block, indexed", method: h2TestMethod, wantBytes: 6},
		{name: "a method too big for the table", method: long},
		{name: "again, still literals", method: long},
		{name: "back to the short method", method: h2TestMethod},
		{name: "indexed again", method: h2TestMethod, wantBytes: 6},
		{name: "the server shrinks its table", method: h2TestMethod, table: 64},
		{name: "literals in a small table", method: h2TestMethod},
		{name: "the server grows its table", method: h2TestMethod, table: 8192},
		{name: "indexed in the grown table", method: h2TestMethod, wantBytes: 6},
		{name: "indexed once more", method: h2TestMethod, wantBytes: 6},
	}
	for _, step := range steps {
		if step.table != 0 {
			// As handleSettings does, and as the server's decoder does on
			// our SETTINGS ack.
			c.peerTable, c.hreset = step.table, true
			d.SetAllowedMaxDynamicTableSize(step.table)
		}
		got = got[:0]
		block := c.headerBlock(step.method)
		if _, err := d.Write(block); err != nil {
			t.Fatalf("%s: decode: %v", step.name, err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("%s: decode: %v", step.name, err)
		}
		want := []hpack.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: step.method},
			{Name: ":authority", Value: "127.0.0.1:8081"},
			{Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"},
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", step.name, got, want)
		}
		if step.wantBytes != 0 && len(block) != step.wantBytes {
			t.Errorf("%s: block of %d bytes, want %d", step.name, len(block), step.wantBytes)
		}
	}
}

func TestH2DecodeMessage(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{name: "plain text stays", in: "no luck", want: "no luck"},
		{name: "escapes decode", in: "100%25 sure,%09%C3%BC", want: "100% sure,\tü"},
		{name: "a lone percent stays", in: "50%", want: "50%"},
		{name: "a short escape at the end stays", in: "x%4", want: "x%4"},
		{name: "a bad escape stays", in: "%zz%4g", want: "%zz%4g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := h2DecodeMessage(tt.in); got != tt.want {
				t.Errorf("h2DecodeMessage(%q): got %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// h2EncodeMessage percent-encodes s the way gRPC servers encode
// grpc-message.
func h2EncodeMessage(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func FuzzH2DecodeMessage(f *testing.F) {
	f.Add(h2FailMessage)
	f.Add("%%%4")
	f.Fuzz(func(t *testing.T, s string) {
		if got := h2DecodeMessage(h2EncodeMessage(s)); got != s {
			t.Errorf("decode(encode(%q)): got %q", s, got)
		}
		h2DecodeMessage(s) // must not panic
	})
}

// TestH2HelperServer is no test: the benchmarks run the test binary
// again with SLUICE_H2_HELPER_SERVER=1 to serve h2TestServer from another
// process, so that the CPU time they measure is the client's alone. It
// prints its address and serves until its standard input closes.
func TestH2HelperServer(t *testing.T) {
	if os.Getenv("SLUICE_H2_HELPER_SERVER") != "1" {
		t.Skip("the benchmarks' server process")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, &h2TestServer{})
	go srv.Serve(lis)
	fmt.Println(lis.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Stop()
}

// startH2ServerProcess runs TestH2HelperServer in a new process until the
// benchmark ends and returns its address.
func startH2ServerProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestH2HelperServer$")
	cmd.Env = append(os.Environ(), "SLUICE_H2_HELPER_SERVER=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("read the server's address: %v", err)
	}
	return strings.TrimSpace(line)
}

// h2BenchRequest is what `sluice bench` sends by default.
func h2BenchRequest() *rlsv3.RateLimitRequest { return h2Request("bench", 1, "v42") }

// h2RunParallel runs call from 16 goroutines, like `sluice bench`, and
// reports the CPU time of this process per call: with the server in
// another process, that is the client's cost.
func h2RunParallel(b *testing.B, call func() error) {
	b.Helper()
	b.ReportAllocs()
	b.SetParallelism(8)
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		b.Fatal(err)
	}
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

func BenchmarkH2Call(b *testing.B) {
	addr := startH2ServerProcess(b)
	c := dialH2Test(b, addr, h2RecvWindow)
	msg, err := proto.Marshal(h2BenchRequest())
	if err != nil {
		b.Fatal(err)
	}
	want := h2Want(h2BenchRequest(), addr)
	check := func() {
		got, err := h2Ask(context.Background(), c, h2BenchRequest())
		if err != nil {
			b.Fatal(err)
		}
		if d := h2Diff(got, want); d != "" {
			b.Fatal(d)
		}
	}
	check()
	h2RunParallel(b, func() error {
		resp, err := c.call(context.Background(), h2TestMethod, msg)
		if err == nil && len(resp) == 0 {
			err = errors.New("got an empty response")
		}
		return err
	})
	check()
}

func BenchmarkGRPCCall(b *testing.B) {
	addr := startH2ServerProcess(b)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	req := h2BenchRequest()
	call := func() error {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err == nil && !bytes.Equal(resp.RawBody, []byte(req.Domain)) {
			err = fmt.Errorf("got body %q, want %q", resp.RawBody, req.Domain)
		}
		return err
	}
	if err := call(); err != nil {
		b.Fatal(err)
	}
	h2RunParallel(b, call)
}
