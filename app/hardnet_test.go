package app_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/app"
)

// A client that sends part of a request and then nothing is disconnected
// once the read timeout passes, instead of holding its connection.
func TestSlowHTTPClientIsDisconnected(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.HTTPReadTimeout = 200 * time.Millisecond })
	for _, tt := range []struct{ name, sent string }{
		{"half the headers", "GET /healthcheck HTTP/1.1\r\nHost: sluice\r\nX-Slow:"},
		{"the headers and half the body", "POST /json HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"domain\":"},
	} {
		t.Run("a client that sent "+tt.name+" is cut off", func(t *testing.T) {
			for _, addr := range []string{ta.HTTPAddr(), ta.DebugAddr()} {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, tt.sent); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
				began := time.Now()
				_, err = io.Copy(io.Discard, c) // until the server closes
				if err != nil {
					t.Errorf("%s: connection still open after %s (%v), want closed after the 200ms read timeout", addr, time.Since(began).Round(time.Millisecond), err)
				}
			}
		})
	}
}

// get sends a keep-alive GET on c and reads the answer's status line,
// within wait.
func get(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, "GET /healthcheck HTTP/1.1\r\nHost: sluice\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.Status, nil
}

// Past --max-connections a further connection is not served while the
// others still are; it is served once one of them closes.
func TestConnectionCapPerListener(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.MaxConnections = 2 })
	var conns []net.Conn
	var readers []*bufio.Reader
	for i := range 3 {
		c, err := net.Dial("tcp", ta.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns, readers = append(conns, c), append(readers, bufio.NewReader(c))
		if i < 2 {
			if st, err := get(c, readers[i], 3*time.Second); err != nil || !strings.HasPrefix(st, "200") {
				t.Fatalf("connection %d under the cap: got %q, %v, want 200 OK", i+1, st, err)
			}
		}
	}
	if st, err := get(conns[2], readers[2], 300*time.Millisecond); err == nil {
		t.Fatalf("third connection past a cap of 2: got %q, want no answer", st)
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection past a cap of 2: got %v, want a wait", err)
	}
	for i := range 2 {
		if st, err := get(conns[i], readers[i], 3*time.Second); err != nil || !strings.HasPrefix(st, "200") {
			t.Errorf("connection %d under the cap, while a third waits: got %q, %v, want 200 OK", i+1, st, err)
		}
	}
	_ = conns[0].Close()
	_ = conns[2].SetDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(readers[2], nil) // the request sent while it waited
	if err != nil {
		t.Fatalf("third connection once another closed: got %v, want its answer", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("third connection once another closed: got %s, want 200 OK", resp.Status)
	}
}

// A gRPC connection without calls for --grpc-max-connection-idle is
// closed by the server.
func TestIdleGRPCConnectionIsClosed(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, func(o *app.Options) { o.GRPCMaxConnectionIdle = 200 * time.Millisecond })
	conn, err := grpc.NewClient(ta.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("connection never ready: %s", st)
		}
	}
	if !conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatalf("idle gRPC connection still ready after 3s, want closed after the 200ms idle time")
	}
}
