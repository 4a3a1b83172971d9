package server_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/stats"
	"github.com/sluice-rl/sluice/store/memory"
)

// BenchmarkShouldRateLimitStatsD is a whole one-descriptor ShouldRateLimit
// call in-process, with the service's statistics, with the StatsD sink
// off and on: on, a flusher sends to a TCP listener on loopback every
// 100ms (the listener reads and drops the lines), so flushes and the
// response-time sampling run during the benchmark.
func BenchmarkShouldRateLimitStatsD(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "statsd=off"
		if on {
			name = "statsd=on"
		}
		b.Run(name, func(b *testing.B) {
			cfg := benchRLS(b).Config()
			m := server.NewMetrics(nil)
			rls := server.NewRLS(server.RLSOptions{Limiter: limiter.New(memory.New(memory.Options{}), clock.New()), Metrics: m})
			rls.SetConfig(cfg)
			if on {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
					}
				}()
				sd, err := stats.NewStatsD(m.Stats(), stats.StatsDOptions{Addr: ln.Addr().String(), Interval: 100 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); sd.Run(ctx) }()
				defer func() { cancel(); <-done }()
			}
			reqs := make([]*rlsv3.RateLimitRequest, 10000)
			for i := range reqs {
				reqs[i] = benchRequest(1, "client-"+strconv.Itoa(i))
			}
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1))
				for pb.Next() {
					resp, err := rls.ShouldRateLimit(ctx, reqs[i%len(reqs)])
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("got %v, %v", resp, err)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
