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

func TestQuotaModeNeverMakesTheRequestOverTheLimit(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.ResponseHeaders = true })
	steps := []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		want string
	}{
		{name: "the first request is within the limit", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a")},
			want: "OK OK/1/0/true"},
		{name: "over the limit answers OK without a reset time", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a")},
			want: "OK OK/1/0/false"},
		{name: "a quota descriptor over beside a normal one within is OK", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a"), desc("plain", "a")},
			want: "OK OK/1/0/false OK/1/0/true"},
		{name: "a normal descriptor over still makes the request over", ds: []*rlcommon.RateLimitDescriptor{desc("quota", "a"), desc("blocked", "a")},
			want: "OVER_LIMIT OK/1/0/false OVER_LIMIT/0/0/true"},
	}
	for _, s := range steps {
		resp := ta.ask(t, "conf", s.ds...)
		if got := statusLine(resp); got != s.want {
			t.Fatalf("%s: got %q, want %q", s.name, got, s.want)
		}
	}
	// The headers still describe a quota descriptor over its limit.
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
	if got, want := statusLine(ta.ask(t, "conf", desc("plain", "g"), desc("blocked", "g"))), "OK OK/1/0/false OK/0/0/false"; got != want {
		t.Fatalf("got %q, want %q (every rule in quota mode)", got, want)
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
	// The quota descriptor asked for 2 hits of 1: over, answered OK.
	want := `{"descriptors":[{"entries":["plain=m"]},{"entries":["quota=m"],"hitsAddend":2}],"domain":"conf","hitsAddend":3,"quotaModeEnabled":true,"quotaModeViolations":[1]}`
	if compact(string(got)) != want {
		t.Fatalf("got metadata %s, want %s", got, want)
	}
	if resp := ta.ask(t, "conf", desc("plain", "n")); resp.DynamicMetadata.GetFields()["quotaModeEnabled"].GetBoolValue() {
		t.Fatalf("no quota rule matched: got %v, want quotaModeEnabled false", resp.DynamicMetadata)
	}
	plain := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	if resp := plain.ask(t, "conf", desc("plain", "m")); resp.DynamicMetadata != nil {
		t.Fatalf("without the flag: got metadata %v, want none", resp.DynamicMetadata)
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
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	for _, want := range []string{
		`sluice_ratelimit_total_hits{rule="conf.vm.sub_s1"} 1`,   // an empty value adds no "_"
		`sluice_ratelimit_total_hits{rule="conf.vm_A.sub_s2"} 1`, // value_to_metric at both levels
		`sluice_ratelimit_total_hits{rule="conf.shared_p*"} 1`,   // share_threshold keeps the pattern
		`sluice_ratelimit_total_hits{rule="conf.st_x*"} 2`,       // ... with detailed_metric too
		`sluice_ratelimit_total_hits{rule="conf.ip_10_1_2_3"} 1`, // an IPv4 address's dots become "_"
		`sluice_ratelimit_total_hits{rule="conf.ip_a_b_c"} 1`,    // and so do ':' and '|'
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
