package app_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/app"
)

// pingUntilGoAway opens an HTTP/2 connection to addr, sends n keepalive
// pings every interval without any call, and reports whether the server
// answered with a GOAWAY.
func pingUntilGoAway(t *testing.T, addr string, n int, interval time.Duration) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var mu sync.Mutex // one writer at a time
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	goAway := make(chan bool, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				goAway <- false
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					mu.Lock()
					_ = fr.WriteSettingsAck()
					mu.Unlock()
				}
			case *http2.GoAwayFrame:
				goAway <- true
				return
			}
		}
	}()
	for i := range n {
		mu.Lock()
		err := fr.WritePing(false, [8]byte{byte(i)})
		mu.Unlock()
		if err != nil {
			break // the server closed the connection
		}
		select {
		case got := <-goAway:
			return got
		case <-time.After(interval):
		}
	}
	select {
	case got := <-goAway:
		return got
	case <-time.After(300 * time.Millisecond):
		return false
	}
}

// A client pinging faster than --grpc-keepalive-min-time is sent away;
// one pinging slower keeps its connection, calls in flight or not.
func TestGRPCKeepaliveEnforcement(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.GRPCKeepaliveMinTime = 150 * time.Millisecond })
	for _, tt := range []struct {
		name     string
		interval time.Duration
		want     bool
	}{
		{"pings every 10ms are sent away", 10 * time.Millisecond, true},
		{"pings every 250ms keep the connection", 250 * time.Millisecond, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := pingUntilGoAway(t, ta.GRPCAddr(), 5, tt.interval); got != tt.want {
				t.Errorf("GOAWAY: got %v, want %v", got, tt.want)
			}
		})
	}
}

// The connection cap holds on the gRPC port too: past it a new client
// is not served until a connection closes.
func TestGRPCConnectionCap(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.MaxConnections = 1 })
	hog, err := net.Dial("tcp", ta.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	conn, err := grpc.NewClient(ta.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	call := func(wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{desc("key", "a")}})
		return err
	}
	if err := call(300 * time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second connection past a cap of 1: got %v, want DeadlineExceeded", err)
	}
	_ = hog.Close()
	var last error
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if last = call(time.Second); last == nil {
			return
		}
		if !errors.Is(last, context.DeadlineExceeded) && status.Code(last) != codes.DeadlineExceeded && status.Code(last) != codes.Unavailable {
			break
		}
	}
	t.Fatalf("once the first connection closed: got %v, want an answer", last)
}
