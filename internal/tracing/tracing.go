// Package tracing is Sluice's OpenTelemetry tracing, as envoyproxy/ratelimit
// offers it: a TracerProvider that exports spans over OTLP (HTTP or gRPC),
// W3C trace context, baggage and B3 propagation, and the few spans Sluice
// starts: one per rate limit call (gRPC ShouldRateLimit and /json), one per
// key-value call (gRPC and HTTP), and one per store round trip.
//
// Tracing is off unless a Provider is built: the front doors hold a
// *Tracer that is nil when tracing is off and test it before doing any
// tracing work, so a service without tracing pays one nil check per call
// and allocates nothing for it.
//
// The OTLP exporters read the standard OTEL_EXPORTER_OTLP_* environment
// variables themselves (endpoint, headers, timeout, certificates,
// compression, insecure); Options only chooses the protocol and describes
// the service.
package tracing

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// DefaultServiceName is the service.name of Sluice's spans unless told
// otherwise: envoyproxy/ratelimit's, so traces keep their service when
// Sluice replaces it.
const DefaultServiceName = "RateLimit"

// The exporter protocols.
const (
	ProtocolHTTP = "http" // OTLP over HTTP, protobuf, POST /v1/traces; the default
	ProtocolGRPC = "grpc" // OTLP over gRPC
)

// Options configure a Provider. The zero value exports over OTLP/HTTP to
// the endpoint the OTEL_EXPORTER_OTLP_* variables name (the SDK's
// default: localhost:4318), samples nothing (SamplingRate 0), and names
// the service DefaultServiceName with a random instance id.
type Options struct {
	// Protocol is ProtocolHTTP ("" too) or ProtocolGRPC.
	Protocol string
	// ServiceName is the resource's service.name; default
	// DefaultServiceName.
	ServiceName string
	// ServiceNamespace is the resource's service.namespace; empty: none.
	ServiceNamespace string
	// ServiceInstanceID is the resource's service.instance.id; default a
	// random version 4 UUID, new at each start.
	ServiceInstanceID string
	// SamplingRate is the fraction of new traces sampled, in [0, 1]. A call
	// that continues a caller's trace follows the caller's decision.
	SamplingRate float64
	// Exporter, when set, replaces the OTLP exporter and receives each span
	// as it ends (tests use tracetest.InMemoryExporter); Protocol is then
	// ignored.
	Exporter sdktrace.SpanExporter
}

// Provider owns the SDK's TracerProvider and its exporter. Create it with
// NewProvider and end it with Shutdown; it is safe for concurrent use.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer *Tracer
}

// NewProvider builds the TracerProvider of o. It does not connect: the
// exporter connects when it first sends spans, and a collector that is
// down costs dropped spans, never a failed call.
func NewProvider(ctx context.Context, o Options) (*Provider, error) {
	if o.SamplingRate < 0 || o.SamplingRate > 1 || o.SamplingRate != o.SamplingRate {
		return nil, fmt.Errorf("tracing: invalid sampling rate %v, must be between 0 and 1", o.SamplingRate)
	}
	if o.ServiceName == "" {
		o.ServiceName = DefaultServiceName
	}
	if o.ServiceInstanceID == "" {
		o.ServiceInstanceID = randomUUID()
	}
	var spans sdktrace.TracerProviderOption
	switch {
	case o.Exporter != nil:
		spans = sdktrace.WithSyncer(o.Exporter)
	case o.Protocol == ProtocolHTTP || o.Protocol == "":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/HTTP exporter: %w", err)
		}
		spans = sdktrace.WithBatcher(exp)
	case o.Protocol == ProtocolGRPC:
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/gRPC exporter: %w", err)
		}
		spans = sdktrace.WithBatcher(exp)
	default:
		return nil, fmt.Errorf("tracing: invalid exporter protocol %q, must be http or grpc", o.Protocol)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(o.ServiceName), semconv.ServiceInstanceID(o.ServiceInstanceID)}
	if o.ServiceNamespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(o.ServiceNamespace))
	}
	tp := sdktrace.NewTracerProvider(
		spans,
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
	)
	return &Provider{tp: tp, tracer: New(tp)}, nil
}

