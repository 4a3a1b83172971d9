package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/internal/apptest"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// grpcConn dials addr in clear text.
func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// configDir writes a config directory holding sharedConfig.
func configDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shared.yaml"), []byte(sharedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An environment written for envoyproxy/ratelimit, and nothing else,
// runs Sluice on Redis (the config from SLUICE_CONFIG here; the test below
// takes it from RUNTIME_ROOT).
func TestServeWithOnlyAnEnvoyEnvironment(t *testing.T) {
	srv := redistest.StartSingle(t)
	httpPort, grpcPort, debugPort := freePort(t), freePort(t), freePort(t)
	env := map[string]string{
		"HOST": "127.0.0.1", "PORT": httpPort,
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort,
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": debugPort,
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr,
		"LOG_LEVEL": "ERROR", "USE_STATSD": "false",
		"SLUICE_CONFIG": configDir(t),
	}
	o, err := app.ParseServe(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("ParseServe: %v", err)
	}
	if len(o.EnvoyEnvUnsupported) != 0 {
		t.Errorf("got unsupported %q, want none", o.EnvoyEnvUnsupported)
	}
	a := apptest.Run(t, o, nil)
	if got, want := a.GRPCAddr(), "127.0.0.1:"+grpcPort; got != want {
		t.Fatalf("gRPC address: got %s, want %s", got, want)
	}
	if got, want := a.HTTPAddr(), "127.0.0.1:"+httpPort; got != want {
		t.Fatalf("HTTP address: got %s, want %s", got, want)
	}
	if got, want := a.DebugAddr(), "127.0.0.1:"+debugPort; got != want {
		t.Fatalf("debug address: got %s, want %s", got, want)
	}
	client := rlsv3.NewRateLimitServiceClient(grpcConn(t, "127.0.0.1:"+grpcPort))
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: envoyDescs("window", "env")})
		cancel()
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: got %v, %v, want OK", i, resp, err)
		}
	}
	// envoyproxy/ratelimit's key: domain_key_value_ + the hour's start.
	hour := time.Now().Unix() / 3600 * 3600
	key := "shared_window_env_" + strconv.FormatInt(hour, 10)
	if got, err := srv.Do("GET", key); err != nil || got != "2" {
		t.Fatalf("GET %s: got %v, %v, want 2", key, got, err)
	}
}

// Sluice started while Redis is not listening waits for it, then serves.
func TestServeStartsBeforeRedis(t *testing.T) {
	srv := redistest.StartSingle(t)
	srv.Kill()
	o := app.Defaults()
	o.ConfigPath = configDir(t)
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
	o.LogLevel = "error"
	o.Store, o.Redis.Addrs, o.Redis.Timeout = "redis", []string{srv.Addr}, time.Second
	o.Redis.StartupInitialInterval, o.Redis.StartupMaxInterval = 50*time.Millisecond, 200*time.Millisecond

	type built struct {
		a   *app.App
		err error
	}
	done := make(chan built, 1)
	go func() {
		a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr)})
		done <- built{a, err}
	}()
	select {
	case b := <-done:
		t.Fatalf("app.New returned %v with Redis down, want it to wait", b.err)
	case <-time.After(500 * time.Millisecond):
	}
	srv.Restart()
	var b built
	select {
	case b = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("app.New did not return within 10s of Redis starting")
	}
	if b.err != nil {
		t.Fatalf("app.New: %v", b.err)
	}
	a := b.a
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	client := rlsv3.NewRateLimitServiceClient(grpcConn(t, a.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: envoyDescs("window", "late")})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("got %v, %v, want OK", resp, err)
	}
	if n := a.Registry(); n == nil {
		t.Fatal("no registry")
	}
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatalf("metrics after retries: %v", err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "sluice_redis_call_duration_seconds"
	}
	if !found {
		t.Error("the Redis store's metrics are not registered after a retried start")
	}
}

func TestStartupGivesUpAfterTheMaxElapsedTime(t *testing.T) {
	srv := redistest.StartSingle(t)
	srv.Kill()
	o := app.Defaults()
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
	o.LogLevel = "error"
	o.Store, o.Redis.Addrs = "redis", []string{srv.Addr}
	o.Redis.StartupInitialInterval, o.Redis.StartupMaxElapsedTime = 50*time.Millisecond, 300*time.Millisecond
	t0 := time.Now()
	_, err := app.New(o, app.Deps{Logger: app.NewLogger(o, io.Discard)})
	if err == nil {
		t.Fatal("got no error, want New to give up")
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("gave up after %s, want about 300ms", took)
	}
	if !strings.Contains(err.Error(), "redis-startup-max-elapsed-time") {
		t.Errorf("got %v, want it to name --redis-startup-max-elapsed-time", err)
	}
}

// envoyDescs is one descriptor of key and value.
func envoyDescs(key, value string) []*rlcommon.RateLimitDescriptor {
	return []*rlcommon.RateLimitDescriptor{desc(key, value)}
}

