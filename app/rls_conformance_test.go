package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/app"
)

// These tests pin answers that were compared with envoyproxy/ratelimit's
// own (same files, same requests) where Sluice used to differ.

const conformanceConfig = `
domain: conf
descriptors:
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plain
    rate_limit: {name: plain_rule, unit: hour, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: allow
    rate_limit:
      unlimited: true
      replaces: [{name: plain_rule}]
  - key: vm
    value_to_metric: true
    descriptors:
      - key: sub
        value: s*
        value_to_metric: true
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: shared
    value: p*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: st
    value: x*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
`

// statusLine describes a response compactly: the overall code, then per
// descriptor code/requests_per_unit/remaining/has-a-reset-time.
func statusLine(resp *rlsv3.RateLimitResponse) string {
	line := resp.OverallCode.String()
	for _, st := range resp.Statuses {
		line += fmt.Sprintf(" %v/%d/%d/%t", st.Code, st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining, st.DurationUntilReset != nil)
	}
	return line
}

func TestQuotaModeKeepsOverLimitAndDecidesWhenEveryQuotaIsOver(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.ResponseHeaders = true })
	steps := []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		want string
	}{
		{name: "the first request is within the limit", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a")},
			want: "OK OK/1/0/true"},
		{name: "the only quota descriptor over makes the request over", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a")},
			want: "OVER_LIMIT OVER_LIMIT/1/0/true"},
		{name: "every quota descriptor over makes the request over beside a normal one within", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a"), desc("plain", "a")},
			want: "OVER_LIMIT OVER_LIMIT/1/0/true OK/1/0/true"},
		{name: "a quota descriptor over beside another within is OK, its status still over", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a"), desc("quota", "b")},
			want: "OK OVER_LIMIT/1/0/true OK/1/0/true"},
		{name: "a normal descriptor over makes the request over", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "c"), desc("blocked", "a")},
			want: "OVER_LIMIT OK/1/0/true OVER_LIMIT/0/0/true"},
	}
	for _, s := range steps {
		resp := ta.ask(t, "conf", s.ds...)
		if got := statusLine(resp); got != s.want {
			t.Fatalf("%s: got %q, want %q", s.name, got, s.want)
		}
	}
	// The headers describe a quota descriptor over its limit.
	resp := ta.ask(t, "conf", desc("quota", "a"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Limit"] != "1" || got["RateLimit-Remaining"] != "0" || got["RateLimit-Reset"] != "3600" {
		t.Fatalf("got headers %v, want limit 1, remaining 0, reset 3600", got)
	}
}

func TestGlobalQuotaMode(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.GlobalQuotaMode = true })
	ta.ask(t, "conf", desc("plain", "g"))
	steps := []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		want string
	}{
		{name: "every descriptor over makes the request over", ds: []*rlcommon.RateLimitDescriptor{desc("plain", "g"), desc("blocked", "g")},
			want: "OVER_LIMIT OVER_LIMIT/1/0/true OVER_LIMIT/0/0/true"},
		{name: "one within makes it OK", ds: []*rlcommon.RateLimitDescriptor{desc("plain", "h"), desc("blocked", "g")},
			want: "OK OK/1/0/true OVER_LIMIT/0/0/true"},
		{name: "a descriptor with no rule counts as a quota within", ds: []*rlcommon.RateLimitDescriptor{desc("nomatch", "h"), desc("blocked", "g")},
			want: "OK OK/0/0/false OVER_LIMIT/0/0/true"},
	}
	for _, s := range steps {
		if got := statusLine(ta.ask(t, "conf", s.ds...)); got != s.want {
			t.Fatalf("%s: got %q, want %q", s.name, got, s.want)
		}
	}
}

func TestResponseDynamicMetadata(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.ResponseDynamicMetadata = true })
	d := desc("quota", "m")
	d.HitsAddend = wrapperspb.UInt64(2)
	resp := ta.askReq(t, &rlsv3.RateLimitRequest{Domain: "conf", HitsAddend: 3,
		Descriptors: []*rlcommon.RateLimitDescriptor{desc("plain", "m"), d}})
	got, err := protojson.MarshalOptions{}.Marshal(resp.DynamicMetadata)
	if err != nil {
		t.Fatal(err)
	}
	// No quotaModeViolations or quotaModeEnabled: upstream dropped them.
	want := `{"descriptors":[{"entries":["plain=m"]},{"entries":["quota=m"],"hitsAddend":2}],"domain":"conf","hitsAddend":3}`
	if compact(string(got)) != want {
		t.Fatalf("got metadata %s, want %s", got, want)
	}
	plain := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	if resp := plain.ask(t, "conf", desc("plain", "m")); resp.DynamicMetadata != nil {
		t.Fatalf("without the flag: got metadata %v, want none", resp.DynamicMetadata)
	}
}