// Tracer returns the Tracer that starts Sluice's spans on p.
func (p *Provider) Tracer() *Tracer { return p.tracer }

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx. Spans started after it are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// randomUUID returns a random (version 4) UUID, as envoyproxy/ratelimit
// names an instance by default.
func randomUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Propagator reads and writes a caller's trace in the formats Sluice
// accepts: W3C traceparent/tracestate, W3C baggage, and B3 in its single
// (b3) and multi-header (X-B3-TraceId, …) forms; B3 is written as a
// single header.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{})
}

// Tracer starts Sluice's spans. Create it with New (or Provider.Tracer);
// front doors hold a nil *Tracer when tracing is off and must not call its
// methods then. It is safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer whose spans go to tp, continuing callers' traces
// read with Propagator.
func New(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer("github.com/sluice-rl/sluice"), prop: Propagator()}
}

// StartGRPC starts the server span of a gRPC call named name (the full
// method, "package.Service/Method"), as a child of the caller's span when
// the call's incoming metadata carries one.
func (t *Tracer) StartGRPC(ctx context.Context, name string) (context.Context, trace.Span) {
	ctx = t.prop.Extract(ctx, metadataCarrier{ctx})
	ctx, span := t.tracer.Start(ctx, name, serverSpan...)
	if span.IsRecording() {
		span.SetAttributes(semconv.RPCSystemNameGRPC)
	}
	return ctx, span
}

// The start options of Sluice's spans, built once: a sampled-out call
// allocates no option slice. Attributes are set only on recording spans.
var (
	serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// StartHTTP starts the server span of an HTTP request named name (method
// and route, "POST /v1/spend"), as a child of the caller's span when the
// request's headers carry one.
func (t *Tracer) StartHTTP(r *http.Request, name string) (context.Context, trace.Span) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.tracer.Start(ctx, name, serverSpan...)
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method))
	}
	return ctx, span
}

// metadataCarrier reads a gRPC call's incoming metadata for a propagator.
// It only reads: Set does nothing.
type metadataCarrier struct{ ctx context.Context }

// Get returns the first value of key (matched case-insensitively), or "".
func (c metadataCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(string, string) {}

func (c metadataCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}

// Attribute keys of Sluice's spans. Every value is bounded by the
// configuration (a domain, a limit name, a store backend) or is a count or
// an outcome; no span records a descriptor value or a bucket id.
const (
	// KeyDomain is the rate limit request's domain, as envoyproxy/ratelimit
	// records it.
	KeyDomain = attribute.Key("domain")
	// KeyDescriptors is the number of descriptors in the request.
	KeyDescriptors = attribute.Key("descriptors")
	// KeyOverallCode is the response's overall code: OK or OVER_LIMIT.
	KeyOverallCode = attribute.Key("overall_code")
	// KeyLimitName is a key-value call's limit name.
	KeyLimitName = attribute.Key("limit.name")
	// KeyTransactions is the number of transactions of a key-value batch.
	KeyTransactions = attribute.Key("transactions")
	// KeyAllowed is a key-value call's decision.
	KeyAllowed = attribute.Key("allowed")
	// KeyStore is the store backend: memory, redis or memcache.
	KeyStore = attribute.Key("store")
	// KeyOps is the number of bucket operations in one store round trip.
	KeyOps = attribute.Key("store.ops")
	// KeyGRPCStatus is a gRPC call's status code, as a number.
	KeyGRPCStatus = attribute.Key("rpc.grpc.status_code")
	// KeyHTTPStatus is an HTTP request's response status.
	KeyHTTPStatus = semconv.HTTPResponseStatusCodeKey
)

// Annotate records a call's outcome on span: the attributes, and when err
// is not nil an Error status with err's message and an exception event.
// Callers that build many attributes should test span.IsRecording first.
func Annotate(span trace.Span, err error, attrs ...attribute.KeyValue) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// End is Annotate, then ends span.
func End(span trace.Span, err error, attrs ...attribute.KeyValue) {
	Annotate(span, err, attrs...)
	span.End()
}

// StoreSpanName is the name of the span of one store round trip.
const StoreSpanName = "store.Do"

// StartStore starts the client span of one store round trip of ops bucket
// operations on backend (the --store name), a child of ctx's span. It
// returns a nil span, and costs nothing, when ctx's span was sampled out:
// its child would be too.
func (t *Tracer) StartStore(ctx context.Context, backend string, ops int) (context.Context, trace.Span) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsSampled() {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, StoreSpanName, clientSpan...)
	if span.IsRecording() {
		span.SetAttributes(KeyStore.String(backend), KeyOps.Int(ops))
	}
	return ctx, span
}