// healthOf returns the HTTP /healthcheck status and the gRPC health
// status of each name.
func healthOf(t *testing.T, a *app.App, names ...string) (int, []healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + a.HTTPAddr() + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hc := healthpb.NewHealthClient(grpcConn(t, a.GRPCAddr()))
	var sts []healthpb.HealthCheckResponse_ServingStatus
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: n})
		cancel()
		if err != nil {
			t.Fatalf("gRPC health %q: %v", n, err)
		}
		sts = append(sts, r.Status)
	}
	return resp.StatusCode, sts
}

var allHealthNames = []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}

func TestHealthWhileRedisIsDown(t *testing.T) {
	for _, tc := range []struct {
		name             string
		policy           string
		activeConnection bool
		wantHealthy      bool
	}{
		{name: "failing open (allow) stays healthy", policy: "allow", wantHealthy: true},
		{name: "failing open (local) stays healthy", policy: "local", wantHealthy: true},
		{name: "failing open with the active connection check is unhealthy", policy: "allow", activeConnection: true},
		{name: "denying is unhealthy", policy: "deny"},
		{name: "erroring is unhealthy", policy: "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartSingle(t)
			o := app.Defaults()
			o.ConfigPath = configDir(t)
			o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
			o.LogLevel = "error"
			o.Store, o.Redis.Addrs, o.Redis.Timeout, o.OnStoreError = "redis", []string{srv.Addr}, 200*time.Millisecond, tc.policy
			o.Redis.HealthCheckActiveConnection = tc.activeConnection
			a := apptest.Run(t, o, nil)
			if code, sts := healthOf(t, a, allHealthNames...); code != 200 || !allAre(sts, healthpb.HealthCheckResponse_SERVING) {
				t.Fatalf("with Redis up: got %d %v, want 200 and SERVING", code, sts)
			}
			srv.Kill()
			code, sts := healthOf(t, a, allHealthNames...)
			if tc.wantHealthy && (code != 200 || !allAre(sts, healthpb.HealthCheckResponse_SERVING)) {
				t.Fatalf("with Redis down: got %d %v, want 200 and SERVING", code, sts)
			}
			if !tc.wantHealthy && (code != 503 || !allAre(sts, healthpb.HealthCheckResponse_NOT_SERVING)) {
				t.Fatalf("with Redis down: got %d %v, want 503 and NOT_SERVING", code, sts)
			}
		})
	}
}

func allAre(sts []healthpb.HealthCheckResponse_ServingStatus, want healthpb.HealthCheckResponse_ServingStatus) bool {
	for _, s := range sts {
		if s != want {
			return false
		}
	}
	return true
}

func TestHealthyWithAtLeastOneConfigLoaded(t *testing.T) {
	srv := redistest.StartSingle(t)
	for _, tc := range []struct {
		name        string
		option      bool
		wantHealthy bool
	}{
		{name: "no domain is healthy by default", option: false, wantHealthy: true},
		{name: "no domain is unhealthy with the option", option: true, wantHealthy: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := app.Defaults()
			o.ConfigPath = dir
			o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
			o.LogLevel = "error"
			o.Store, o.Redis.Addrs, o.Redis.Timeout = "redis", []string{srv.Addr}, time.Second
			o.HealthyWithConfig = tc.option
			a := apptest.Run(t, o, nil)
			code, sts := healthOf(t, a, allHealthNames...)
			if healthy := code == 200 && allAre(sts, healthpb.HealthCheckResponse_SERVING); healthy != tc.wantHealthy {
				t.Fatalf("empty config: got %d %v, want healthy %v", code, sts, tc.wantHealthy)
			}
			if err := os.WriteFile(filepath.Join(dir, "shared.yaml"), []byte(sharedConfig), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := a.Reload(); err != nil {
				t.Fatal(err)
			}
			if code, sts := healthOf(t, a, allHealthNames...); code != 200 || !allAre(sts, healthpb.HealthCheckResponse_SERVING) {
				t.Fatalf("one domain loaded: got %d %v, want 200 and SERVING", code, sts)
			}
		})
	}
}

// Between the stop and the closing of the listeners, calls are answered
// while the health checks fail.
func TestUnhealthyWhileDraining(t *testing.T) {
	srv := redistest.StartSingle(t)
	o := app.Defaults()
	o.ConfigPath = configDir(t)
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t), "off"
	o.LogLevel = "error"
	o.Store, o.Redis.Addrs, o.Redis.Timeout = "redis", []string{srv.Addr}, time.Second
	o.ShutdownDrainDelay = 2 * time.Second
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	conn := grpcConn(t, o.GRPCAddr)
	hc := healthpb.NewHealthClient(conn)
	eventually(t, "the service to serve", func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	stop()
	eventually(t, "the health checks to fail while draining", func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_NOT_SERVING
	})
	resp, err := http.Get("http://" + o.HTTPAddr + "/healthcheck")
	if err != nil {
		t.Fatalf("healthcheck while draining: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("healthcheck while draining: got %d, want 503", resp.StatusCode)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: envoyDescs("window", "drain")})
	if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call while draining: got %v, %v, want OK", r, err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain delay")
	}
}

func TestGRPCOnAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rl.sock")
	o, err := app.ParseServe(nil, envOf(map[string]string{
		"GRPC_UDS": sock, "HOST": "127.0.0.1", "PORT": "0", "DEBUG_PORT": "0", "LOG_LEVEL": "error", "SLUICE_CONFIG": configDir(t),
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := apptest.Run(t, o, nil)
	client := rlsv3.NewRateLimitServiceClient(grpcConn(t, "unix:"+sock))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: envoyDescs("window", "uds")})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("got %v, %v, want OK", resp, err)
	}
	if a.GRPCAddr() != sock {
		t.Errorf("GRPCAddr: got %s, want %s", a.GRPCAddr(), sock)
	}
}

// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION still verifies the certificate
// chain: a server whose CA is not trusted is refused.
func TestRedisTLSSkipHostnameVerificationStillVerifiesTheChain(t *testing.T) {
	srv := redistest.StartSingle(t, redistest.WithTLS())
	foreign := newPKI(t, t.TempDir(), "foreign")
	for _, tc := range []struct {
		name   string
		caFile string
		wantOK bool
	}{
		{name: "the server's CA is trusted", caFile: srv.TLS.CAFile, wantOK: true},
		{name: "another CA is refused", caFile: foreign.caFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(nil, envOf(map[string]string{
				"REDIS_URL": srv.Addr, "REDIS_TLS": "true", "REDIS_TLS_CACERT": tc.caFile,
				"REDIS_TLS_CLIENT_CERT": srv.TLS.ClientCertFile, "REDIS_TLS_CLIENT_KEY": srv.TLS.ClientKeyFile,
				"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
				"REDIS_STARTUP_INITIAL_INTERVAL":       "50ms", "REDIS_STARTUP_MAX_ELAPSED_TIME": "300ms",
				"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_PORT": "0",
				"LOG_LEVEL": "error", "USE_STATSD": "false",
			}), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, io.Discard)})
			if err == nil {
				defer func() { _ = a.Shutdown(context.Background()) }()
			}
			if tc.wantOK && err != nil {
				t.Fatalf("got %v, want a connection", err)
			}
			if !tc.wantOK && err == nil {
				t.Fatal("got a connection, want the certificate refused")
			}
			if !tc.wantOK && !strings.Contains(err.Error(), "certificate") {
				t.Errorf("got %v, want a certificate error", err)
			}
		})
	}
}

// The acceptance run of issue 12: only envoyproxy/ratelimit's environment
// (no flag, no SLUICE_ variable), its goruntime layout, Redis; the
// RUNTIME_ROOT symlink is swapped while clients keep calling: no call
// fails, every answer carries the old or the new limit, and the new one
// applies.
func TestEnvoyEnvironmentRuntimeRootSwapUnderLoad(t *testing.T) {
	srv := redistest.StartSingle(t)
	l := newRuntimeLayout(t)
	l.version("v1", map[string]string{"rt.yaml": domainFile("rt", 1000)})
	l.version("v2", map[string]string{"rt.yaml": domainFile("rt", 2000)})
	l.swap("v1")
	grpcPort := freePort(t)
	env := map[string]string{
		"HOST": "127.0.0.1", "PORT": freePort(t),
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort,
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": freePort(t),
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "REDIS_TIMEOUT": "2s",
		"RUNTIME_ROOT": l.root(), "RUNTIME_SUBDIRECTORY": l.subdir, "RUNTIME_WATCH_ROOT": "true",
		"LOG_LEVEL": "ERROR", "USE_STATSD": "false",
	}
	o, err := app.ParseServe(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("ParseServe: %v", err)
	}
	if o.Store != "redis" || o.RuntimeRoot != l.root() || o.ConfigPath != "" {
		t.Fatalf("got store %q, runtime root %q, config %q; want redis and the layout's root", o.Store, o.RuntimeRoot, o.ConfigPath)
	}
	apptest.Run(t, o, nil)
	client := rlsv3.NewRateLimitServiceClient(grpcConn(t, "127.0.0.1:"+grpcPort))
	limit := func() (uint32, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rt", Descriptors: envoyDescs("k", "v")})
		if err != nil {
			return 0, err
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), nil
	}
	if n, err := limit(); err != nil || n != 1000 {
		t.Fatalf("before the swap: got limit %d, %v; want 1000", n, err)
	}
	var calls, failures atomic.Int64
	var sawNew atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := limit()
				calls.Add(1)
				switch {
				case err != nil, n != 1000 && n != 2000:
					failures.Add(1)
				case n == 2000:
					sawNew.Store(true)
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	l.swap("v2")
	deadline := time.Now().Add(5 * time.Second)
	for !sawNew.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // keep calling after the swap
	close(stop)
	wg.Wait()
	if !sawNew.Load() {
		t.Fatal("the new limits did not apply within 5s of the swap")
	}
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d calls failed or saw neither limit, want none", n, calls.Load())
	}
	// The calls were counted in Redis, under envoyproxy/ratelimit's key.
	keys, err := srv.Do("KEYS", "rt_k_v_*")
	if err != nil {
		t.Fatal(err)
	}
	if ks, _ := keys.([]any); len(ks) == 0 {
		t.Errorf("got no Redis counter for rt_k_v_, want one")
	}
}
