package server_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// benchConfig has five top-level keys, each limited per value.
func benchRLS(b testing.TB) *server.RLS {
	b.Helper()
	var sb strings.Builder
	sb.WriteString("domain: bench\ndescriptors:\n")
	for k := range 5 {
		fmt.Fprintf(&sb, "  - key: k%d\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n", k)
	}
	d, err := descriptors.Parse("bench.yaml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		b.Fatal(err)
	}
	rls := server.NewRLS(server.RLSOptions{Limiter: limiter.New(memory.New(memory.Options{}), clock.New())})
	rls.SetConfig(cfg)
	return rls
}

func benchRequest(n int, value string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "bench"}
	for k := range n {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k" + strconv.Itoa(k), Value: value}},
		})
	}
	return req
}

// BenchmarkShouldRateLimit is a whole ShouldRateLimit call in-process on
// the memory store, without gRPC: 1 and 5 descriptors, over 10,000 client
// values.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			rls := benchRLS(b)
			reqs := make([]*rlsv3.RateLimitRequest, 10000)
			for i := range reqs {
				reqs[i] = benchRequest(n, "client-"+strconv.Itoa(i))
			}
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
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
