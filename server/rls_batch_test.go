package server_test

import (
	"context"
	"fmt"
	"slices"
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

// batchCfg is batchConfig, loaded.
func batchCfg(t *testing.T) *descriptors.Config {
	t.Helper()
	d, err := descriptors.Parse("shop.yaml", []byte(batchConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// batchRLS is an RLS on a memory store of its own, at a fixed instant.
func batchRLS(t *testing.T) *server.RLS {
	t.Helper()
	cfg := batchCfg(t)
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

// TestShouldRateLimitsAnswersAsOneByOne checks that a batch whose
// requests share no window is answered exactly as the same requests made
// one after another: invalid requests failing alone, unknown domains,
// unlimited descriptors, a request's own hits, negative hits, and a batch
// large enough to be counted in several limiter calls.
func TestShouldRateLimitsAnswersAsOneByOne(t *testing.T) {
	// wide is a request of n+1 descriptors, all its own.
	wide := func(user string, n int) *rlsv3.RateLimitRequest {
		req := rlsRequest("shop", 0, [2]string{"user", user})
		for i := range n {
			req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/" + user + strconv.Itoa(i)}}})
		}
		return req
	}
	negative := rlsRequest("shop", 0, [2]string{"user", "eve"})
	negative.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
	negative.Descriptors[0].IsNegativeHits = true
	batches := map[string][]*rlsv3.RateLimitRequest{
		"failures and answers": {
			rlsRequest("shop", 0, [2]string{"user", "ann"}, [2]string{"path", "/a"}),
			rlsRequest("shop", 4, [2]string{"user", "bob"}),
			rlsRequest("", 0, [2]string{"user", "cid"}),
			rlsRequest("shop", 0, [2]string{"user", "dan"}, [2]string{"free", "x"}),
			rlsRequest("nowhere", 0, [2]string{"user", "ann"}),
			rlsRequest("shop", 0),
			negative,
			rlsRequest("shop", 2, [2]string{"user", "fay"}, [2]string{"user", "fay"}),
		},
		// More than limiter.MaxOpsPerCall transactions: counted in
		// several limiter calls.
		"counted in several calls": {wide("ann", 120), wide("bob", 120), wide("cid", 120), rlsRequest("shop", 0, [2]string{"user", "dan"})},
	}
	for name, reqs := range batches {
		t.Run(name, func(t *testing.T) {
			one, batch := batchRLS(t), batchRLS(t)
			calls := batchOf(reqs)
			batch.ShouldRateLimits(calls)
			for i, req := range reqs {
				want, wantErr := one.ShouldRateLimit(context.Background(), req)
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

// TestShouldRateLimitsCountsABusyWindowExactly checks that requests of a
// batch counting the same windows are each counted once, as concurrent
// requests are: each window's answers, and the overall codes, are those
// of the requests made one after another, in some order.
func TestShouldRateLimitsCountsABusyWindowExactly(t *testing.T) {
	var reqs []*rlsv3.RateLimitRequest
	for i := range 6 {
		reqs = append(reqs, rlsRequest("shop", 0, [2]string{"user", "ann"}, [2]string{"path", "/" + strconv.Itoa(i%2)}))
	}
	one, batch := batchRLS(t), batchRLS(t)
	calls := batchOf(reqs)
	batch.ShouldRateLimits(calls)
	var got, want [3][]string // overall codes, then each descriptor's status
	for i, req := range reqs {
		w, err := one.ShouldRateLimit(context.Background(), req)
		if err != nil || calls[i].Err != nil {
			t.Fatalf("request %d: %v, %v", i, err, calls[i].Err)
		}
		for k, r := range map[int]*rlsv3.RateLimitResponse{0: w, 1: calls[i].Resp} {
			sets := &want
			if k == 1 {
				sets = &got
			}
			sets[0] = append(sets[0], r.GetOverallCode().String())
			for j, st := range r.GetStatuses() {
				sets[1+j] = append(sets[1+j], fmt.Sprintf("%s/%d", st.GetCode(), st.GetLimitRemaining()))
			}
		}
	}
	for k := range got {
		slices.Sort(got[k])
		slices.Sort(want[k])
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("answers (0: overall, 1: user, 2: path) %d: %v, want %v in some order", k, got[k], want[k])
		}
	}
}

func batchOf(reqs []*rlsv3.RateLimitRequest) []server.RLSCall {
	calls := make([]server.RLSCall, len(reqs))
	for i, req := range reqs {
		calls[i] = server.RLSCall{Ctx: context.Background(), Req: req}
	}
	return calls
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

// TestShouldRateLimitsKeepsStopIncrementPerRequest checks that with
// StopIncrementWhenOverLimit one request's descriptor over its limit stops
// the counting of that request's other descriptors only, not of the other
// requests of its batch.
func TestShouldRateLimitsKeepsStopIncrementPerRequest(t *testing.T) {
	cfg := batchCfg(t)
	newRLS := func() *server.RLS {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		rls := server.NewRLS(server.RLSOptions{
			Limiter: limiter.NewWithOptions(memory.New(memory.Options{}), clk, limiter.Options{StopIncrementWhenOverLimit: true}),
			Clock:   clk,
		})
		rls.SetConfig(cfg)
		// ann at her limit of 3 a minute.
		for range 3 {
			if _, err := rls.ShouldRateLimit(context.Background(), rlsRequest("shop", 0, [2]string{"user", "ann"})); err != nil {
				t.Fatal(err)
			}
		}
		return rls
	}
	one, batch := newRLS(), newRLS()
	reqs := []*rlsv3.RateLimitRequest{
		rlsRequest("shop", 0, [2]string{"user", "ann"}, [2]string{"path", "/x"}), // over: /x not counted
		rlsRequest("shop", 0, [2]string{"user", "bob"}, [2]string{"path", "/y"}), // counted
		rlsRequest("shop", 0, [2]string{"user", "cid"}, [2]string{"path", "/z"}),
	}
	calls := batchOf(reqs)
	batch.ShouldRateLimits(calls)
	for i, req := range reqs {
		want, err := one.ShouldRateLimit(context.Background(), req)
		if err != nil || calls[i].Err != nil {
			t.Fatalf("request %d: %v, %v", i, err, calls[i].Err)
		}
		if !proto.Equal(calls[i].Resp, want) {
			t.Errorf("request %d: got\n%v\nwant\n%v", i, calls[i].Resp, want)
		}
	}
}
