package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// BenchmarkShouldRateLimitTracing is BenchmarkShouldRateLimit's call (one
// descriptor, memory store, no gRPC transport) with tracing off and on: on
// with a sampled W3C traceparent in the incoming metadata (as from Envoy),
// every call is sampled and its two spans (the call and the store round
// trip) are batched and exported over OTLP/HTTP to a receiver on a
// loopback port in the same process, which reads and discards them; on at
// sampling rate 0 without a traceparent, no call is sampled.
// cpu-ns/op is the process's user+system CPU per call, exporter and
// receiver included.
func BenchmarkShouldRateLimitTracing(b *testing.B) {
	var received atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)

	d, err := descriptors.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: k0\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = benchRequest(1, "client-"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		on     bool
		rate   float64
		parent bool // the calls carry a sampled traceparent
	}{{false, 0, true}, {true, 1, true}, {true, 0, false}} {
		b.Run(fmt.Sprintf("tracing=%v/sampling=%v/traceparent=%v", tc.on, tc.rate, tc.parent), func(b *testing.B) {
			lim := limiter.New(memory.New(memory.Options{}), clock.New())
			o := server.RLSOptions{Limiter: lim}
			if tc.on {
				p, err := tracing.NewProvider(context.Background(), tracing.Options{Protocol: tracing.ProtocolHTTP, SamplingRate: tc.rate})
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = p.Shutdown(context.Background()) }()
				o.Tracer = p.Tracer()
				lim.TraceStore(o.Tracer, "memory")
			}
			rls := server.NewRLS(o)
			rls.SetConfig(cfg)
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "1"))
			if tc.parent {
				ctx = metadata.NewIncomingContext(context.Background(),
					metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
			}
			var next atomic.Int64
			before := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1))
				for pb.Next() {
					if _, err := rls.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
						b.Errorf("got %v", err)
						return
					}
					i++
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far, in
// nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
