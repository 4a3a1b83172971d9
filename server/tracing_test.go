package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// tracedServer is an RLS and a KV with tracing to an in-memory exporter,
// served over gRPC on a loopback port and over HTTP.
type tracedServer struct {
	spans *tracetest.InMemoryExporter
	rls   rlsv3.RateLimitServiceClient
	kv    sluicev1.LimitsClient
	http  *httptest.Server
}

// newTracer returns a tracer that samples every span and exports it to
// the returned in-memory exporter.
func newTracer(t *testing.T) (*tracing.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.New(tp), spans
}

// serveGRPC serves gs on a free loopback port until the test ends and
// returns a clear-text connection to it.
func serveGRPC(t *testing.T, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func startTraced(t *testing.T) *tracedServer {
	t.Helper()
	tracer, spans := newTracer(t)

	lim := limiter.New(memory.New(memory.Options{}), clock.New())
	lim.TraceStore(tracer, "memory")
	d, err := descriptors.Parse("traced.yaml", []byte("domain: traced\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	rls := server.NewRLS(server.RLSOptions{Limiter: lim, Tracer: tracer})
	rls.SetConfig(cfg)
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte("NewOrdersPerAccount: {burst: 1, count: 1, period: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := limits.New(defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv := server.NewKV(server.KVOptions{Limiter: lim, Limits: func() *limits.Set { return set }, Tracer: tracer})

	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, rls)
	sluicev1.RegisterLimitsServer(gs, kv)
	conn := serveGRPC(t, gs)

	mux := http.NewServeMux()
	mux.Handle("/json", server.JSONHandler(rls))
	mux.Handle("/v1/", server.KVHTTPHandler(kv))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &tracedServer{spans: spans, rls: rlsv3.NewRateLimitServiceClient(conn), kv: sluicev1.NewLimitsClient(conn), http: hs}
}

// post sends body to path with headers and returns the status.
func (ts *tracedServer) post(t *testing.T, path, body string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.http.URL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// wantSpan is what a test expects of one span.
type wantSpan struct {
	name   string
	kind   trace.SpanKind
	attrs  map[attribute.Key]attribute.Value
	status otelcodes.Code
}

// checkSpans checks the exported spans against want, the children first
// (the order spans end in), each store span a child of the call's span.
func checkSpans(t *testing.T, got tracetest.SpanStubs, want []wantSpan) {
	t.Helper()
	if len(got) != len(want) {
		names := make([]string, len(got))
		for i, s := range got {
			names[i] = s.Name
		}
		t.Fatalf("got %d spans %q, want %d", len(got), names, len(want))
	}
	call := got[len(got)-1]
	for i, w := range want {
		s := got[i]
		if s.Name != w.name || s.SpanKind != w.kind {
			t.Errorf("span %d: got %q (%v), want %q (%v)", i, s.Name, s.SpanKind, w.name, w.kind)
		}
		have := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes {
			have[a.Key] = a.Value
		}
		for k, v := range w.attrs {
			if have[k] != v {
				t.Errorf("span %q: got %s=%v, want %v", s.Name, k, have[k].Emit(), v.Emit())
			}
		}
		if s.Status.Code != w.status {
			t.Errorf("span %q: got status %v (%q), want %v", s.Name, s.Status.Code, s.Status.Description, w.status)
		}
		if i < len(want)-1 {
			if s.Parent.SpanID() != call.SpanContext.SpanID() || s.SpanContext.TraceID() != call.SpanContext.TraceID() {
				t.Errorf("span %q: got parent %s in trace %s, want the call's span %s in %s", s.Name,
					s.Parent.SpanID(), s.SpanContext.TraceID(), call.SpanContext.SpanID(), call.SpanContext.TraceID())
			}
		}
	}
}

func TestTracingSpans(t *testing.T) {
	str := attribute.StringValue
	num := func(n int) attribute.Value { return attribute.IntValue(n) }
	storeSpan := wantSpan{name: "store.Do", kind: trace.SpanKindClient,
		attrs: map[attribute.Key]attribute.Value{"store": str("memory"), "store.ops": num(1)}}
	rlsReq := &rlsv3.RateLimitRequest{Domain: "traced", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for _, tc := range []struct {
		name string
		call func(t *testing.T, ts *tracedServer)
		want []wantSpan
	}{
		{
			name: "a gRPC ShouldRateLimit is a server span with the store round trip inside it",
			call: func(t *testing.T, ts *tracedServer) {
				if _, err := ts.rls.ShouldRateLimit(t.Context(), rlsReq); err != nil {
					t.Fatal(err)
				}
			},
			want: []wantSpan{storeSpan, {name: "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"domain": str("traced"), "descriptors": num(1), "overall_code": str("OK"), "rpc.grpc.status_code": num(0)}}},
		},
		{
			name: "a second call over the limit answers OVER_LIMIT without an error status",
			call: func(t *testing.T, ts *tracedServer) {
				for range 2 {
					if _, err := ts.rls.ShouldRateLimit(t.Context(), rlsReq); err != nil {
						t.Fatal(err)
					}
				}
				ts.spans.Reset()
				if _, err := ts.rls.ShouldRateLimit(t.Context(), rlsReq); err != nil {
					t.Fatal(err)
				}
			},
			want: []wantSpan{storeSpan, {name: "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"overall_code": str("OVER_LIMIT")}}},
		},
		{
			name: "an invalid request has an error status and never reaches the store",
			call: func(t *testing.T, ts *tracedServer) {
				if _, err := ts.rls.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{}); err == nil {
					t.Fatal("got no error for an empty domain")
				}
			},
			want: []wantSpan{{name: "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"domain": str(""), "rpc.grpc.status_code": num(3)}, status: otelcodes.Error}},
		},
		{
			name: "a descriptor without a limit counts nothing and never reaches the store",
			call: func(t *testing.T, ts *tracedServer) {
				req := &rlsv3.RateLimitRequest{Domain: "traced", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "other", Value: "v"}}}}}
				if _, err := ts.rls.ShouldRateLimit(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			},
			want: []wantSpan{{name: "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"overall_code": str("OK")}}},
		},
		{
			name: "a /json call is a server span with the store round trip inside it",
			call: func(t *testing.T, ts *tracedServer) {
				if code := ts.post(t, "/json", `{"domain":"traced","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, nil); code != http.StatusOK {
					t.Fatalf("got status %d, want 200", code)
				}
			},
			want: []wantSpan{storeSpan, {name: "ShouldRateLimit /json", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"domain": str("traced"), "descriptors": num(1), "overall_code": str("OK"), "http.response.status_code": num(200), "http.request.method": str("POST")}}},
		},
		{
			name: "a malformed /json body has an error status",
			call: func(t *testing.T, ts *tracedServer) {
				if code := ts.post(t, "/json", `{"domain":`, nil); code != http.StatusBadRequest {
					t.Fatalf("got status %d, want 400", code)
				}
			},
			want: []wantSpan{{name: "ShouldRateLimit /json", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"http.response.status_code": num(400)}, status: otelcodes.Error}},
		},
		{
			name: "a gRPC key-value spend records the limit name and the decision",
			call: func(t *testing.T, ts *tracedServer) {
				if _, err := ts.kv.Spend(t.Context(), &sluicev1.Request{Name: "NewOrdersPerAccount", Id: "1001"}); err != nil {
					t.Fatal(err)
				}
			},
			want: []wantSpan{storeSpan, {name: "sluice.v1.Limits/Spend", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"limit.name": str("NewOrdersPerAccount"), "allowed": attribute.BoolValue(true), "rpc.grpc.status_code": num(0)}}},
		},
		{
			name: "a gRPC key-value spend of an unknown limit has an error status",
			call: func(t *testing.T, ts *tracedServer) {
				if _, err := ts.kv.Spend(t.Context(), &sluicev1.Request{Name: "NoSuchLimit", Id: "1001"}); err == nil {
					t.Fatal("got no error for an unknown limit")
				}
			},
			want: []wantSpan{{name: "sluice.v1.Limits/Spend", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"rpc.grpc.status_code": num(3)}, status: otelcodes.Error}},
		},
		{
			name: "a gRPC key-value batch records its size, with one store round trip",
			call: func(t *testing.T, ts *tracedServer) {
				req := &sluicev1.BatchRequest{Transactions: []*sluicev1.Transaction{{Name: "NewOrdersPerAccount", Id: "1006"}, {Name: "NewOrdersPerAccount", Id: "1007"}}}
				if _, err := ts.kv.Batch(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			},
			want: []wantSpan{{name: "store.Do", kind: trace.SpanKindClient, attrs: map[attribute.Key]attribute.Value{"store.ops": num(2)}},
				{name: "sluice.v1.Limits/Batch", kind: trace.SpanKindServer, attrs: map[attribute.Key]attribute.Value{"transactions": num(2), "allowed": attribute.BoolValue(true), "rpc.grpc.status_code": num(0)}}},
		},
		{
			name: "an HTTP key-value spend records the limit name and the decision",
			call: func(t *testing.T, ts *tracedServer) {
				if code := ts.post(t, "/v1/spend", `{"name":"NewOrdersPerAccount","id":"1002"}`, nil); code != http.StatusOK {
					t.Fatalf("got status %d, want 200", code)
				}
			},
			want: []wantSpan{storeSpan, {name: "POST /v1/spend", kind: trace.SpanKindServer,
				attrs: map[attribute.Key]attribute.Value{"limit.name": str("NewOrdersPerAccount"), "allowed": attribute.BoolValue(true), "http.response.status_code": num(200)}}},
		},
		{
			name: "an HTTP key-value batch records its size",
			call: func(t *testing.T, ts *tracedServer) {
				body := `{"transactions":[{"name":"NewOrdersPerAccount","id":"1003"},{"name":"NewOrdersPerAccount","id":"1004"}]}`
				if code := ts.post(t, "/v1/batch", body, nil); code != http.StatusOK {
					t.Fatalf("got status %d, want 200", code)
				}
			},
			want: []wantSpan{{name: "store.Do", kind: trace.SpanKindClient, attrs: map[attribute.Key]attribute.Value{"store.ops": num(2)}},
				{name: "POST /v1/batch", kind: trace.SpanKindServer, attrs: map[attribute.Key]attribute.Value{"transactions": num(2), "allowed": attribute.BoolValue(true)}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startTraced(t)
			tc.call(t, ts)
			checkSpans(t, ts.spans.GetSpans(), tc.want)
		})
	}
}

// The caller's trace, in each format Sluice reads: trace id
// 4bf92f3577b34da6a3ce929d0e0e4736, parent span 00f067aa0ba902b7, sampled.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

var callerHeaders = []struct {
	format  string
	headers map[string]string
}{
	{"W3C traceparent", map[string]string{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}},
	{"B3 single header", map[string]string{"b3": callerTrace + "-" + callerSpan + "-1"}},
	{"B3 multiple headers", map[string]string{"X-B3-TraceId": callerTrace, "X-B3-SpanId": callerSpan, "X-B3-Sampled": "1"}},
}

func TestTracingContinuesTheCallersTrace(t *testing.T) {
	rlsReq := &rlsv3.RateLimitRequest{Domain: "traced", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for _, h := range callerHeaders {
		for _, edge := range []struct {
			name string
			call func(t *testing.T, ts *tracedServer, headers map[string]string)
		}{
			{"gRPC ShouldRateLimit metadata", func(t *testing.T, ts *tracedServer, headers map[string]string) {
				ctx := t.Context()
				for k, v := range headers {
					ctx = metadata.AppendToOutgoingContext(ctx, k, v)
				}
				if _, err := ts.rls.ShouldRateLimit(ctx, rlsReq); err != nil {
					t.Fatal(err)
				}
			}},
			{"/json headers", func(t *testing.T, ts *tracedServer, headers map[string]string) {
				ts.post(t, "/json", `{"domain":"traced","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, headers)
			}},
			{"gRPC key-value metadata", func(t *testing.T, ts *tracedServer, headers map[string]string) {
				ctx := t.Context()
				for k, v := range headers {
					ctx = metadata.AppendToOutgoingContext(ctx, k, v)
				}
				if _, err := ts.kv.Check(ctx, &sluicev1.Request{Name: "NewOrdersPerAccount", Id: "1005"}); err != nil {
					t.Fatal(err)
				}
			}},
			{"HTTP key-value headers", func(t *testing.T, ts *tracedServer, headers map[string]string) {
				ts.post(t, "/v1/check", `{"name":"NewOrdersPerAccount","id":"1005"}`, headers)
			}},
		} {
			t.Run(h.format+" in "+edge.name+" continues the trace", func(t *testing.T) {
				ts := startTraced(t)
				edge.call(t, ts, h.headers)
				spans := ts.spans.GetSpans()
				if len(spans) != 2 {
					t.Fatalf("got %d spans, want 2 (the call and its store round trip)", len(spans))
				}
				for _, s := range spans {
					if got := s.SpanContext.TraceID().String(); got != callerTrace {
						t.Errorf("span %q: got trace id %s, want the caller's %s", s.Name, got, callerTrace)
					}
				}
				call := spans[1]
				if got := call.Parent.SpanID().String(); got != callerSpan || !call.Parent.IsRemote() {
					t.Errorf("span %q: got parent %s (remote %v), want the caller's span %s", call.Name, got, call.Parent.IsRemote(), callerSpan)
				}
			})
		}
	}
}

// TestTracingOverrideSpans checks that each gRPC call of the runtime
// overrides API has its span, named by its method, with its gRPC status,
// an Error status when refused, and none of the override's content.
func TestTracingOverrideSpans(t *testing.T) {
	tracer, spans := newTracer(t)
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte("NewOrdersPerAccount: {burst: 1, count: 1, period: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := limits.New(defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(memory.New(memory.Options{}), clock.New())
	ov := server.NewOverrides(server.OverridesOptions{Limiter: lim, Files: func() *limits.Set { return files }, Clock: clock.New(), StoreKind: "memory", Logger: slog.New(slog.DiscardHandler)})
	kv := server.NewKV(server.KVOptions{Limiter: lim, Limits: ov.Limits, Overrides: ov, Admin: server.AdminAuth{Token: "s3cret"}, Tracer: tracer, Logger: slog.New(slog.DiscardHandler)})
	gs := grpc.NewServer()
	sluicev1.RegisterOverridesServer(gs, kv.OverridesGRPC())
	conn := serveGRPC(t, gs)
	c := sluicev1.NewOverridesClient(conn)
	admin := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer s3cret")
	ref := &sluicev1.OverrideRef{Name: limits.NewOrdersPerAccount, Id: "12345678"}

	code := func(n int) map[attribute.Key]attribute.Value {
		return map[attribute.Key]attribute.Value{tracing.KeyGRPCStatus: attribute.IntValue(n)}
	}
	for _, tc := range []struct {
		call func() error
		want wantSpan
	}{
		{func() error {
			_, err := c.PutOverride(admin, &sluicev1.PutOverrideRequest{Name: ref.Name, Id: ref.Id, Burst: proto.Int64(5), Count: proto.Int64(5), Period: durationpb.New(time.Hour)})
			return err
		}, wantSpan{"sluice.v1.Overrides/PutOverride", trace.SpanKindServer, code(0), otelcodes.Unset}},
		{func() error { _, err := c.GetOverride(admin, ref); return err },
			wantSpan{"sluice.v1.Overrides/GetOverride", trace.SpanKindServer, code(0), otelcodes.Unset}},
		{func() error { _, err := c.ListOverrides(admin, &sluicev1.ListOverridesRequest{}); return err },
			wantSpan{"sluice.v1.Overrides/ListOverrides", trace.SpanKindServer, code(0), otelcodes.Unset}},
		{func() error { _, err := c.DeleteOverride(t.Context(), ref); return err }, // no token
			wantSpan{"sluice.v1.Overrides/DeleteOverride", trace.SpanKindServer, code(int(codes.PermissionDenied)), otelcodes.Error}},
	} {
		spans.Reset()
		err := tc.call()
		if (err != nil) != (tc.want.status == otelcodes.Error) {
			t.Fatalf("%s: got error %v", tc.want.name, err)
		}
		checkSpans(t, spans.GetSpans(), []wantSpan{tc.want})
	}
}
