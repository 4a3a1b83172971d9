package server_test

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestRLSAllocations checks a request's allocations on the memory store:
// for one descriptor its counter key and its response (one allocation
// for every message); for five, their counter keys together, the
// response, its array of pointers and one array of every descriptor's
// messages.
func TestRLSAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items on purpose (make allocs runs this without it)")
	}
	rls := benchRLS(t)
	ctx := context.Background()
	for _, tc := range []struct{ descriptors, want int }{{1, 2}, {5, 4}} {
		req := benchRequest(tc.descriptors, "client")
		allocs := testing.AllocsPerRun(200, func() {
			if resp, err := rls.ShouldRateLimit(ctx, req); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("%v, %v", resp, err)
			}
		})
		if int(allocs) > tc.want {
			t.Errorf("%d descriptors: %v allocations a request, want %d", tc.descriptors, allocs, tc.want)
		}
	}
}
