package server_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

const batchConfig = `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: free
    rate_limit: {unlimited: true}
`

// batchRLS is an RLS on a memory store of its own, at a fixed instant.
func batchRLS(t *testing.T) *server.RLS {
	t.Helper()
	d, err := descriptors.Parse("shop.yaml", []byte(batchConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	rls := server.NewRLS(server.RLSOptions{
		Limiter:         limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Unix(1_700_000_000, 0))),
		Clock:           clock.NewFake(time.Unix(1_700_000_000, 0)),
		DynamicMetadata: true,
	})
	rls.SetConfig(cfg)
	return rls
}

func rlsRequest(domain string, hits uint32, kvs ...[2]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, kv := range kvs {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: kv[0], Value: kv[1]}}})
	}
	return req
}

// TestShouldRateLimitsAnswersAsOneByOne checks that a batch is answered
// exactly as the same requests made one after another: windows shared by
// requests of the batch counted in the batch's order, invalid requests
// failing alone, unknown domains, unlimited descriptors, a request's own
// hits, negative hits, and a batch large enough to be counted in several
// groups.
func TestShouldRateLimitsAnswersAsOneByOne(t *testing.T) {
	// wide is a request of n+1 descriptors, all its own.
	wide := func(user string, n int) *rlsv3.RateLimitRequest {
		req := rlsRequest("shop", 0, [2]string{"user", user})
		for i := range n {
			req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/" + user + strconv.Itoa(i)}}})
		}
		return req
	}
	negative := rlsRequest("shop", 0, [2]string{"user", "ann"})
	negative.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
	negative.Descriptors[0].IsNegativeHits = true
	batches := map[string][]*rlsv3.RateLimitRequest{
		"shared windows and failures": {
			rlsRequest("shop", 0, [2]string{"user", "ann"}, [2]string{"path", "/a"}),
			rlsRequest("shop", 2, [2]string{"user", "ann"}),
			rlsRequest("", 0, [2]string{"user", "ann"}),
			rlsRequest("shop", 0, [2]string{"user", "ann"}, [2]string{"free", "x"}),
			rlsRequest("nowhere", 0, [2]string{"user", "ann"}),
			rlsRequest("shop", 0),
			negative,
			rlsRequest("shop", 0, [2]string{"user", "bob"}),
		},
		// More than limiter.MaxOpsPerCall transactions: counted in groups
		// side by side, as concurrent requests (no window shared between
		// them here, so any order answers alike).
		"counted in groups": {wide("ann", 120), wide("bob", 120), wide("cid", 120), rlsRequest("shop", 0, [2]string{"user", "dan"})},
	}
	for name, reqs := range batches {
		t.Run(name, func(t *testing.T) {
			one, batch := batchRLS(t), batchRLS(t)
			ctx := context.Background()
			calls := make([]server.RLSCall, len(reqs))
			for i, req := range reqs {
				calls[i] = server.RLSCall{Ctx: ctx, Req: req}
			}
			batch.ShouldRateLimits(calls)
			for i, req := range reqs {
				want, wantErr := one.ShouldRateLimit(ctx, req)
				got, gotErr := calls[i].Resp, calls[i].Err
				if status.Code(gotErr) != status.Code(wantErr) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Errorf("request %d: error %v, want %v", i, gotErr, wantErr)
				}
				if !proto.Equal(got, want) {
					t.Errorf("request %d: got\n%v\nwant\n%v", i, got, want)
				}
			}
		})
	}
}

// TestShouldRateLimitsOutlivesACancelledCall checks that one call's
// cancellation does not fail the others of its batch.
func TestShouldRateLimitsOutlivesACancelledCall(t *testing.T) {
	rls := batchRLS(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	calls := []server.RLSCall{
		{Ctx: cancelled, Req: rlsRequest("shop", 0, [2]string{"user", "ann"})},
		{Ctx: context.Background(), Req: rlsRequest("shop", 0, [2]string{"user", "bob"})},
	}
	rls.ShouldRateLimits(calls)
	if calls[1].Err != nil || calls[1].Resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("the live call: %v, %v; want an OK answer", calls[1].Resp, calls[1].Err)
	}
	if calls[0].Err != nil && status.Code(calls[0].Err) != codes.Canceled {
		t.Errorf("the cancelled call: %v", calls[0].Err)
	}
}
