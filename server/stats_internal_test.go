package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store/memory"
)

// TestRecordCountsDecisionsAsUpstream feeds record crafted decisions,
// including ones answered from the local over-limit cache, and checks the
// rule's counters.
func TestRecordCountsDecisionsAsUpstream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		shadow   bool
		hits     uint64
		decision limiter.Decision
		// total, over, near, within, shadow, over with local cache
		want [6]uint64
	}{
		{name: "a hit within the limit",
			hits: 1, decision: limiter.Decision{Allowed: true, Count: 1},
			want: [6]uint64{1, 0, 0, 1, 0, 0}},
		{name: "a hit past the near-limit ratio is near and within",
			hits: 1, decision: limiter.Decision{Allowed: true, Count: 9},
			want: [6]uint64{1, 0, 1, 1, 0, 0}},
		{name: "a hit over the limit from the store",
			hits: 1, decision: limiter.Decision{Count: 11},
			want: [6]uint64{1, 1, 0, 0, 0, 0}},
		{name: "a cached over-limit answer counts over_limit and over_limit_with_local_cache",
			hits: 3, decision: limiter.Decision{Cached: true},
			want: [6]uint64{3, 3, 0, 0, 0, 3}},
		{name: "a cached over-limit answer of a shadow-mode rule counts shadow_mode too",
			shadow: true, hits: 2, decision: limiter.Decision{Cached: true},
			want: [6]uint64{2, 2, 0, 0, 2, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(nil)
			s := NewRLS(RLSOptions{Limiter: limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Unix(1e9, 0))), Metrics: m})
			rule := &descriptors.Rule{StatsKey: "d.k", RequestsPerUnit: 10, ShadowMode: tc.shadow}
			s.record(&check{rule: rule, hits: tc.hits}, rule, rule.StatsKey, &tc.decision)
			r := m.Stats().Rule("d.k")
			got := [6]uint64{r.TotalHits.Load(), r.OverLimit.Load(), r.NearLimit.Load(),
				r.WithinLimit.Load(), r.ShadowMode.Load(), r.OverLimitWithLocalCache.Load()}
			if got != tc.want {
				t.Errorf("got total, over, near, within, shadow, cached = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObserveRequestSplitsErrorsAsUpstream(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	for _, c := range []codes.Code{codes.OK, codes.Unavailable, codes.Unavailable, codes.InvalidArgument, codes.Internal} {
		m.observeRequest(time.Millisecond, c)
	}
	st := m.Stats()
	for _, tc := range []struct {
		name      string
		got, want uint64
	}{
		{name: "total_requests counts every call", got: st.TotalRequests.Load(), want: 5},
		{name: "redis_error counts the store's unavailability", got: st.RedisError.Load(), want: 2},
		{name: "service_error counts other failures", got: st.ServiceError.Load(), want: 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}
