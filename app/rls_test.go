package app_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluice-rl/sluice/app"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

const basicConfig = `
domain: basic
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: nolimit
`

func TestRemainingCountsDownThenOverLimit(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	for i := 1; i <= 20; i++ {
		resp := ta.ask(t, "basic", desc("database", "users"))
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.Code != ok || st.LimitRemaining != uint32(20-i) {
			t.Fatalf("request %d: got %v remaining %d, want OK remaining %d", i, st.Code, st.LimitRemaining, 20-i)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 20 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("current limit: got %v, want 20 per second", st.CurrentLimit)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Second {
			t.Fatalf("duration until reset: got %s, want in (0, 1s]", d)
		}
	}
	resp := ta.ask(t, "basic", desc("database", "users"))
	if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("request 21: got %v", resp)
	}
	// The next second is a new window.
	ta.clock.Add(time.Second)
	if resp := ta.ask(t, "basic", desc("database", "users")); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("next window: got %v, want OK with 19 remaining", resp)
	}
}

func TestDescriptorsAreCountedIndependently(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	for i := 1; i <= 3; i++ {
		resp := ta.ask(t, "basic", desc("ip", "1.2.3.4"), desc("database", "users"))
		if resp.Statuses[0].LimitRemaining != uint32(3-i) || resp.Statuses[1].LimitRemaining != uint32(20-i) {
			t.Fatalf("request %d: got remaining %d and %d, want %d and %d", i, resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining, 3-i, 20-i)
		}
	}
	resp := ta.ask(t, "basic", desc("ip", "1.2.3.4"), desc("database", "users"))
	if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[1].Code != ok {
		t.Fatalf("got %v, want the ip descriptor over and the database one OK", resp)
	}
	// Each ip value has its own counter.
	if resp := ta.ask(t, "basic", desc("ip", "5.6.7.8")); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("another ip: got %v, want OK with 2 remaining", resp)
	}
}

func TestMatching(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	tests := []struct {
		name      string
		d         *rlcommon.RateLimitDescriptor
		wantLimit uint32 // 0: no current limit
		wantLeft  uint32
	}{
		{name: "the most specific key_value wins", d: desc("database", "default"), wantLimit: 500, wantLeft: 499},
		{name: "an unknown value falls back to the key", d: desc("database", "orders"), wantLimit: 5, wantLeft: 4},
		{name: "an allow-listed value is unlimited", d: desc("ip", "10.0.0.1"), wantLeft: math.MaxUint32},
		{name: "a nested descriptor matches at its depth", d: desc("message_type", "marketing", "to_number", "2061111111"), wantLimit: 5, wantLeft: 4},
		{name: "a container node alone has no limit", d: desc("message_type", "marketing")},
		{name: "a request deeper than the config gets no limit", d: desc("database", "users", "table", "x")},
		{name: "an unknown key gets no limit", d: desc("colour", "blue")},
		{name: "a node with neither limit nor children allows everything", d: desc("nolimit", "x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ta.ask(t, "basic", tt.d)
			st := resp.Statuses[0]
			if resp.OverallCode != ok || st.Code != ok {
				t.Fatalf("got %v, want OK", resp)
			}
			if st.CurrentLimit.GetRequestsPerUnit() != tt.wantLimit || st.LimitRemaining != tt.wantLeft {
				t.Fatalf("got limit %d remaining %d, want limit %d remaining %d", st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining, tt.wantLimit, tt.wantLeft)
			}
			if tt.wantLimit == 0 && st.CurrentLimit != nil {
				t.Fatalf("got current limit %v, want none", st.CurrentLimit)
			}
		})
	}
}

func TestZeroRequestsPerUnitIsAlwaysOver(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	if resp := ta.ask(t, "basic", desc("blocked", "x")); resp.OverallCode != over {
		t.Fatalf("got %v, want OVER_LIMIT", resp)
	}
}

func TestUnknownDomainIsOK(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	resp := ta.ask(t, "nowhere", desc("database", "users"))
	if resp.OverallCode != ok || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("got %v, want OK with no limit", resp)
	}
}

func TestInvalidRequests(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "basic"},
		{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: desc("database", "users").Entries,
			Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_UNKNOWN},
		}}},
		// A window of 4294967295 years, or of 300 years, overflows a
		// time.Duration.
		{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: desc("database", "users").Entries,
			Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(math.MaxUint32)},
		}}},
		{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: desc("database", "users").Entries,
			Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(300)},
		}}},
		// A hits_addend over the largest int64 cannot be counted.
		{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries:    desc("database", "users").Entries,
			HitsAddend: wrapperspb.UInt64(math.MaxUint64),
		}}},
		{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries:    desc("database", "users").Entries,
			HitsAddend: wrapperspb.UInt64(math.MaxInt64 + 1),
		}}},
	} {
		_, err := ta.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("request %v: got %v, want InvalidArgument", req, err)
		}
	}
}

