package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// severalLimitsConfig gives one descriptor three limits and another two
// that tie on what remains.
const severalLimitsConfig = `
domain: multi
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 100, name: hourly}
  - key: tie
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: minute, requests_per_unit: 2}
  - key: smooth
    rate_limits:
      - {unit: minute, requests_per_unit: 60, burst: 2}
      - {unit: hour, requests_per_unit: 1000}
`

// wantStatus is what one descriptor's status should say.
type wantStatus struct {
	code      rlsv3.RateLimitResponse_Code
	limit     uint32 // requests_per_unit of the limit reported
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     time.Duration
}

func checkStatus(t *testing.T, step string, resp *rlsv3.RateLimitResponse, w wantStatus) {
	t.Helper()
	st := resp.GetStatuses()[0]
	got := wantStatus{st.GetCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration()}
	if got != w {
		t.Errorf("%s: got %v %d/%v remaining %d reset %s, want %v %d/%v remaining %d reset %s", step,
			got.code, got.limit, got.unit, got.remaining, got.reset, w.code, w.limit, w.unit, w.remaining, w.reset)
	}
	if resp.GetOverallCode() != w.code {
		t.Errorf("%s: overall code %v, want %v", step, resp.GetOverallCode(), w.code)
	}
}

// backendsForSeveralLimits are the stores the feature is checked on.
func backendsForSeveralLimits(t *testing.T) []struct {
	name  string
	tweak func(*app.Options)
	reads func() int64 // Redis reads of the calls since the last one (nil: not Redis)
} {
	single := redistest.StartSingle(t)
	cluster := redistest.StartCluster(t, 3)
	readsOf := func(nodes ...*redistest.Server) func() int64 {
		last := int64(-1)
		return func() int64 {
			n := int64(0)
			for _, s := range nodes {
				n += s.Reads() - 1 // less this INFO call's own read
			}
			since := n - last
			last = n + int64(len(nodes)) // the next call's INFO reads
			return since
		}
	}
	prefix := 0
	onRedis := func(mode string, addrs []string) func(*app.Options) {
		prefix++
		p := fmt.Sprintf("multi%d:", prefix)
		return func(o *app.Options) {
			o.Store, o.Redis.Mode, o.Redis.Addrs, o.Redis.KeyPrefix, o.Redis.Timeout = "redis", mode, addrs, p, 2*time.Second
		}
	}
	return []struct {
		name  string
		tweak func(*app.Options)
		reads func() int64
	}{
		{"memory", nil, nil},
		{"Redis", onRedis("single", []string{single.Addr}), readsOf(single)},
		{"Redis Cluster", onRedis("cluster", cluster.Addrs()), readsOf(cluster.Nodes...)},
	}
}

