package app_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/internal/apptest"
)

// startFromEnv parses env as `sluice serve` would, on loopback ports, and
// starts the service.
func startFromEnv(t *testing.T, env map[string]string) *app.App {
	t.Helper()
	base := map[string]string{
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_PORT": "0",
		"LOG_LEVEL": "error", "USE_STATSD": "false", "SLUICE_CONFIG": configDir(t),
	}
	for k, v := range env {
		base[k] = v
	}
	o, err := app.ParseServe(nil, envOf(base), io.Discard)
	if err != nil {
		t.Fatalf("ParseServe: %v", err)
	}
	return apptest.Run(t, o, nil)
}

// GRPC_SERVER_USE_TLS secures the gRPC port and leaves HTTP in clear text,
// as in envoyproxy/ratelimit; GRPC_CLIENT_TLS_SAN checks the client's name.
func TestGRPCServerTLSFromTheEnvironment(t *testing.T) {
	p := newPKI(t, t.TempDir(), "env")
	withCert := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.client}}
	for _, tc := range []struct {
		name   string
		san    string
		wantOK bool
	}{
		{name: "a client certificate from the CA is accepted", wantOK: true},
		{name: "a client certificate naming the SAN is accepted", san: "localhost", wantOK: true},
		{name: "a client certificate naming another host is refused", san: "client.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startFromEnv(t, map[string]string{
				"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.serverCert, "GRPC_SERVER_TLS_KEY": p.serverKey,
				"GRPC_CLIENT_TLS_CACERT": p.caFile, "GRPC_CLIENT_TLS_SAN": tc.san,
			})
			err := rlsOverTLS(t, a.GRPCAddr(), withCert)
			if tc.wantOK && err != nil {
				t.Fatalf("gRPC over TLS: %v", err)
			}
			if !tc.wantOK && err == nil {
				t.Fatal("gRPC over TLS: got success, want the handshake refused")
			}
			resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + a.HTTPAddr() + "/healthcheck")
			if err != nil {
				t.Fatalf("plain HTTP: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("plain HTTP healthcheck: got %d, want 200", resp.StatusCode)
			}
		})
	}
}

func TestResponseHeaderNamesFromTheEnvironment(t *testing.T) {
	a := startFromEnv(t, map[string]string{
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"LIMIT_LIMIT_HEADER":             "X-RL-Limit",
		"LIMIT_REMAINING_HEADER":         "X-RL-Remaining",
		"LIMIT_RESET_HEADER":             "X-RL-Reset",
	})
	client := rlsv3.NewRateLimitServiceClient(grpcConn(t, a.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: envoyDescs("window", "h")})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["X-RL-Limit"] != "100" || got["X-RL-Remaining"] != "99" || got["X-RL-Reset"] == "" {
		t.Fatalf("got headers %v, want X-RL-Limit 100, X-RL-Remaining 99 and X-RL-Reset", got)
	}
}