const wildcardConfig = `
domain: wild
descriptors:
  - key: path
    value: /api/exact
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: path
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: tenant
    value: shared-*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value: u-*
    descriptors:
      - key: action
        value: get*
        rate_limit: {unit: minute, requests_per_unit: 2}
`

func TestWildcards(t *testing.T) {
	ta := start(t, map[string]string{"wild.yaml": wildcardConfig}, nil)
	tests := []struct {
		name      string
		d         *rlcommon.RateLimitDescriptor
		wantLimit uint32
	}{
		{name: "a prefix wildcard matches", d: desc("path", "/api/users"), wantLimit: 10},
		{name: "an exact value beats a wildcard", d: desc("path", "/api/exact"), wantLimit: 50},
		{name: "a wildcard in the middle matches", d: desc("path", "barxyzb"), wantLimit: 7},
		{name: "a middle wildcard needs the suffix", d: desc("path", "barxyz"), wantLimit: 0},
		{name: "several wildcards match in order", d: desc("path", "foo1bar2baz"), wantLimit: 6},
		{name: "the first matching wildcard in file order wins", d: desc("path", "foobarbaz"), wantLimit: 6},
		{name: "a trailing wildcard matches the rest", d: desc("path", "foo-anything"), wantLimit: 4},
		{name: "nested wildcards match at each level", d: desc("user", "u-42", "action", "getThing"), wantLimit: 2},
		{name: "a nested wildcard that does not match gives no limit", d: desc("user", "u-42", "action", "put"), wantLimit: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := ta.ask(t, "wild", tt.d).Statuses[0]
			if got := st.CurrentLimit.GetRequestsPerUnit(); got != tt.wantLimit {
				t.Fatalf("got limit %d, want %d", got, tt.wantLimit)
			}
		})
	}
}

func TestWildcardCountersPerValueUnlessShared(t *testing.T) {
	ta := start(t, map[string]string{"wild.yaml": wildcardConfig}, nil)
	// Without share_threshold each value has its own counter.
	a := ta.ask(t, "wild", desc("path", "/api/a")).Statuses[0].LimitRemaining
	b := ta.ask(t, "wild", desc("path", "/api/b")).Statuses[0].LimitRemaining
	if a != 9 || b != 9 {
		t.Fatalf("got remaining %d and %d, want 9 and 9 (separate counters)", a, b)
	}
	// With share_threshold every matching value shares one.
	var left []uint32
	for _, v := range []string{"shared-a", "shared-b", "shared-c"} {
		left = append(left, ta.ask(t, "wild", desc("tenant", v)).Statuses[0].LimitRemaining)
	}
	if fmt.Sprint(left) != "[2 1 0]" {
		t.Fatalf("got remaining %v, want [2 1 0] (one shared counter)", left)
	}
	if resp := ta.ask(t, "wild", desc("tenant", "shared-d")); resp.OverallCode != over {
		t.Fatalf("fourth shared value: got %v, want OVER_LIMIT", resp.OverallCode)
	}
}

const modesConfig = `
domain: modes
descriptors:
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: old
    rate_limit: {name: old_rule, unit: minute, requests_per_unit: 1}
  - key: older
    rate_limit: {name: older_rule, unit: minute, requests_per_unit: 1}
  - key: new
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: old_rule}, {name: older_rule}]
  - key: smooth
    rate_limit: {unit: minute, requests_per_unit: 60, burst: 2}
  - key: multi
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2}
  - key: counter
    rate_limit: {unit: minute, requests_per_unit: 10}
`