func TestSeveralLimitsOnOneDescriptor(t *testing.T) {
	for _, be := range backendsForSeveralLimits(t) {
		t.Run("on "+be.name, func(t *testing.T) {
			ta := start(t, map[string]string{"multi.yaml": severalLimitsConfig}, be.tweak)
			const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
			sec, mnt := rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE
			ask := func() *rlsv3.RateLimitResponse { return ta.ask(t, "multi", desc("user", "alice")) }
			// The clock stands on an hour boundary. Three a second: the
			// second's limit is the closest.
			checkStatus(t, "first call", ask(), wantStatus{ok, 3, sec, 2, time.Second})
			ask()
			checkStatus(t, "third call", ask(), wantStatus{ok, 3, sec, 0, time.Second})
			checkStatus(t, "fourth call in the second", ask(), wantStatus{over, 3, sec, 0, time.Second})
			// A new second: the minute's limit (4 counted of 5) is now the
			// closest, and the sixth call of the minute is over.
			ta.clock.Add(time.Second)
			checkStatus(t, "fifth call of the minute", ask(), wantStatus{ok, 5, mnt, 0, 59 * time.Second})
			ta.clock.Add(time.Second)
			checkStatus(t, "sixth call of the minute", ask(), wantStatus{over, 5, mnt, 0, 58 * time.Second})
			// Both limits over: the one that frees last is reported.
			ask()
			ask()
			checkStatus(t, "second and minute both over", ask(), wantStatus{over, 5, mnt, 0, 58 * time.Second})

			// Equal remaining: the longest reset is reported.
			checkStatus(t, "a tie", ta.ask(t, "multi", desc("tie", "t")), wantStatus{ok, 2, mnt, 1, 58 * time.Second})

			// GCRA and a window on one descriptor: the bucket of 2 empties first.
			ta.ask(t, "multi", desc("smooth", "s"))
			ta.ask(t, "multi", desc("smooth", "s"))
			checkStatus(t, "a GCRA limit over", ta.ask(t, "multi", desc("smooth", "s")), wantStatus{over, 60, mnt, 0, time.Second})

			// Every limit has its own statistics.
			_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
			for _, want := range []string{
				`sluice_ratelimit_total_hits{rule="multi.user.second"} 9`,
				`sluice_ratelimit_over_limit{rule="multi.user.second"} 2`,
				`sluice_ratelimit_total_hits{rule="multi.user.minute"} 9`,
				`sluice_ratelimit_over_limit{rule="multi.user.minute"} 4`,
				`sluice_ratelimit_total_hits{rule="multi.user.hourly"} 9`,
				`sluice_ratelimit_within_limit{rule="multi.user.hourly"} 9`,
				`sluice_ratelimit_total_hits{rule="multi.smooth.minute"} 3`,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}

			if be.reads == nil {
				return
			}
			// One round trip per request, whatever the number of limits:
			// on a Cluster too, as the limits of a descriptor share a slot
			// (several users, whose counters would otherwise spread).
			for _, user := range []string{"rt0", "rt1", "rt2", "rt3"} {
				req := &rlsv3.RateLimitRequest{Domain: "multi", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", user)}}
				ta.askReq(t, req) // connections up, the script loaded
				best := int64(1 << 62)
				for range 5 { // a keep-alive PING can fall in between: the fewest of a few tries
					be.reads()
					ta.askReq(t, req)
					best = min(best, be.reads())
				}
				if best != 1 {
					t.Errorf("user %s: %d reads by Redis for one request of a descriptor with 3 limits, want 1 round trip", user, best)
				}
			}
		})
	}
}

func TestSeveralLimitsShadowModeAndReplaces(t *testing.T) {
	ta := start(t, map[string]string{"multi.yaml": `
domain: multi
descriptors:
  - key: trial
    rate_limits:
      - {unit: second, requests_per_unit: 1, shadow_mode: true}
      - {unit: hour, requests_per_unit: 100}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 1, name: tenant_per_second}
      - {unit: hour, requests_per_unit: 100}
  - key: vip
    rate_limit: {unit: second, requests_per_unit: 10, replaces: [{name: tenant_per_second}]}
`}, nil)
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	sec, hr := rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_HOUR
	ta.ask(t, "multi", desc("trial", "x"))
	// The shadow limit is over: reported (nothing remains) but answers OK.
	checkStatus(t, "a shadow-mode limit over", ta.ask(t, "multi", desc("trial", "x")), wantStatus{ok, 1, sec, 0, time.Second})
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	for _, want := range []string{`sluice_ratelimit_shadow_mode{rule="multi.trial.second"} 1`, `sluice_ratelimit_within_limit{rule="multi.trial.hour"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	ta.ask(t, "multi", desc("tenant", "y"))
	checkStatus(t, "without vip", ta.ask(t, "multi", desc("tenant", "y")), wantStatus{over, 1, sec, 0, time.Second})
	// With vip in the request, the tenant's per-second limit is replaced;
	// its hourly one still counts.
	resp := ta.ask(t, "multi", desc("tenant", "y"), desc("vip", "y"))
	if resp.GetOverallCode() != ok {
		t.Fatalf("with vip: got %v, want OK", resp.GetOverallCode())
	}
	if st := resp.GetStatuses()[0]; st.GetCurrentLimit().GetUnit() != hr || st.GetLimitRemaining() != 97 {
		t.Errorf("with vip: the tenant reports %v with %d remaining, want the hourly limit with 97", st.GetCurrentLimit(), st.GetLimitRemaining())
	}
}
