package app_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestConcurrentCallsKeepTheirOwnAnswers sends many calls at once, of one
// to six descriptors each, some with a limit override of their own (which
// protobuf decodes, the others rlswire), and checks that each answer is
// its own request's: h2grpc reuses the requests' and the answers' memory
// once each call is over, and a call's memory reused early would answer
// another's limits (or, under -race, be reported).
func TestConcurrentCallsKeepTheirOwnAnswers(t *testing.T) {
	var cfg strings.Builder
	cfg.WriteString("domain: reuse\ndescriptors:\n")
	for k := range 10 {
		fmt.Fprintf(&cfg, "  - key: k%d\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", k, 1000+k)
	}
	ta := start(t, map[string]string{"reuse.yaml": cfg.String()}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for caller := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(caller), 7))
			for call := range 150 {
				req := &rlsv3.RateLimitRequest{Domain: "reuse"}
				var want []uint32
				for range 1 + rng.IntN(6) {
					k := rng.IntN(10)
					d := desc(fmt.Sprint("k", k), fmt.Sprintf("caller%d-call%d-%d", caller, call, len(want)))
					limit := uint32(1000 + k)
					if rng.IntN(8) == 0 {
						limit = uint32(5 + k)
						d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: limit, Unit: typev3.RateLimitUnit_HOUR}
					}
					req.Descriptors = append(req.Descriptors, d)
					want = append(want, limit)
				}
				resp, err := ta.client.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Errorf("caller %d, call %d: %v", caller, call, err)
					return
				}
				if len(resp.Statuses) != len(want) {
					t.Errorf("caller %d, call %d: %d statuses for %d descriptors", caller, call, len(resp.Statuses), len(want))
					return
				}
				for i, st := range resp.Statuses {
					// Every value is new: one hit counted of the limit.
					if st.GetCurrentLimit().GetRequestsPerUnit() != want[i] || st.GetLimitRemaining() != want[i]-1 {
						t.Errorf("caller %d, call %d, descriptor %d: limit %d, remaining %d; want %d and %d",
							caller, call, i, st.GetCurrentLimit().GetRequestsPerUnit(), st.GetLimitRemaining(), want[i], want[i]-1)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
