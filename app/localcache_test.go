package app_test

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

func TestLocalCacheOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		got  func(o app.Options) any
		want any
	}{
		{name: "off by default", got: func(o app.Options) any {
			return []any{o.LocalCacheSize, o.StopCacheKeyIncrementWhenOverLimit, o.Redis.ExpirationJitter}
		}, want: []any{0, false, time.Duration(0)}},
		{name: "the flags", args: []string{"--local-cache-size", "1048576", "--stop-cache-key-increment-when-overlimit", "--redis-expiration-jitter", "30s"},
			got: func(o app.Options) any {
				return []any{o.LocalCacheSize, o.StopCacheKeyIncrementWhenOverLimit, o.Redis.ExpirationJitter}
			}, want: []any{1048576, true, 30 * time.Second}},
		{name: "the SLUICE_ variables", env: map[string]string{"SLUICE_LOCAL_CACHE_SIZE": "4096", "SLUICE_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "SLUICE_REDIS_EXPIRATION_JITTER": "5s"},
			got: func(o app.Options) any {
				return []any{o.LocalCacheSize, o.StopCacheKeyIncrementWhenOverLimit, o.Redis.ExpirationJitter}
			}, want: []any{4096, true, 5 * time.Second}},
		{name: "envoyproxy/ratelimit's variables", env: map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "EXPIRATION_JITTER_MAX_SECONDS": "300"},
			got: func(o app.Options) any {
				// None of them is reported as having no effect.
				unsupported := slices.ContainsFunc(o.EnvoyEnvUnsupported, func(v string) bool {
					return strings.HasPrefix(v, "LOCAL_CACHE") || strings.HasPrefix(v, "STOP_CACHE") || strings.HasPrefix(v, "EXPIRATION")
				})
				return []any{o.LocalCacheSize, o.StopCacheKeyIncrementWhenOverLimit, o.Redis.ExpirationJitter, o.Memcache.Jitter, unsupported}
			}, want: []any{1048576, true, 300 * time.Second, 300 * time.Second, false}},
		{name: "a flag wins over envoyproxy/ratelimit's variable", args: []string{"--local-cache-size", "0"}, env: map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
			got: func(o app.Options) any { return o.LocalCacheSize }, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := app.ParseServe(tc.args, envOf(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.got(o); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLocalCacheBadOptionsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "a negative cache size", args: []string{"--local-cache-size", "-1"}, want: "local-cache-size"},
		{name: "a cache size that is not a number", env: map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "lots"}, want: "LOCAL_CACHE_SIZE_IN_BYTES"},
		{name: "a negative jitter", args: []string{"--redis-expiration-jitter", "-1s"}, want: "redis-expiration-jitter"},
		{name: "a jitter of more than a day", env: map[string]string{"EXPIRATION_JITTER_MAX_SECONDS": "100000"}, want: "redis-expiration-jitter"},
		{name: "a stop-increment that is not a boolean", env: map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "maybe"}, want: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := app.ParseServe(tc.args, envOf(tc.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestLocalCacheSparesRedisUnderAFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSingle(t)
	ta := start(t, map[string]string{"flood.yaml": `
domain: flood
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
`}, func(o *app.Options) {
		o.Store = "redis"
		o.Redis.Addrs = []string{srv.Addr}
		o.Redis.Timeout = 2 * time.Second
		o.LocalCacheSize = 1 << 20
	})
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ta.ask(t, "flood", desc("client", "bot")).OverallCode; got != want {
			t.Fatalf("request %d: got %s, want %s", i+1, got, want)
		}
	}
	before := dataCommands(srv.CommandCalls())
	for i := range 300 {
		ta.clock.Advance(100 * time.Millisecond) // 30s, inside the minute
		resp := ta.ask(t, "flood", desc("client", "bot"))
		st := resp.Statuses[0]
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.DurationUntilReset.AsDuration() <= 0 {
			t.Fatalf("flood request %d: got %v, want OVER_LIMIT with the limit, 0 remaining and a reset", i+1, resp)
		}
	}
	if got := dataCommands(srv.CommandCalls()) - before; got != 0 {
		t.Errorf("flood: got %d Redis commands, want 0", got)
	}
	ta.clock.Advance(30 * time.Second) // the next minute
	if got := ta.ask(t, "flood", desc("client", "bot")).OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Errorf("in the next window: got %s, want OK", got)
	}
	if got := dataCommands(srv.CommandCalls()) - before; got == 0 {
		t.Errorf("in the next window: got no Redis command, want the store asked")
	}
}

// dataCommands sums the calls of the commands that touch keys: everything
// but the connection's own (HELLO, CLIENT, PING) and INFO.
func dataCommands(calls map[string]int64) int64 {
	var n int64
	for c, v := range calls {
		switch c {
		case "info", "hello", "client|setname", "client|setinfo", "client", "ping":
			continue
		}
		n += v
	}
	return n
}

// TestStopIncrementPeeksSplitHitsAsUpstream: with the local cache and
// --stop-cache-key-increment-when-overlimit, a descriptor of a request
// whose other descriptor is cached over its limit is only peeked; its
// hits are split between within, near and over from the count it has, as
// envoyproxy/ratelimit (f2fb157) splits them, whose count before the hits
// (the count less the hits, in unsigned arithmetic) wraps when the hits
// are more than the count: then every hit is near the limit (or over it).
func TestStopIncrementPeeksSplitHitsAsUpstream(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, func(o *app.Options) {
		o.LocalCacheSize, o.StopCacheKeyIncrementWhenOverLimit, o.NearLimitRatio = 1<<20, true, 0.6
	})
	blocked := desc("counter", "blocked")
	blocked.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_HOUR}
	if resp := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{blocked}}); resp.OverallCode != over {
		t.Fatalf("a limit of 0: got %v, want OVER_LIMIT", resp.OverallCode)
	}
	for range 7 { // 10 a minute, near from 6: 6 within, then 1 near
		ta.ask(t, "modes", desc("counter", "peeked"))
	}
	peeked := desc("counter", "peeked")
	peeked.HitsAddend = wrapperspb.UInt64(100)
	resp := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{blocked, peeked}})
	if st := resp.Statuses[1]; st.Code != ok || st.LimitRemaining != 3 {
		t.Fatalf("the peeked descriptor: got %v, want OK with 3 remaining (counted 7, not 107)", st)
	}
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	for _, want := range []string{
		`sluice_ratelimit_total_hits{rule="modes.counter"} 107`,
		`sluice_ratelimit_within_limit{rule="modes.counter"} 107`,
		`sluice_ratelimit_near_limit{rule="modes.counter"} 101`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