func TestShadowModeStatCountsOnlyTheHitsPastTheLimit(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	// A limit of 1: 3 hits in one request are 2 past it, then 1 more.
	// envoyproxy/ratelimit f2fb157 counts the same on the same requests.
	ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{desc("shadow", "s")}})
	ta.ask(t, "modes", desc("shadow", "s"))
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	for _, want := range []string{
		`sluice_ratelimit_shadow_mode{rule="modes.shadow"} 3`,
		`sluice_ratelimit_over_limit{rule="modes.shadow"} 3`,
		`sluice_ratelimit_total_hits{rule="modes.shadow"} 4`,
		`sluice_ratelimit_near_limit{rule="modes.shadow"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestShadowMode(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	for i := range 3 {
		resp := ta.ask(t, "modes", desc("shadow", "x"))
		if resp.OverallCode != ok || resp.Statuses[0].Code != ok {
			t.Fatalf("request %d: got %v, want OK (shadow mode)", i, resp)
		}
	}
}

func TestGlobalShadowMode(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, func(o *app.Options) { o.GlobalShadowMode = true })
	ta.ask(t, "modes", desc("counter", "x"))
	for range 10 {
		ta.ask(t, "modes", desc("counter", "x"))
	}
	resp := ta.ask(t, "modes", desc("counter", "x"))
	if resp.OverallCode != ok || resp.Statuses[0].Code != over {
		t.Fatalf("got overall %v, status %v; want overall OK with the descriptor still OVER_LIMIT", resp.OverallCode, resp.Statuses[0].Code)
	}
}

func TestQuotaMode(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	// As in envoyproxy/ratelimit main (PR #1059), a quota-mode descriptor
	// over its limit keeps OVER_LIMIT, and the request is over once every
	// quota descriptor is: a allows 1, b allows 2.
	var got []string
	for range 4 {
		resp := ta.ask(t, "modes", desc("quota_a", "x"), desc("quota_b", "x"))
		line := resp.OverallCode.String()
		for _, st := range resp.Statuses {
			line += fmt.Sprintf(" %v/%d/%d/%t", st.Code, st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining, st.DurationUntilReset != nil)
		}
		got = append(got, line)
	}
	want := []string{
		"OK OK/1/0/true OK/2/1/true",
		"OK OVER_LIMIT/1/0/true OK/2/0/true",
		"OVER_LIMIT OVER_LIMIT/1/0/true OVER_LIMIT/2/0/true",
		"OVER_LIMIT OVER_LIMIT/1/0/true OVER_LIMIT/2/0/true",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestReplaces(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	for i := range 3 {
		resp := ta.ask(t, "modes", desc("old", "x"), desc("older", "x"), desc("new", "x"))
		if resp.OverallCode != ok {
			t.Fatalf("request %d: got %v, want OK (old rules replaced)", i, resp)
		}
		if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit != nil {
			t.Fatalf("request %d: replaced descriptors got limits %v", i, resp.Statuses)
		}
	}
	// Without the replacing descriptor the old rule applies.
	ta.ask(t, "modes", desc("old", "y"))
	if resp := ta.ask(t, "modes", desc("old", "y")); resp.OverallCode != over {
		t.Fatalf("old rule alone: got %v, want OVER_LIMIT", resp.OverallCode)
	}
}

func TestHitsAddend(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	resp := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", HitsAddend: 4, Descriptors: []*rlcommon.RateLimitDescriptor{desc("counter", "a")}})
	if resp.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("hits_addend 4: got remaining %d, want 6", resp.Statuses[0].LimitRemaining)
	}
	// An explicit per-descriptor 0 peeks.
	d := desc("counter", "a")
	d.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		if got := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{d}}).Statuses[0].LimitRemaining; got != 6 {
			t.Fatalf("peek: got remaining %d, want 6", got)
		}
	}
	// A per-descriptor addend beats the request's.
	d2 := desc("counter", "a")
	d2.HitsAddend = wrapperspb.UInt64(2)
	if got := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", HitsAddend: 5, Descriptors: []*rlcommon.RateLimitDescriptor{d2}}).Statuses[0].LimitRemaining; got != 4 {
		t.Fatalf("per-descriptor addend: got remaining %d, want 4", got)
	}
	// Negative hits give back.
	d3 := desc("counter", "a")
	d3.HitsAddend = wrapperspb.UInt64(3)
	d3.IsNegativeHits = true
	if got := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{d3}}).Statuses[0].LimitRemaining; got != 7 {
		t.Fatalf("negative hits: got remaining %d, want 7", got)
	}
}

func TestHugeHitsAddendsNeverWrapTheCounter(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	huge := desc("database", "users")
	huge.HitsAddend = wrapperspb.UInt64(math.MaxInt64)
	steps := []struct {
		name string
		d    *rlcommon.RateLimitDescriptor
		want rlsv3.RateLimitResponse_Code
	}{
		{name: "the largest hits_addend is over the limit", d: huge, want: over},
		{name: "the largest hits_addend again is still over the limit", d: huge, want: over},
		{name: "one more hit in the window is still over the limit", d: desc("database", "users"), want: over},
	}
	for _, s := range steps {
		resp := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{s.d}})
		if resp.OverallCode != s.want || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("%s: got %v with %d remaining, want %v with 0 remaining", s.name, resp.OverallCode, resp.Statuses[0].LimitRemaining, s.want)
		}
	}
}

func TestLimitOverride(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	d := desc("counter", "o")
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	req := &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	st := ta.askReq(t, req).Statuses[0]
	if st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.LimitRemaining != 1 {
		t.Fatalf("got %v, want the override's 2 per hour with 1 remaining", st)
	}
	ta.askReq(t, req)
	if resp := ta.askReq(t, req); resp.OverallCode != over {
		t.Fatalf("third call: got %v, want OVER_LIMIT", resp.OverallCode)
	}
}

// TestALimitOverrideOfAnotherUnitCountsApart: a request's limit override
// of another unit than the rule's counts in a window of its own, as in
// envoyproxy/ratelimit, whose Redis key ends in the window's start: the
// rule's count goes on between the override's hits, and the override's
// between the rule's.
func TestALimitOverrideOfAnotherUnitCountsApart(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	ta.clock.Add(90 * time.Second) // the minute and the hour start apart
	plain := &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{desc("counter", "u")}}
	d := desc("counter", "u")
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	overridden := &rlsv3.RateLimitRequest{Domain: "modes", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	for i := uint32(1); i <= 3; i++ {
		if st := ta.askReq(t, plain).Statuses[0]; st.LimitRemaining != 10-i {
			t.Fatalf("the rule's hit %d: got %v, want %d remaining of its 10 a minute", i, st, 10-i)
		}
		if st := ta.askReq(t, overridden).Statuses[0]; st.LimitRemaining != 5-i {
			t.Fatalf("the override's hit %d: got %v, want %d remaining of its 5 an hour", i, st, 5-i)
		}
	}
}

func TestBurstExtensionUsesGCRA(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	// burst 2 at 60 per minute: two at once, then one a second.
	for i := range 2 {
		if resp := ta.ask(t, "modes", desc("smooth", "x")); resp.OverallCode != ok {
			t.Fatalf("request %d: got %v, want OK", i, resp)
		}
	}
	resp := ta.ask(t, "modes", desc("smooth", "x"))
	if resp.OverallCode != over || resp.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("third: got %v, want OVER_LIMIT retrying in 1s", resp)
	}
	ta.clock.Add(time.Second)
	if resp := ta.ask(t, "modes", desc("smooth", "x")); resp.OverallCode != ok {
		t.Fatalf("a second later: got %v, want OK", resp)
	}
}

func TestUnitMultiplierExtension(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, nil)
	st := ta.ask(t, "modes", desc("multi", "x")).Statuses[0]
	if st.CurrentLimit.GetUnitMultiplier().GetValue() != 30 {
		t.Fatalf("got unit_multiplier %v, want 30", st.CurrentLimit.GetUnitMultiplier())
	}
	if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > 30*time.Second {
		t.Fatalf("got reset %s, want within the 30s window", d)
	}
	ta.ask(t, "modes", desc("multi", "x"))
	ta.clock.Add(20 * time.Second) // still inside the 30s window
	if resp := ta.ask(t, "modes", desc("multi", "x")); resp.OverallCode != over {
		t.Fatalf("third in the window: got %v, want OVER_LIMIT", resp.OverallCode)
	}
	// Without the extension a plain rule reports no multiplier.
	if st := ta.ask(t, "modes", desc("counter", "m")).Statuses[0]; st.CurrentLimit.GetUnitMultiplier() != nil {
		t.Fatalf("plain rule: got unit_multiplier %v, want none", st.CurrentLimit.GetUnitMultiplier())
	}
}

func TestResponseHeaders(t *testing.T) {
	ta := start(t, map[string]string{"modes.yaml": modesConfig}, func(o *app.Options) { o.ResponseHeaders = true })
	resp := ta.ask(t, "modes", desc("counter", "h"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Limit"] != "10" || got["RateLimit-Remaining"] != "9" || got["RateLimit-Reset"] != "60" {
		t.Fatalf("got headers %v, want limit 10, remaining 9, reset 60", got)
	}
}

func TestTheSameDescriptorTwiceCountsTwice(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	// Like envoyproxy/ratelimit's pipelined INCRBYs, the second copy sees
	// the first one's hit.
	resp := ta.ask(t, "basic", desc("ip", "4.4.4.4"), desc("ip", "4.4.4.4"), desc("database", "users"), desc("ip", "4.4.4.4"))
	var left []uint32
	for _, st := range resp.Statuses {
		left = append(left, st.LimitRemaining)
	}
	if fmt.Sprint(left) != "[2 1 19 0]" {
		t.Fatalf("got remaining %v, want [2 1 19 0]", left)
	}
	resp = ta.ask(t, "basic", desc("ip", "4.4.4.4"), desc("ip", "4.4.4.4"))
	if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[1].Code != over {
		t.Fatalf("got %v, want both copies over the limit", resp)
	}
}
