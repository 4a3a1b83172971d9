package tracing_test

import (
	"context"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/internal/tracing"
)

func TestNewProviderRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       tracing.Options
		wantErr string
	}{
		{name: "a sampling rate above 1", o: tracing.Options{SamplingRate: 1.5}, wantErr: "invalid sampling rate 1.5, must be between 0 and 1"},
		{name: "a negative sampling rate", o: tracing.Options{SamplingRate: -0.5}, wantErr: "invalid sampling rate -0.5"},
		{name: "a sampling rate that is not a number", o: tracing.Options{SamplingRate: math.NaN()}, wantErr: "invalid sampling rate NaN"},
		{name: "an unknown protocol", o: tracing.Options{Protocol: "zipkin", SamplingRate: 1}, wantErr: `invalid exporter protocol "zipkin", must be http or grpc`},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			_, err := tracing.NewProvider(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestProviderResourceAndSampling(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name        string
		o           tracing.Options
		traceparent string
		wantSpans   int
		wantAttrs   map[attribute.Key]string
	}{
		{name: "the defaults name the service RateLimit with a random UUID instance",
			o: tracing.Options{SamplingRate: 1}, wantSpans: 1,
			wantAttrs: map[attribute.Key]string{"service.name": "RateLimit"}},
		{name: "the service name, namespace and instance id are the options'",
			o:         tracing.Options{SamplingRate: 1, ServiceName: "rl", ServiceNamespace: "edge", ServiceInstanceID: "pod-7"},
			wantSpans: 1, wantAttrs: map[attribute.Key]string{"service.name": "rl", "service.namespace": "edge", "service.instance.id": "pod-7"}},
		{name: "sampling rate 0 records no new trace", o: tracing.Options{SamplingRate: 0}, wantSpans: 0},
		{name: "sampling rate 0 still follows a caller's sampled trace", o: tracing.Options{SamplingRate: 0}, traceparent: parent, wantSpans: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			tc.o.Exporter = spans
			p, err := tracing.NewProvider(context.Background(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.traceparent != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("traceparent", tc.traceparent))
			}
			_, span := p.Tracer().StartGRPC(ctx, "test/Call")
			span.End()
			got := spans.GetSpans() // exported as it ended; Shutdown clears them
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.wantSpans {
				t.Fatalf("got %d spans, want %d", len(got), tc.wantSpans)
			}
			if len(got) == 0 {
				return
			}
			res := map[attribute.Key]string{}
			for _, a := range got[0].Resource.Attributes() {
				res[a.Key] = a.Value.Emit()
			}
			for k, v := range tc.wantAttrs {
				if res[k] != v {
					t.Errorf("got resource %s=%q, want %q", k, res[k], v)
				}
			}
			if tc.o.ServiceInstanceID == "" {
				uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
				if id := res["service.instance.id"]; !uuid4.MatchString(id) {
					t.Errorf("got service.instance.id %q, want a version 4 UUID", id)
				}
			}
		})
	}
}

func TestStartHTTPReadsB3(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	p, err := tracing.NewProvider(context.Background(), tracing.Options{Exporter: spans})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodPost, "http://sluice/json", nil)
	r.Header.Set("X-B3-TraceId", "4bf92f3577b34da6a3ce929d0e0e4736")
	r.Header.Set("X-B3-SpanId", "00f067aa0ba902b7")
	r.Header.Set("X-B3-Sampled", "1")
	_, span := p.Tracer().StartHTTP(r, "POST /json")
	span.End()
	got := spans.GetSpans()
	if len(got) != 1 || got[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("got %d spans %+v, want one child of 00f067aa0ba902b7 (sampled by the caller at rate 0)", len(got), got)
	}
}
