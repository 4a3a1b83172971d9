package app_test

import (
	"fmt"
	"io"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/app"
)

// An oversized Envoy request is refused, naming the cap, before any store
// work (issue 17, bug 2: one 80,000-descriptor request held Redis for half
// a second).
func TestOversizedRequestsAreRefusedNamingTheCap(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) {
		o.MaxDescriptors, o.MaxDescriptorEntries, o.MaxDescriptorEntryBytes = 3, 2, 16
	})
	many := func(n int) []*rlcommon.RateLimitDescriptor {
		var ds []*rlcommon.RateLimitDescriptor
		for i := range n {
			ds = append(ds, desc("plain", fmt.Sprint(i)))
		}
		return ds
	}
	tests := []struct {
		name   string
		domain string // "conf" when empty
		ds     []*rlcommon.RateLimitDescriptor
		want   string // in the message; "" for an answer
	}{
		{name: "as many descriptors as the cap are answered", ds: many(3)},
		{name: "one descriptor more is refused", ds: many(4), want: "4 descriptors, more than the 3 allowed (--max-descriptors)"},
		{name: "too many entries in one descriptor", ds: []*rlcommon.RateLimitDescriptor{desc("vm", "a", "sub", "s1", "x", "y")},
			want: "descriptor 0 has 3 entries, more than the 2 allowed (--max-descriptor-entries)"},
		{name: "a value too long", ds: []*rlcommon.RateLimitDescriptor{desc("plain", strings.Repeat("v", 17))},
			want: "descriptor 0 entry 0 has a key or value of 17 bytes, more than the 16 allowed (--max-descriptor-entry-bytes)"},
		// An unknown domain's name is kept for its statistics (1,000
		// of them): 40 of 3 MiB took 143 MB before the cap.
		{name: "a domain too long", domain: strings.Repeat("d", 17), ds: many(1),
			want: "the domain is 17 bytes, more than the 16 allowed (--max-descriptor-entry-bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain := tt.domain
			if domain == "" {
				domain = "conf"
			}
			_, err := ta.client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: tt.ds})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want an answer", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("got %v, want InvalidArgument with %q", err, tt.want)
			}
		})
	}
	// Nothing of the refused requests was counted: plain=3 is untouched.
	if got := ta.ask(t, "conf", desc("plain", "3")).Statuses[0].GetCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("plain=3 after the refused requests: got %v, want OK (nothing counted)", got)
	}
}

func TestCapFlagsAreChecked(t *testing.T) {
	for _, args := range [][]string{{"--max-descriptors", "0"}, {"--max-descriptor-entries", "-1"}, {"--max-descriptor-entry-bytes", "0"}} {
		if _, err := app.ParseServe(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: got %v, want an error naming the flag", args, err)
		}
	}
}

// With --request-limits=false and --negative-hits=false a caller cannot
// change its own counting (issue 17, item 6).
func TestRequestLimitsAndNegativeHitsCanBeTurnedOff(t *testing.T) {
	override := func(key, value string) *rlcommon.RateLimitDescriptor {
		d := desc(key, value)
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: 3}
		return d
	}
	negative := func(key, value string) *rlcommon.RateLimitDescriptor {
		d := desc(key, value)
		d.IsNegativeHits = true
		return d
	}
	for _, tc := range []struct {
		name      string
		off       bool
		wantLimit uint32 // current_limit of a descriptor carrying its own limit
		wantCount string // overall code after hit, give back, hit on a limit of 1
	}{
		{name: "honoured by default", wantLimit: 1000, wantCount: "OK"},
		{name: "ignored when turned off", off: true, wantLimit: 1, wantCount: "OVER_LIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) {
				o.RequestLimits, o.NegativeHits = !tc.off, !tc.off
			})
			if got := ta.ask(t, "conf", override("plain", "o")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != tc.wantLimit {
				t.Errorf("a request's own limit: got current_limit %d, want %d", got, tc.wantLimit)
			}
			ta.ask(t, "conf", desc("plain", "n"))
			ta.ask(t, "conf", negative("plain", "n"))
			if got := ta.ask(t, "conf", desc("plain", "n")).OverallCode.String(); got != tc.wantCount {
				t.Errorf("hit, negative hit, hit on a limit of 1: got %s, want %s", got, tc.wantCount)
			}
		})
	}
}

// --retry-after-header adds retry-after to OVER_LIMIT answers: the seconds
// until the first over-limit descriptor frees, rounded up (issue 15,
// item 2), for fixed windows and GCRA rules alike.
func TestRetryAfterHeader(t *testing.T) {
	const cfg = `
domain: ra
descriptors:
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: smooth
    rate_limit: {unit: minute, requests_per_unit: 6, burst: 1}
`
	header := func(resp *rlsv3.RateLimitResponse) string {
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() == "retry-after" {
				return h.GetValue()
			}
		}
		return ""
	}
	ta := start(t, map[string]string{"ra.yaml": cfg}, func(o *app.Options) { o.RetryAfterHeader = true })
	// The fake clock stands on an hour boundary: a new hour window frees
	// in 3600 s, a minute window in 60 s, the GCRA rule (one per 10 s) in 10.
	if got := header(ta.ask(t, "ra", desc("hour", "a"), desc("minute", "a"))); got != "" {
		t.Fatalf("within the limits: got retry-after %q, want none", got)
	}
	if got := header(ta.ask(t, "ra", desc("hour", "a"), desc("minute", "a"))); got != "60" {
		t.Errorf("both over: got retry-after %q, want 60 (the first to free)", got)
	}
	ta.ask(t, "ra", desc("smooth", "s"))
	if got := header(ta.ask(t, "ra", desc("smooth", "s"))); got != "10" {
		t.Errorf("a GCRA rule over: got retry-after %q, want 10", got)
	}
	off := start(t, map[string]string{"ra.yaml": cfg}, nil)
	off.ask(t, "ra", desc("hour", "b"))
	if got := header(off.ask(t, "ra", desc("hour", "b"))); got != "" {
		t.Errorf("without the option: got retry-after %q, want none", got)
	}
}

func TestRetryAfterHeaderFromTheEnvironment(t *testing.T) {
	o, err := app.ParseServe(nil, func(k string) string {
		return map[string]string{"RETRY_AFTER_HEADER_ENABLED": "true"}[k]
	}, io.Discard)
	if err != nil || !o.RetryAfterHeader || o.Stats.StatsdAddr != "" {
		t.Fatalf("got %v, retry-after %t, statsd %q; want the header on and no StatsD (the variable is not envoyproxy/ratelimit's)", err, o.RetryAfterHeader, o.Stats.StatsdAddr)
	}
}

// The default caps take what a real Envoy sends: a descriptor value as long
// as Envoy's default header limit (max_request_headers_kb, 60 KiB for all
// of a request's headers) is counted, as envoyproxy/ratelimit counts it;
// only a longer one than any such header is refused.
func TestTheDefaultCapsTakeWhatEnvoySends(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	header := strings.Repeat("h", 60<<10)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ta.ask(t, "conf", desc("plain", header)).GetOverallCode(); got != want {
			t.Fatalf("call %d with a 60 KiB value: got %v, want %v (one an hour)", i+1, got, want)
		}
	}
	_, err := ta.client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "conf",
		Descriptors: []*rlcommon.RateLimitDescriptor{desc("plain", strings.Repeat("h", 64<<10+1))}})
	if want := "65537 bytes, more than the 65536 allowed (--max-descriptor-entry-bytes)"; status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("a value past 64 KiB: got %v, want InvalidArgument with %q", err, want)
	}
}