// metadataConfig gives descriptors metadata to merge; d, e and h show
// where envoyproxy/ratelimit returns none (see Rule.ResponseMetadata).
const metadataConfig = `
domain: meta
descriptors:
  - key: a
    metadata: {team: alpha, tier: 1, nested: {x: 1, y: two}, list: [1, b]}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: b
    metadata: {team: beta, extra: true, nested: {y: three, z: 3.5}}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: c
    metadata: {cee: yes}
    rate_limit: {unlimited: true}
  - key: d
    detailed_metric: true
    metadata: {dee: 1}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: e
    value_to_metric: true
    metadata: {eee: 1}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: f
    metadata: {parent: 1}
    descriptors:
      - key: g
        metadata: {child: 1}
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: h
    detailed_metric: true
    metadata: {aitch: 1}
    rate_limit: {unit: hour, requests_per_unit: 5}
    descriptors:
      - key: i
        rate_limit: {unit: hour, requests_per_unit: 5}
`

func TestResponseDynamicMetadataMergesTheMetadataOfDescriptorsThatPassed(t *testing.T) {
	ta := start(t, map[string]string{"meta.yaml": metadataConfig}, func(o *app.Options) { o.ResponseDynamicMetadata = true })
	fg := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "f", Value: "1"}, {Key: "g", Value: "2"}}}
	// Each answer is envoyproxy/ratelimit f2fb157's on the same file and
	// requests: YAML 1.1 reads the key y as true; a key set first keeps its
	// value; maps merge; unlimited and over-limit descriptors add nothing.
	steps := []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		want string
	}{
		{name: "three descriptors merge in request order", ds: []*rlcommon.RateLimitDescriptor{desc("a", "1"), desc("b", "1"), desc("c", "1")},
			want: `"metadata":{"extra":true,"list":[1,"b"],"nested":{"true":"two","x":1,"z":3.5},"team":"alpha","tier":1}`},
		{name: "a descriptor over its limit adds nothing", ds: []*rlcommon.RateLimitDescriptor{desc("b", "1"), desc("a", "1")},
			want: `"metadata":{"list":[1,"b"],"nested":{"true":"two","x":1},"team":"alpha","tier":1}`},
		{name: "detailed_metric on a leaf and value_to_metric lose it, as upstream", ds: []*rlcommon.RateLimitDescriptor{desc("d", "1"), desc("e", "1")},
			want: ``},
		{name: "the matched node's metadata, and detailed_metric with children keeps it", ds: []*rlcommon.RateLimitDescriptor{fg, desc("h", "1")},
			want: `"metadata":{"aitch":1,"child":1}`},
	}
	for _, s := range steps {
		resp := ta.ask(t, "meta", s.ds...)
		got, err := protojson.MarshalOptions{}.Marshal(resp.DynamicMetadata.GetFields()["metadata"].GetStructValue())
		if err != nil {
			t.Fatal(err)
		}
		wantMeta := strings.TrimPrefix(s.want, `"metadata":`)
		if s.want == "" {
			wantMeta = "{}"
		}
		if compact(string(got)) != wantMeta {
			t.Fatalf("%s: got metadata %s, want %s", s.name, got, wantMeta)
		}
	}
}

// compact drops the spaces protojson may add.
func compact(s string) string { return strings.ReplaceAll(s, " ", "") }

func TestAnUnlimitedRuleStillReplaces(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	for i := range 3 {
		resp := ta.ask(t, "conf", desc("allow", "u"), desc("plain", "u"))
		if got, want := statusLine(resp), "OK OK/0/4294967295/false OK/0/0/false"; got != want {
			t.Fatalf("request %d: got %q, want %q (plain_rule replaced)", i, got, want)
		}
	}
}

func TestMetricKeysAreEnvoyStatsKeys(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	ta.ask(t, "conf", desc("vm", "", "sub", "s1"))
	ta.ask(t, "conf", desc("vm", "A", "sub", "s2"))
	ta.ask(t, "conf", desc("shared", "p1"))
	ta.ask(t, "conf", desc("st", "x1"))
	ta.ask(t, "conf", desc("st", "x2"))
	ta.ask(t, "conf", desc("ip", "10.1.2.3"))
	ta.ask(t, "conf", desc("ip", "a:b|c"))
	ta.ask(t, "conf", desc("route", "api", "http_method", "GET", "subject_id", "123"))
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	for _, want := range []string{
		`sluice_ratelimit_total_hits{rule="conf.vm.sub_s1"} 1`,   // an empty value adds no "_"
		`sluice_ratelimit_total_hits{rule="conf.vm_A.sub_s2"} 1`, // value_to_metric at both levels
		`sluice_ratelimit_total_hits{rule="conf.shared_p*"} 1`,   // share_threshold keeps the pattern
		`sluice_ratelimit_total_hits{rule="conf.st_x*"} 2`,       // ... with detailed_metric too
		`sluice_ratelimit_total_hits{rule="conf.ip_10_1_2_3"} 1`, // an IPv4 address's dots become "_"
		`sluice_ratelimit_total_hits{rule="conf.ip_a_b_c"} 1`,    // and so do ':' and '|'
		// README "Example 10": value_to_metric on the ancestors only.
		`sluice_ratelimit_total_hits{rule="conf.route_api.http_method_GET.subject_id"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestJSONErrorsAreEnvoysPlainText(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	resp, err := ta.http.Post("http://"+ta.HTTPAddr()+"/json", "application/json", strings.NewReader(`{"domain": ""}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusBadRequest || ct != "text/plain; charset=utf-8" {
		t.Fatalf("got %d %q, want 400 text/plain", resp.StatusCode, ct)
	}
}
