package app_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/app"
)

// otlpReceiver is an OTLP trace receiver on a loopback port: a gRPC
// TraceService and an HTTP POST /v1/traces taking protobuf, as a collector
// serves them. It keeps every span it receives.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer

	mu        sync.Mutex // protects resources
	resources []*tracepb.ResourceSpans
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resources = append(r.resources, req.GetResourceSpans()...)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces with application/x-protobuf", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, _ := r.Export(req.Context(), &in)
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// startReceiver starts r over protocol ("grpc" or "http") on a free
// loopback port and returns its address.
func startReceiver(t *testing.T, r *otlpReceiver, protocol string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if protocol == "grpc" {
		s := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(s, r)
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(s.Stop)
	} else {
		s := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(func() { _ = s.Close() })
	}
	return ln.Addr().String()
}

// spans returns the received spans by name, and the service.name of their
// resources.
func (r *otlpReceiver) spans() (map[string]*tracepb.Span, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byName := map[string]*tracepb.Span{}
	var services []string
	for _, rs := range r.resources {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" && !slices.Contains(services, a.GetValue().GetStringValue()) {
				services = append(services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				byName[s.GetName()] = s
			}
		}
	}
	return byName, services
}

// startTracing starts a service with tracing options to on a free
// loopback port, with one domain "traced"; the test shuts it down itself
// (Shutdown flushes the spans).
func startTracing(t *testing.T, to app.TracingOptions) *testApp {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "traced.yaml"), []byte("domain: traced\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := app.Defaults()
	o.ConfigPath = dir
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
	o.LogLevel = "error"
	o.Tracing = to
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr)})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &testApp{App: a, client: rlsv3.NewRateLimitServiceClient(conn), http: &http.Client{Timeout: 5 * time.Second}}
}

func TestTracingExportsOverOTLP(t *testing.T) {
	const (
		callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerSpan  = "00f067aa0ba902b7"
	)
	for _, tc := range []struct {
		name        string
		protocol    string
		args        []string
		env         func(addr string) map[string]string
		wantService string
	}{
		{
			name:     "--tracing with the grpc protocol exports to OTEL_EXPORTER_OTLP_ENDPOINT",
			protocol: "grpc",
			args:     []string{"--tracing", "--tracing-exporter-protocol", "grpc", "--tracing-service-name", "edge-rl"},
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_INSECURE": "true"}
			},
			wantService: "edge-rl",
		},
		{
			name:     "--tracing with the http protocol exports to OTEL_EXPORTER_OTLP_ENDPOINT",
			protocol: "http",
			args:     []string{"--tracing", "--tracing-exporter-protocol", "http"},
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr}
			},
			wantService: "RateLimit",
		},
		{
			name:     "envoyproxy/ratelimit's TRACING_ variables turn it on over gRPC",
			protocol: "grpc",
			env: func(addr string) map[string]string {
				return map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "envoy-rl",
					"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true"}
			},
			wantService: "envoy-rl",
		},
		{
			name:     "envoyproxy/ratelimit's TRACING_ variables turn it on over HTTP",
			protocol: "http",
			env: func(addr string) map[string]string {
				return map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + addr + "/v1/traces"}
			},
			wantService: "RateLimit",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv := &otlpReceiver{}
			env := tc.env(startReceiver(t, recv, tc.protocol))
			for k, v := range env {
				t.Setenv(k, v) // the OTLP exporters read OTEL_* themselves
			}
			// Only the flush at shutdown can deliver the spans.
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
			parsed, err := app.ParseServe(tc.args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			ta := startTracing(t, parsed.Tracing)

			ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
			if _, err := ta.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "traced", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}}); err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+ta.HTTPAddr()+"/json",
				bytes.NewBufferString(`{"domain":"traced","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("b3", callerTrace+"-"+callerSpan+"-1")
			resp, err := ta.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()

			if got, _ := recv.spans(); len(got) != 0 {
				t.Fatalf("got %d spans before shutdown, want none (the batch delay is 10 minutes)", len(got))
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ta.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			spans, services := recv.spans()
			if !slices.Equal(services, []string{tc.wantService}) {
				t.Errorf("got service.name %q, want [%s]", services, tc.wantService)
			}
			for _, name := range []string{"envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "ShouldRateLimit /json", "store.Do"} {
				s, ok := spans[name]
				if !ok {
					t.Errorf("no span %q received; got %d spans", name, len(spans))
					continue
				}
				if got := hex.EncodeToString(s.GetTraceId()); got != callerTrace {
					t.Errorf("span %q: got trace id %s, want the caller's %s", name, got, callerTrace)
				}
				if name != "store.Do" {
					if got := hex.EncodeToString(s.GetParentSpanId()); got != callerSpan {
						t.Errorf("span %q: got parent %s, want the caller's span %s", name, got, callerSpan)
					}
				}
			}
		})
	}
}

// Tracing off (the default) exports nothing, even with an OTLP endpoint
// in the environment.
func TestTracingOffExportsNothing(t *testing.T) {
	recv := &otlpReceiver{}
	addr := startReceiver(t, recv, "http")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	parsed, err := app.ParseServe(nil, os.Getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Tracing.Enabled {
		t.Fatal("got tracing on by default, want off")
	}
	ta := startTracing(t, parsed.Tracing)
	ta.ask(t, "traced", desc("k", "v"))
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ta.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := recv.spans(); len(got) != 0 {
		t.Errorf("got %d spans with tracing off, want none", len(got))
	}
}

func TestTracingOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{name: "an unknown exporter protocol is refused", args: []string{"--tracing", "--tracing-exporter-protocol", "zipkin"},
			wantErr: `--tracing-exporter-protocol: "zipkin" is not one of http, grpc`},
		{name: "a sampling rate above 1 is refused", args: []string{"--tracing", "--tracing-sampling-rate", "1.5"},
			wantErr: "--tracing-sampling-rate: 1.5 is outside [0, 1]"},
		{name: "a negative sampling rate from TRACING_SAMPLING_RATE is refused", env: map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "-0.1"},
			wantErr: "-0.1 is outside [0, 1]"},
		{name: "SLUICE_TRACING_SERVICE_NAME sets the service name", env: map[string]string{"SLUICE_TRACING": "true", "SLUICE_TRACING_SERVICE_NAME": "rl-eu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr))):
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr == "" && (!o.Tracing.Enabled || o.Tracing.ServiceName != "rl-eu"):
				t.Errorf("got %+v, want tracing on as rl-eu", o.Tracing)
			}
		})
	}
}
