package app_test

import (
	"context"
	"net"
	"testing"
	"time"
)

// An idle service stops at once, whatever connections it holds: clients
// that connected and sent nothing (on HTTP and gRPC), an idle gRPC
// connection and an idle keep-alive HTTP connection.
func TestIdleShutdownIsFast(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	ta.ask(t, "basic", desc("key", "a")) // a gRPC connection, now idle
	resp, err := ta.http.Get("http://" + ta.HTTPAddr() + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // an idle keep-alive HTTP connection
	for _, addr := range []string{ta.HTTPAddr(), ta.GRPCAddr(), ta.DebugAddr()} {
		c, err := net.Dial("tcp", addr) // connected, silent
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	time.Sleep(50 * time.Millisecond) // let the servers accept them
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	if err := ta.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(began); took > 300*time.Millisecond {
		t.Errorf("an idle service took %s to shut down, want at most 300ms", took)
	}
}
